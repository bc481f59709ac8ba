"""Every zone name the runner accepts reads alike in PostgreSQL and in Python's zoneinfo.

The loop computes slots in Python (zoneinfo); the gap scan and the watermark advance compute
them in SQL (``timezone(zone, t)``). A zone name the two read differently gives slots that
differ, so the runner refuses it when a job is registered. This file walks every zone file
Python can load (each directory of ``zoneinfo.TZPATH``, then the ``tzdata`` package, the
order ``ZoneInfo`` looks in), and checks that each name the runner accepts has the same UTC
offset in PostgreSQL as in Python at: January and July of every other year 1900-2100, both
sides of each transition in the file (RFC 8536 data) and of each transition its footer rule
gives in 2038-2039, and the instants around two leap seconds. The next odd name cannot slip in
unnoticed: it either reads alike or the runner must refuse it.
"""

from __future__ import annotations

import struct
import zoneinfo
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runner import JobDefinitionError, Runner
from runner.model.schedule import ScheduleError, parse_schedule

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def unix(t: datetime) -> int:
    return (t - EPOCH) // timedelta(seconds=1)


FIRST, LAST = unix(datetime(1900, 1, 1, tzinfo=UTC)), unix(datetime(2101, 1, 1, tzinfo=UTC))
# January and July of every other year, and one second before and after two inserted leap
# seconds (1972-06-30 and 2016-12-31 23:59:60), in Unix seconds
SAMPLES = [unix(datetime(y, m, 15, 12, tzinfo=UTC)) for y in range(1900, 2101, 2) for m in (1, 7)]
SAMPLES += [unix(datetime(1972, 6, 30, 23, 59, 59, tzinfo=UTC)), unix(datetime(1972, 7, 1, tzinfo=UTC)),
            unix(datetime(2016, 12, 31, 23, 59, 59, tzinfo=UTC)), unix(datetime(2017, 1, 1, tzinfo=UTC))]


def zone_roots() -> list[Path]:
    roots = [Path(p) for p in zoneinfo.TZPATH if Path(p).is_dir()]
    try:
        import tzdata  # type: ignore[import-untyped]
    except ImportError:
        pass
    else:
        roots.append(Path(tzdata.__file__).parent / "zoneinfo")
    return roots


@cache
def zone_files() -> dict[str, bytes]:
    """Every TZif file by the name ZoneInfo loads it under (the first root holding it wins)."""
    found: dict[str, bytes] = {}
    for root in zone_roots():
        for path in sorted(root.rglob("*")):
            name = path.relative_to(root).as_posix()
            if name in found or not path.is_file():
                continue
            data = path.read_bytes()
            if data[:4] == b"TZif":
                found[name] = data
    return found


def runner_accepts(zone: str) -> bool:
    try:
        parse_schedule(every="1h", timezone=zone)
    except ScheduleError as exc:
        assert exc.field == "timezone", exc
        return False
    return True


def tzif_transitions(data: bytes) -> tuple[list[int], bytes]:
    """(transition instants in Unix seconds, footer TZ rule) of a TZif file (RFC 8536)."""
    def counts(at: int) -> tuple[int, ...]:  # isutcnt isstdcnt leapcnt timecnt typecnt charcnt
        return struct.unpack(">6l", data[at + 20:at + 44])

    isut, isstd, leap, timecnt, typecnt, charcnt = counts(0)
    if data[4:5] == b"\x00":
        return list(struct.unpack(f">{timecnt}l", data[44:44 + 4 * timecnt])), b""
    at = 44 + timecnt * 5 + typecnt * 6 + charcnt + leap * 8 + isstd + isut  # skip the v1 block
    timecnt = counts(at)[3]
    times = list(struct.unpack(f">{timecnt}q", data[at + 44:at + 44 + 8 * timecnt]))
    return times, data.rsplit(b"\n", 2)[-2]


@cache
def footer_transitions(footer: bytes, sample_zone: str) -> tuple[int, ...]:
    """The offset changes in 2038-2039 (past the explicit data of any file) of the zones with
    this footer rule, in Unix seconds: a zone with it is probed daily and bisected."""
    zone = zoneinfo.ZoneInfo(sample_zone)

    def offset(s: int) -> timedelta | None:
        return (EPOCH + timedelta(seconds=s)).astimezone(zone).utcoffset()

    found = []
    day = 86_400
    s, end = unix(datetime(2038, 1, 1, tzinfo=UTC)), unix(datetime(2040, 1, 1, tzinfo=UTC))
    before = offset(s)
    while s < end:
        after = offset(s + day)
        if after != before:
            lo, hi = s, s + day
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if offset(mid) == before else (lo, mid)
            found.append(hi)
        s, before = s + day, after
    return tuple(found)


def instants_for(data: bytes, footer_zone: str) -> list[int]:
    """Where to compare a zone file's offsets, in Unix seconds: both sides of each of its
    transitions, and the fixed samples."""
    times, footer = tzif_transitions(data)
    changes = [s for s in times if FIRST <= s < LAST]
    if footer:
        changes += footer_transitions(footer, footer_key.setdefault(footer, footer_zone))
    return sorted({*SAMPLES, *(s + d for s in changes for d in (-1, 0))})


footer_key: dict[bytes, str] = {}  # one zone name per footer rule, so each rule is probed once

COMPARE = """
SELECT u.zone, u.at, u.python, x.postgres
FROM unnest(%b::text[], %b::int8[], %b::int4[]) AS u(zone, at, python)
CROSS JOIN LATERAL (
    SELECT extract(epoch FROM timezone(u.zone, t.t) - timezone('UTC', t.t))::int4 AS postgres
    FROM (SELECT to_timestamp(u.at) AS t) AS t
) AS x
WHERE x.postgres IS DISTINCT FROM u.python
"""


def test_every_zone_the_runner_accepts_reads_alike_in_postgres(tx: psycopg.Connection[Any]) -> None:
    files = zone_files()
    accepted = sorted(name for name in files if runner_accepts(name))
    assert "Europe/Berlin" in accepted and "UTC" in accepted and len(accepted) > 400
    # names with the same file bytes read alike in Python: compute their offsets once
    by_file: dict[bytes, list[str]] = {}
    for name in accepted:
        by_file.setdefault(files[name], []).append(name)
    disagree: dict[str, str] = {}
    for data, names in by_file.items():
        zone = zoneinfo.ZoneInfo(names[0])
        at = instants_for(data, names[0])
        python = []
        for s in at:
            offset = (EPOCH + timedelta(seconds=s)).astimezone(zone).utcoffset()
            assert offset is not None
            python.append(offset // timedelta(seconds=1))
        try:
            with tx.transaction():
                rows = tx.execute(COMPARE, ([n for n in names for _ in at], at * len(names),
                                            python * len(names))).fetchall()
        except psycopg.Error:  # a name PostgreSQL does not know: find which
            rows = []
            for name in names:
                try:
                    with tx.transaction():
                        rows += tx.execute(COMPARE, ([name] * len(at), at, python)).fetchall()
                except psycopg.Error as exc:
                    disagree[name] = f"unknown to PostgreSQL: {str(exc).splitlines()[0]}"
        for name, s, py, pg in rows:
            disagree.setdefault(name, f"at {EPOCH + timedelta(seconds=s):%Y-%m-%dT%H:%M:%SZ}:"
                                      f" Python {py} s, PostgreSQL {pg} s")
    assert disagree == {}


def postgres_offset(conn: psycopg.Connection[Any], zone: str, t: datetime) -> float:
    row = conn.execute("SELECT extract(epoch FROM timezone(%s, %s::timestamptz) - timezone('UTC', %s::timestamptz))",
                       (zone, t, t)).fetchone()
    assert row is not None
    return float(row[0])


def test_the_walk_meets_the_names_that_disagree() -> None:
    """The walk above sees the names PostgreSQL reads otherwise, and the runner refuses them."""
    files = zone_files()
    for name in ["CET", "EET", "MET", "WET", "EST", "MST", "HST"]:
        assert name in files and not runner_accepts(name), name
    leap = [name for name in files if name.startswith("right/")]
    if leap:  # the system's tzdata may ship no right/ zones
        assert not any(runner_accepts(name) for name in leap)


def test_postgres_reads_cet_as_a_fixed_abbreviation(tx: psycopg.Connection[Any]) -> None:
    """The fact behind the refusal: in July, CET is +01:00 in PostgreSQL and +02:00 in Python."""
    july = datetime(2024, 7, 15, 12, tzinfo=UTC)
    assert (postgres_offset(tx, "CET", july), postgres_offset(tx, "Europe/Berlin", july)) == (3600, 7200)
    assert july.astimezone(zoneinfo.ZoneInfo("CET")).utcoffset() == timedelta(hours=2)


def test_postgres_counts_leap_seconds_in_right_zones(tx: psycopg.Connection[Any]) -> None:
    if "right/UTC" not in zone_files():
        pytest.skip("this system's tzdata has no right/ zones")
    t = datetime(2024, 7, 15, 12, tzinfo=UTC)
    assert postgres_offset(tx, "right/UTC", t) == -27
    assert t.astimezone(zoneinfo.ZoneInfo("right/UTC")).utcoffset() == timedelta(0)


@pytest.mark.parametrize(("zone", "hint"), [
    ("CET", "Europe/Brussels"), ("EET", "Europe/Athens"), ("MET", "Europe/Brussels"),
    ("WET", "Europe/Lisbon"), ("EST", "America/Panama"), ("MST", "America/Phoenix"),
    ("HST", "Pacific/Honolulu"),
])
def test_zone_names_postgres_reads_as_abbreviations_are_refused(zone: str, hint: str) -> None:
    with pytest.raises(JobDefinitionError) as info:
        Runner().job("settle", cron="0 2 * * *", timezone=zone)(lambda ctx: None)
    message = str(info.value)
    assert info.value.field == "timezone" and message.startswith("job 'settle': timezone: ")
    assert "abbreviation" in message and hint in message and "\n" not in message


@pytest.mark.parametrize("zone", ["right/Europe/Berlin", "right/UTC"])
def test_leap_second_zones_are_refused(zone: str) -> None:
    if zone not in zone_files():
        pytest.skip(f"this system's tzdata has no {zone}")
    with pytest.raises(JobDefinitionError) as info:
        Runner().job("settle", every="1h", timezone=zone)(lambda ctx: None)
    message = str(info.value)
    assert info.value.field == "timezone" and "leap seconds" in message and "\n" not in message
    assert repr(zone.removeprefix("right/")) in message


@pytest.mark.parametrize("zone", ["UTC", "GMT", "UCT", "Zulu", "Etc/UTC", "Europe/Lisbon", "Etc/GMT-1",
                                  "EST5EDT", "posix/Europe/Berlin"])
def test_names_both_sides_read_alike_are_kept(zone: str) -> None:
    if zone not in zone_files():
        pytest.skip(f"this system's tzdata has no {zone}")
    app = Runner()
    app.job("settle", cron="0 2 * * *", timezone=zone)(lambda ctx: None)
    assert app.jobs["settle"].schedule.timezone == zone
