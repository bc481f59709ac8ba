"""The job page's small chart, drawn on the server as SVG: the longest run of each slot and
its latest start after the slot, over the grid's window. Only numbers go into the drawing
(the template places them in attributes, escaped like everything else): no script, no style.
"""

from __future__ import annotations

from typing import Any

WIDTH, HEIGHT, PAD = 640, 120, 4


def _points(values: list[float], top: float) -> str:
    if not values:
        return ""
    step = (WIDTH - 2 * PAD) / max(len(values) - 1, 1)
    scale = (HEIGHT - 2 * PAD) / top if top > 0 else 0.0
    return " ".join(f"{PAD + i * step:.1f},{HEIGHT - PAD - v * scale:.1f}" for i, v in enumerate(values))


def timings_chart(timings: list[dict[str, Any]]) -> dict[str, Any]:
    """Polylines for the duration and the start lag (seconds) of each slot, oldest first,
    on one scale: the larger of the two maxima."""
    durations = [max(float(t["duration_s"] or 0.0), 0.0) for t in timings]
    lags = [max(float(t["start_lag_s"] or 0.0), 0.0) for t in timings]
    top = max([*durations, *lags, 0.0])
    return {
        "width": WIDTH, "height": HEIGHT, "slots": len(timings),
        "duration_points": _points(durations, top), "lag_points": _points(lags, top),
        "top_seconds": top,
        "max_duration_s": max(durations, default=None), "max_lag_s": max(lags, default=None),
        "first_slot": timings[0]["schedule_slot"] if timings else None,
        "last_slot": timings[-1]["schedule_slot"] if timings else None,
    }
