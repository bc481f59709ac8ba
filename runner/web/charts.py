"""The job page's small chart, drawn on the server as SVG: the longest run of each slot and
its latest start after the slot, over the grid's window. Only numbers go into the drawing
(the template places them in attributes, escaped like everything else): no script, no style.
"""

from __future__ import annotations

from typing import Any

WIDTH, HEIGHT, PAD = 640, 120, 4


def _points(values: list[float], top: float) -> str:
    """The polyline of ``values`` on a scale up to ``top``; a value above it is drawn at the
    top edge (the caption says how many were)."""
    if not values:
        return ""
    step = (WIDTH - 2 * PAD) / max(len(values) - 1, 1)
    scale = (HEIGHT - 2 * PAD) / top if top > 0 else 0.0
    return " ".join(f"{PAD + i * step:.1f},{HEIGHT - PAD - min(v, top) * scale:.1f}"
                    for i, v in enumerate(values))


def robust_top(values: list[float]) -> float:
    """The chart's scale: the largest value, unless a few outliers dwarf the rest (a
    backfilled slot started days after it, issue 30): then 1.5 x the 90th percentile of the
    values (nearest rank), so that the typical values keep the height of the chart and the
    outliers are drawn clipped at the top. Fewer than 10 values: the largest."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    largest = ordered[-1]
    if len(ordered) < 10:
        return largest
    p90 = ordered[max(0, -(-9 * len(ordered) // 10) - 1)]
    return largest if largest <= 1.5 * p90 or p90 <= 0 else 1.5 * p90


def timings_chart(timings: list[dict[str, Any]]) -> dict[str, Any]:
    """Polylines for the duration and the start lag (seconds) of each slot, oldest first,
    on one scale robust to outliers (``robust_top`` of both series); ``clipped`` counts the
    points above it, drawn at the top, and the maxima are still reported."""
    durations = [max(float(t["duration_s"] or 0.0), 0.0) for t in timings]
    lags = [max(float(t["start_lag_s"] or 0.0), 0.0) for t in timings]
    top = robust_top([*durations, *lags])
    return {
        "width": WIDTH, "height": HEIGHT, "slots": len(timings),
        "duration_points": _points(durations, top), "lag_points": _points(lags, top),
        "top_seconds": top,
        "clipped": sum(1 for v in (*durations, *lags) if v > top),
        "max_duration_s": max(durations, default=None), "max_lag_s": max(lags, default=None),
        "first_slot": timings[0]["schedule_slot"] if timings else None,
        "last_slot": timings[-1]["schedule_slot"] if timings else None,
    }
