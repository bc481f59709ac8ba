"""The SQL slot expansion agrees exactly with runner/model/schedule.py.

The gap scan expects slots in SQL (runner.cron_slots_v1, runner.every_slots_v1) so that it works
with no runner alive; the loop expects them in Python (Schedule.slots_between). Property tests
compare the two on random cron expressions and windows placed around the real offset changes
of several zones, plus named cases for the facts the SQL has to correct for.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any
from zoneinfo import TZPATH, ZoneInfo

import psycopg
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from runner.model.schedule import Schedule, ScheduleError, parse_schedule

ZONES = ["America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Asia/Seoul",
         "Pacific/Apia", "UTC", "Europe/London",
         # where the refusals below point instead
         "Europe/Brussels", "Europe/Athens", "Europe/Lisbon", "America/Phoenix", "Pacific/Honolulu",
         "Etc/GMT-1"]
# names PostgreSQL reads as fixed-offset abbreviations, zoneinfo as zones: refused
REFUSED_ZONES = ["CET", "EET", "MET", "WET", "EST", "MST", "HST"]
# ... and zones that count leap seconds, where the system's tzdata has them
LEAP_ZONES = [z for z in ["right/Europe/Berlin", "right/UTC"] if any(Path(r, z).is_file() for r in TZPATH)]
REFUSED_ZONES += LEAP_ZONES
# ... beside abbreviations of offset 0, which both sides read alike
ODD_ZONES = [*REFUSED_ZONES, "GMT", "Zulu", "UCT"]
# 2020-2026 as asked; Seoul last changed offsets in 1988 and Apia skipped a day in 2011, so
# those years are probed too (for zones without changes in a year, windows fall anywhere).
YEARS = [1987, 1988, 2011, *range(2020, 2027)]
PROPS = settings(max_examples=250, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

SQL_CRON = "SELECT s FROM runner.cron_slots_v1(%s, %s, %s, %s) AS s ORDER BY s"
SQL_EVERY = "SELECT s FROM runner.every_slots_v1(%s, %s, %s) AS s ORDER BY s"


@cache
def offset_changes(zone_name: str) -> tuple[datetime, ...]:
    """Instants (to the second) in YEARS where the zone's UTC offset changes."""
    zone = ZoneInfo(zone_name)

    def offset(t: datetime) -> timedelta | None:
        return t.astimezone(zone).utcoffset()

    found: list[datetime] = []
    for year in YEARS:
        t, end = datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)
        while t < end:
            nxt = t + timedelta(hours=6)
            if offset(t) != offset(nxt):
                lo, hi = t, nxt  # offset(lo) != offset(hi): bisect to the second
                while hi - lo > timedelta(seconds=1):
                    mid = lo + (hi - lo) / 2
                    mid = mid.replace(microsecond=0)
                    if offset(mid) == offset(lo):
                        lo = mid
                    else:
                        hi = mid
                found.append(hi)
            t = nxt
    return tuple(found)


def as_utc(rows: Any) -> list[datetime]:
    # The test session's zone is not UTC, and an aware datetime with fold=1 never compares
    # equal to one in another zone (PEP 495): compare in UTC.
    return [r[0].astimezone(UTC) for r in rows]


def sql_cron(conn: psycopg.Connection[Any], sched: Schedule, start: datetime, end: datetime) -> list[datetime]:
    return as_utc(conn.execute(SQL_CRON, (sched.cron, sched.timezone, start, end)))


# --------------------------------------------------------------------------------------------
# cron expressions: every syntax runner/model/schedule.py accepts, biased to the small hours where
# offset changes happen

MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]


def name_case(draw: st.DrawFn, name: str) -> str:
    return draw(st.sampled_from([name, name.lower(), name.capitalize()]))


@st.composite
def value(draw: st.DrawFn, lo: int, hi: int, names: list[str] | None, base: int) -> tuple[int, str]:
    n = draw(st.integers(lo, hi))
    if names and lo <= n and n - base < len(names) and draw(st.booleans()):
        return n, name_case(draw, names[n - base])
    return n, str(n)


@st.composite
def cron_item(draw: st.DrawFn, lo: int, hi: int, names: list[str] | None = None, base: int = 0,
              hot: list[int] | None = None) -> str:
    kind = draw(st.sampled_from(["star", "star_step", "one", "one", "range", "range_step", "from_step"]))
    step = draw(st.integers(1, max(1, (hi - lo) // 2 + 1)))
    if kind == "star":
        return "*"
    if kind == "star_step":
        return f"*/{step}"
    if kind == "one" and hot and draw(st.booleans()):
        return str(draw(st.sampled_from(hot)))
    a, a_text = draw(value(lo, hi, names, base))
    if kind == "one":
        return a_text
    if kind == "from_step":
        return f"{a_text}/{step}"
    _, b_text = draw(value(a, hi, names, base))
    return f"{a_text}-{b_text}" if kind == "range" else f"{a_text}-{b_text}/{step}"


@st.composite
def cron_field(draw: st.DrawFn, lo: int, hi: int, names: list[str] | None = None, base: int = 0,
               hot: list[int] | None = None) -> str:
    items = draw(st.lists(cron_item(lo, hi, names, base, hot), min_size=1, max_size=3))
    return ",".join(items)


@st.composite
def crons(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 20)) == 0:
        return draw(st.sampled_from(["@hourly", "@daily", "@weekly", "@monthly", "@yearly"]))
    minute = draw(cron_field(0, 59, hot=[0, 15, 30, 45, 59]))
    hour = draw(cron_field(0, 23, hot=[0, 1, 2, 3, 4]))
    dom = draw(st.one_of(st.just("*"), cron_field(1, 31)))
    month = draw(st.one_of(st.just("*"), st.just("*"), cron_field(1, 12, MONTHS, 1)))
    dow = draw(st.one_of(st.just("*"), cron_field(0, 7, DAYS, 0, hot=[0, 6, 7]), st.sampled_from(
        ["7", "SUN", "sun", "5-7", "0-7", "7/2", "7/1", "6/2", "SAT-7", "FRI/2", "1-7/3", "*/3"])))
    return f"{minute} {hour} {dom} {month} {dow}"


@st.composite
def windows(draw: st.DrawFn, zone: str) -> tuple[datetime, datetime]:
    """(start, end) near one of the zone's offset changes (or anywhere in YEARS)."""
    changes = offset_changes(zone)
    if changes and draw(st.integers(0, 5)) > 0:
        anchor = draw(st.sampled_from(changes))
    else:
        anchor = datetime(draw(st.sampled_from(YEARS)), 1, 1, tzinfo=UTC) + timedelta(
            seconds=draw(st.integers(0, 364 * 86400)))
    start = anchor + timedelta(seconds=draw(st.integers(-3 * 86400, 86400)),
                               microseconds=draw(st.sampled_from([0, 0, 1, 999_999])))
    span = draw(st.one_of(
        st.integers(0, 7200),                      # a tail of minutes: the narrow branch
        st.integers(0, 48 * 3600),                 # up to the narrow branch's limit
        st.just(48 * 3600), st.just(48 * 3600 + 1),
        st.integers(48 * 3600, 6 * 86400),         # the wide branch
    ))
    return start, start + timedelta(seconds=span, microseconds=draw(st.sampled_from([0, 1, 500_000])))


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, str, datetime, datetime]:
    odd = draw(st.integers(0, 4)) == 0
    zone = draw(st.sampled_from(ODD_ZONES if odd else ZONES))
    expr = draw(crons())
    start, end = draw(windows(zone))
    return expr, zone, start, end


@PROPS
@given(cases())
def test_cron_slots_agree_with_python_around_offset_changes(
        tx: psycopg.Connection[Any], case: tuple[str, str, datetime, datetime]) -> None:
    """Python and SQL expect the same slots, or the runner refuses the job: a zone the two read
    differently is refused, and what Python's own cron grammar rejects SQL rejects too."""
    expr, zone, start, end = case
    try:
        sched = parse_schedule(cron=expr, timezone=zone)
    except ScheduleError as exc:
        if exc.field == "timezone":  # refused: such a job never reaches the ledger
            assert zone in REFUSED_ZONES, exc
            return
        assert exc.field == "cron", exc
        # croniter's extra checks and "never fires" are not repeated in SQL (it reads the
        # stored, validated form); anything else Python rejects, SQL must reject too
        assume("rejected by croniter" not in exc.message and "never fires" not in exc.message)
        with tx.transaction(force_rollback=True), pytest.raises(psycopg.errors.InvalidParameterValue):
            tx.execute("SELECT runner.cron_spec_v1(%s)", (expr,))
        return
    assert sql_cron(tx, sched, start, end) == sched.slots_between(start, end)


@PROPS
@given(
    zone=st.sampled_from(ZONES),
    minute=st.sampled_from(["*", "*/5", "0,30", "15", "59"]),
    hour=st.sampled_from(["*", "0-4", "1", "2", "3", "*/2"]),
    data=st.data(),
)
def test_every_minute_of_the_small_hours_agrees(tx: psycopg.Connection[Any], zone: str, minute: str,
                                                hour: str, data: st.DataObject) -> None:
    """Dense crons over the hours that offset changes fold or skip, both branches."""
    sched = parse_schedule(cron=f"{minute} {hour} * * *", timezone=zone)
    start, end = data.draw(windows(zone))
    assert sql_cron(tx, sched, start, end) == sched.slots_between(start, end)


@PROPS
@given(
    every=st.one_of(
        st.integers(1, 10**6).map(lambda us: timedelta(microseconds=us)),
        st.sampled_from(["1s", "1.5s", "7m", "30s", "1h", "2h30m", "1d", "1w", "500ms", "13s"]),
    ),
    start=st.datetimes(min_value=datetime(1960, 1, 1), max_value=datetime(2040, 1, 1),
                       timezones=st.just(UTC)),
    span_us=st.integers(0, 3 * 10**9),
)
def test_every_slots_agree_with_python(tx: psycopg.Connection[Any], every: Any, start: datetime,
                                       span_us: int) -> None:
    sched = parse_schedule(every=every)
    assert sched.every is not None
    end = start + min(timedelta(microseconds=span_us), sched.every * 2000)
    got = as_utc(tx.execute(SQL_EVERY, (sched.every, start, end)))
    assert got == sched.slots_between(start, end)


# --------------------------------------------------------------------------------------------
# the facts the SQL corrects for, by name

def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_postgres_reads_a_repeated_local_time_as_its_second_occurrence(tx: psycopg.Connection[Any]) -> None:
    """01:30 occurs twice in New York on 2024-11-03 (EDT, then EST). PostgreSQL's AT TIME ZONE
    picks the second (06:30Z); Python's fold=0, our rule, picks the first (05:30Z)."""
    row = tx.execute("SELECT timestamp '2024-11-03 01:30' AT TIME ZONE 'America/New_York'").fetchone()
    assert row is not None and row[0] == utc(2024, 11, 3, 6, 30)
    first = datetime(2024, 11, 3, 1, 30, tzinfo=ZoneInfo("America/New_York"), fold=0)
    assert first.astimezone(UTC) == utc(2024, 11, 3, 5, 30)
    sched = parse_schedule(cron="30 1 * * *", timezone="America/New_York")
    day = (utc(2024, 11, 3, 0), utc(2024, 11, 4, 0))
    assert sql_cron(tx, sched, *day) == [utc(2024, 11, 3, 5, 30)] == sched.slots_between(*day)


def test_a_nonexistent_local_time_fires_once_shifted_forward(tx: psycopg.Connection[Any]) -> None:
    """02:30 does not exist in New York on 2024-03-10; both PostgreSQL and Python read it with
    the offset before the change: 07:30Z, which is 03:30 EDT."""
    row = tx.execute("SELECT timestamp '2024-03-10 02:30' AT TIME ZONE 'America/New_York'").fetchone()
    assert row is not None and row[0] == utc(2024, 3, 10, 7, 30)
    sched = parse_schedule(cron="30 2 * * *", timezone="America/New_York")
    day = (utc(2024, 3, 10, 0), utc(2024, 3, 11, 0))
    assert sql_cron(tx, sched, *day) == [utc(2024, 3, 10, 7, 30)] == sched.slots_between(*day)


def test_a_shifted_time_landing_on_a_real_one_is_one_slot(tx: psycopg.Connection[Any]) -> None:
    """Skipped 02:30 shifts onto the real 03:30 of the same spring day: one slot."""
    sched = parse_schedule(cron="30 2,3 * * *", timezone="America/New_York")
    day = (utc(2024, 3, 10, 0), utc(2024, 3, 11, 0))
    assert sql_cron(tx, sched, *day) == [utc(2024, 3, 10, 7, 30)] == sched.slots_between(*day)


def test_lord_howe_half_hour_fold_fires_once(tx: psycopg.Connection[Any]) -> None:
    """Lord Howe falls back 30 minutes (02:00 +11 -> 01:30 +10:30): 01:45 fires once, first."""
    sched = parse_schedule(cron="*/15 1 * * *", timezone="Australia/Lord_Howe")
    day = (utc(2024, 4, 6, 12), utc(2024, 4, 7, 12))
    got = sql_cron(tx, sched, *day)
    assert got == sched.slots_between(*day)
    assert len(got) == 4  # 01:00, 01:15, 01:30, 01:45, each once


def test_apia_skipped_day_fires_on_the_next_day(tx: psycopg.Connection[Any]) -> None:
    """Samoa skipped 2011-12-30: its 10:00 fires merged into the 31st's."""
    sched = parse_schedule(cron="0 10 * * *", timezone="Pacific/Apia")
    days = (utc(2011, 12, 28), utc(2012, 1, 2))
    assert sql_cron(tx, sched, *days) == sched.slots_between(*days)


def test_the_stored_cron_form_is_what_sql_reads(tx: psycopg.Connection[Any]) -> None:
    """Schedule.cron keeps names as written and expands aliases; SQL reads exactly that."""
    for expr in ["@daily", "0 9 * jan-Mar Mon-FRI", "*/20 1-3 13 * FRI", "5/20 4 */2 * 7", "0 0 * * SUN,6"]:
        sched = parse_schedule(cron=expr, timezone="Europe/Berlin")
        window = (utc(2024, 1, 1), utc(2024, 4, 1))
        assert sql_cron(tx, sched, *window) == sched.slots_between(*window), expr


def test_cron_spec_masks_and_the_vixie_rule(tx: psycopg.Connection[Any]) -> None:
    row = tx.execute("SELECT * FROM runner.cron_spec_v1('0,30 2 13 * FRI')").fetchone()
    assert row == (1 | 1 << 30, 1 << 2, 1 << 13, 0b1111111111110, 1 << 5, False)
    row = tx.execute("SELECT * FROM runner.cron_spec_v1('0 0 */2 * 7')").fetchone()
    assert row is not None and row[4] == 1 and row[5] is True  # 7 is Sunday; '*' means AND


@pytest.mark.parametrize("expr", ["", "* * * *", "60 * * * *", "* * * * 8", "5-1 * * * *",
                                  "*/0 * * * *", "@reboot", "0 0 * FOO *", "? * * * *",
                                  "0 0 * * 7/2", "0 0 * * 7/1", "0 0 1 * 1,7/3"])
def test_cron_spec_rejects_what_python_rejects(tx: psycopg.Connection[Any], expr: str) -> None:
    with pytest.raises(ScheduleError):
        parse_schedule(cron=expr)
    with tx.transaction(force_rollback=True), pytest.raises(psycopg.errors.InvalidParameterValue):
        tx.execute("SELECT runner.cron_spec_v1(%s)", (expr,))


def test_schedule_slots_dispatches_on_kind(tx: psycopg.Connection[Any]) -> None:
    window = (utc(2024, 1, 1), utc(2024, 1, 1, 1))
    q = "SELECT count(*) FROM runner.schedule_slots_v1(%s, %s, %s, %s, %s, %s)"
    row = tx.execute(q, ("cron", "*/10 * * * *", None, "UTC", *window)).fetchone()
    assert row == (6,)
    row = tx.execute(q, ("every", None, timedelta(minutes=7), "UTC", *window)).fetchone()
    assert row == (len(parse_schedule(every="7m").slots_between(*window)),)
