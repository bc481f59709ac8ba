"""Slot arithmetic: the one place that turns a schedule into slots.

A job's schedule produces **slots**: UTC instants, each the identity of one unit of work. Every
function here takes aware datetimes in any zone and returns aware datetimes in UTC.

``every=`` schedules
    Slots are the instants ``k * interval`` after the Unix epoch (1970-01-01T00:00:00Z) for
    every integer ``k``, so every process on every machine computes the same slots with no
    shared state. ``every="7m"`` fires at 00:01, 00:08, ... on 2024-01-01 UTC, not at :00,
    :07, ...; ``every="1d"`` fires at midnight UTC. The job's zone only sets its business date.

``cron=`` schedules
    Five fields, ``minute hour day-of-month month day-of-week``, matched against LOCAL wall-clock
    time in the job's IANA zone (default ``UTC``). Fields take numbers, ``*``, ranges ``a-b``,
    steps ``*/n``, ``a-b/n`` and ``a/n`` (= ``a-max/n``), and comma lists; months ``JAN``-``DEC``
    and weekdays ``SUN``-``SAT`` by name (any case); day-of-week ``0`` and ``7`` are Sunday.
    Aliases: ``@yearly``/``@annually`` = ``0 0 1 1 *``, ``@monthly`` = ``0 0 1 * *``,
    ``@weekly`` = ``0 0 * * 0``, ``@daily``/``@midnight`` = ``0 0 * * *``, ``@hourly`` =
    ``0 * * * *``. Not accepted: seconds or year fields, ``@reboot``, the non-standard
    ``L``/``W``/``#``/``?``/``H`` extensions, ranges whose start exceeds their end (write
    ``FRI-SAT,SUN``, not ``FRI-SUN``), and expressions that can never fire (``0 0 30 2 *``).
    ``5-5`` is just 5 (croniter would read the whole field); ``a/n`` in day-of-week stops at
    Saturday. ``Schedule.cron`` keeps the fields as written, one space apart, aliases expanded.

    Day-of-month and day-of-week combine by the Vixie-cron rule: if either field starts with
    ``*`` (``*``, ``*/2``) a day must match both; otherwise a day matching either one fires.
    So ``0 0 13 * FRI`` fires on every 13th *and* every Friday, while ``0 0 */2 * MON`` fires
    only on odd-numbered days that are Mondays. (croniter's default reads ``*/2`` as a
    restriction and ORs; its ``implement_cron_bug=True`` mode is the Vixie rule. croniter only
    validates expressions here: anything it rejects is rejected.)

Daylight saving time (cron only)
    Each matching local wall time ``w`` becomes the instant ``w.replace(tzinfo=zone, fold=0)``:

    * a local time that does not exist (the clock jumps over it) fires ONCE, shifted forward
      by the gap: 02:30 on America/New_York's spring-forward day fires at 03:30 EDT;
    * a local time that occurs twice (the clock falls back) fires ONCE, at its FIRST
      occurrence: 01:30 on New York's fall-back day fires at 01:30 EDT, never at 01:30 EST;
    * two local times that land on one instant (shifted 02:30 and the real 03:30) are ONE slot.

    Consequences: on New York's spring day ``0 * * * *`` has 23 slots; on its fall day 24
    (the second 01:00 does not fire) and the slot after 01:00 EDT is 02:00 EST, two hours
    later, so that window covers the repeated hour. A zone that skips a whole day
    (Pacific/Apia, 2011-12-30) fires that day's times on the next day, merged with it.

Business window and date
    The default window of a slot is ``[previous slot, slot)``; ``business_date`` is the local
    date, in the job's zone, of the window start (so a skipped local day has no business date).

Zones
    ``timezone=`` takes an IANA name that zoneinfo can load. The gap scan and the watermark
    advance compute the same slots in SQL with PostgreSQL's ``timezone(zone, t)``, so a name
    the two read differently is refused: ``CET``, ``EET``, ``MET``, ``WET``, ``EST``, ``MST``
    and ``HST``, which PostgreSQL takes for fixed-offset abbreviations (it looks a name up
    among its abbreviations before its zone files: ``CET`` stays +01:00 all summer), and zones
    whose file counts leap seconds (``right/...``), which PostgreSQL applies (27 s off since
    2017) and zoneinfo ignores. ``UTC``, ``GMT``, ``UCT`` and ``Zulu`` are abbreviations too,
    but of offset 0, which both sides agree on. tests/test_zones.py compares every name Python
    can load with PostgreSQL. Not checked here: both sides must read the same tz database
    version, and a database whose ``timezone_abbreviations`` is not ``Default`` must not add
    an abbreviation spelled like an accepted zone name.

How it is computed
    Cron matching walks naive local minutes with a small matcher of its own; the local->UTC
    mapping is done here from the zone's UTC-offset changes, found by probing ``zoneinfo``
    every 12 hours and bisecting to the second (cached per zone and year). That assumes a zone
    never changes its offset twice within 12 hours; the closest pair in the tz database is
    about 4 days apart (Africa/Freetown, 1939). An offset change is at most 24 hours.
"""

from __future__ import annotations

import hashlib
import math
import re
import struct
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import Literal
from zoneinfo import TZPATH, ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter  # type: ignore[import-untyped]

__all__ = [
    "CronFields",
    "Schedule",
    "ScheduleError",
    "idempotency_key",
    "parse_interval",
    "parse_schedule",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_ORD = date(1970, 1, 1).toordinal()
_MAX_ORD = date.max.toordinal()
_SECOND = timedelta(seconds=1)
_MICRO = timedelta(microseconds=1)
_US_PER_S = 1_000_000
_DAY = 86_400
# An offset change is at most 24 h (Pacific/Apia 2011, Alaska 1867); look back this far for
# the transition whose gap or fold can still shape slots at a given instant.
_LOOKBACK = 2 * _DAY
# Two offset changes of one zone are assumed to be at least this far apart (see module doc).
_PROBE_STEP = 12 * 3600
# zoneinfo cannot probe instants near datetime.min/max; outside these years, assume no change.
_FIRST_PROBE_YEAR = 2
_LAST_PROBE_YEAR = 9998


class ScheduleError(ValueError):
    """An invalid schedule. ``field`` names the culprit: 'cron', 'every', 'timezone', 'schedule'."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(field, message)
        self.field = field
        self.message = message

    def __str__(self) -> str:
        return f"invalid {self.field}: {self.message}"


# --------------------------------------------------------------------------------------------
# every=


_DURATION_PART = re.compile(r"\s*((?:\d+(?:\.\d*)?|\.\d+))\s*(ms|us|w|d|h|m|s)", re.ASCII)
_UNIT_US = {
    "w": 7 * _DAY * _US_PER_S,
    "d": _DAY * _US_PER_S,
    "h": 3600 * _US_PER_S,
    "m": 60 * _US_PER_S,
    "s": _US_PER_S,
    "ms": 1000,
    "us": 1,
}
_UNIT_ORDER = list(_UNIT_US)


def parse_interval(value: str | int | float | timedelta, *, field: str = "every") -> timedelta:
    """A positive interval of whole microseconds.

    Accepts a ``timedelta``, a number of seconds, or a string of number+unit parts in
    decreasing order, each unit at most once: ``"30s"``, ``"5m"``, ``"2h30m"``, ``"1.5s"``,
    ``"500ms"``, ``"1d"`` (units ``w d h m s ms us``). A string without a unit is rejected:
    ``"30"`` is ambiguous. Raises ``ScheduleError(field=field)``.
    """
    if isinstance(value, timedelta):
        micros = value // _MICRO
    elif isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ScheduleError(field, f"expected a duration like '30s' or a number of seconds, got {value!r}")
    elif isinstance(value, int):
        micros = value * _US_PER_S
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ScheduleError(field, f"{value!r} is not a finite number of seconds")
        exact = Decimal(repr(value)) * _US_PER_S
        if exact != exact.to_integral_value():
            raise ScheduleError(field, f"{value!r} seconds is not a whole number of microseconds")
        micros = int(exact)
    else:
        micros = _parse_duration_text(value, field)
    if micros <= 0:
        raise ScheduleError(field, f"{value!r} is not a positive interval")
    try:
        return timedelta(microseconds=micros)
    except OverflowError:
        raise ScheduleError(field, f"{value!r} is too long an interval") from None


def _parse_duration_text(text: str, field: str) -> int:
    if not text.strip():
        raise ScheduleError(field, "empty interval; expected e.g. '30s', '5m', '2h30m'")
    pos, total, last_rank = 0, Decimal(0), -1
    stripped = text.strip()
    while pos < len(stripped):
        m = _DURATION_PART.match(stripped, pos)
        if m is None:
            raise ScheduleError(
                field, f"cannot read {text!r} as an interval; expected e.g. '30s', '5m', '2h30m'"
            )
        number, unit = m.groups()
        rank = _UNIT_ORDER.index(unit)
        if rank <= last_rank:
            raise ScheduleError(
                field, f"units in {text!r} must appear once each, largest first (e.g. '2h30m')"
            )
        last_rank = rank
        try:
            total += Decimal(number) * _UNIT_US[unit]
        except InvalidOperation:  # pragma: no cover - the regex only admits decimals
            raise ScheduleError(field, f"bad number {number!r} in {text!r}") from None
        pos = m.end()
    if total != total.to_integral_value():
        raise ScheduleError(field, f"{text!r} is not a whole number of microseconds")
    return int(total)


# --------------------------------------------------------------------------------------------
# cron: parsing

_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTH_NAMES = {
    n: i + 1
    for i, n in enumerate(
        ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
    )
}
_DOW_NAMES = {n: i for i, n in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])}
# (name, low, high, names) per field; day-of-week admits 7 (= Sunday) on input.
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day-of-month", 1, 31, {}),
    ("month", 1, 12, _MONTH_NAMES),
    ("day-of-week", 0, 7, _DOW_NAMES),
)
_ITEM = re.compile(r"(?:(\*)|([0-9A-Za-z]+)(?:-([0-9A-Za-z]+))?)(?:/([0-9]+))?", re.ASCII)
_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # February as in leap years


@dataclass(frozen=True)
class CronFields:
    """The expanded sets of a cron expression (what the SQL side needs to agree with us).

    ``days_of_week`` uses 0 = Sunday .. 6 = Saturday. ``day_and`` is the Vixie rule: True when
    the day-of-month or day-of-week field starts with ``*`` (a day must match both), False when
    a day matching either field fires.
    """

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days_of_month: tuple[int, ...]
    months: tuple[int, ...]
    days_of_week: tuple[int, ...]
    day_and: bool

    def day_matches(self, d: date) -> bool:
        """Whether local date ``d`` is a firing day (month, day-of-month, day-of-week)."""
        if d.month not in self.months:
            return False
        dom_ok = d.day in self.days_of_month
        dow_ok = d.toordinal() % 7 in self.days_of_week  # ordinal 1 (0001-01-01) is a Monday
        return (dom_ok and dow_ok) if self.day_and else (dom_ok or dow_ok)


def _normalise_cron(expr: object) -> str:
    if not isinstance(expr, str):
        raise ScheduleError("cron", f"expected a string, got {type(expr).__name__}")
    text = expr.strip()
    if not text:
        raise ScheduleError("cron", "empty expression; expected 5 fields, e.g. '0 2 * * *'")
    if text.startswith("@"):
        alias = _ALIASES.get(text.lower())
        if alias is None:
            raise ScheduleError(
                "cron",
                f"unknown alias {text!r}; supported: {', '.join(_ALIASES)} (@reboot is not a schedule)",
            )
        return alias
    fields = re.split(r"[ \t]+", text)
    if len(fields) != 5:
        raise ScheduleError(
            "cron",
            f"{expr!r} has {len(fields)} fields; expected 5 (minute hour day-of-month month "
            "day-of-week), seconds and year fields are not supported",
        )
    return " ".join(fields)


def _parse_value(token: str, fname: str, low: int, high: int, names: dict[str, int]) -> int:
    if token.isdigit():
        value = int(token)
    elif token.upper() in names:
        value = names[token.upper()]
    else:
        raise ScheduleError("cron", f"{fname} field: {token!r} is not a number or name")
    if not low <= value <= high:
        raise ScheduleError("cron", f"{fname} field: {value} is outside {low}-{high}")
    return value


def _parse_field(text: str, index: int) -> frozenset[int]:
    fname, low, high, names = _FIELDS[index]
    values: set[int] = set()
    for item in text.split(","):
        m = _ITEM.fullmatch(item)
        if m is None:
            raise ScheduleError(
                "cron", f"{fname} field: cannot read {item!r} (use n, a-b, */n, a-b/n or lists)"
            )
        star, first, last, step_text = m.groups()
        step = 1
        if step_text is not None:
            step = int(step_text)
            if step == 0:
                raise ScheduleError("cron", f"{fname} field: step 0 in {item!r}")
        if star:
            start, end = low, high if index != 4 else 6
        else:
            start = _parse_value(first, fname, low, high, names)
            if last is not None:
                end = _parse_value(last, fname, low, high, names)
                if end < start:
                    raise ScheduleError(
                        "cron",
                        f"{fname} field: range {item!r} runs backwards; wrap-around ranges are "
                        "not supported (write them as a list)",
                    )
            elif step_text is None:
                end = start
            else:  # 'a/n' runs to the field's end (Saturday for day-of-week)
                end = high if index != 4 else 6
                if end < start:
                    raise ScheduleError("cron", f"{fname} field: {item!r} starts past Saturday")
        values.update(range(start, end + 1, step))
    if index == 4 and 7 in values:
        values.discard(7)
        values.add(0)
    return frozenset(values)


def _croniter_rejects(expr: str) -> str | None:
    try:
        croniter.expand(expr)
    except Exception as exc:  # croniter raises a handful of types; any of them is a rejection
        first_line = str(exc).strip().splitlines()
        return first_line[0] if first_line else type(exc).__name__
    return None


@lru_cache(maxsize=1024)
def _compile_cron(expr: str) -> _CronMatcher:
    """Parse a normalised 5-field expression (cached: many jobs share a few expressions)."""
    texts = expr.split(" ")
    sets = [_parse_field(t, i) for i, t in enumerate(texts)]
    fields = CronFields(
        minutes=tuple(sorted(sets[0])),
        hours=tuple(sorted(sets[1])),
        days_of_month=tuple(sorted(sets[2])),
        months=tuple(sorted(sets[3])),
        days_of_week=tuple(sorted(sets[4])),
        day_and=texts[2].startswith("*") or texts[4].startswith("*"),
    )
    rejected = _croniter_rejects(expr)
    if rejected is not None:
        raise ScheduleError("cron", f"{expr!r} rejected by croniter: {rejected}")
    # Every (month, day, weekday) with day <= the month's length occurs in some year (Feb 29
    # included), so this decides whether the expression can ever fire.
    doms, dows = set(fields.days_of_month), set(fields.days_of_week)
    if not any(
        ((d in doms and w in dows) if fields.day_and else (d in doms or w in dows))
        for month in fields.months
        for d in range(1, _DAYS_IN_MONTH[month - 1] + 1)
        for w in range(7)
    ):
        raise ScheduleError("cron", f"{expr!r} never fires (no such day in any year)")
    return _CronMatcher(fields)


# --------------------------------------------------------------------------------------------
# cron: matching naive local time
#
# Local wall time is counted in seconds since the naive 1970-01-01T00:00; firing times are
# whole minutes of it.


class _CronMatcher:
    __slots__ = ("_doms", "_dows", "_every_day", "_months", "_tods", "fields")

    def __init__(self, fields: CronFields) -> None:
        self.fields = fields
        self._tods = tuple(h * 60 + m for h in fields.hours for m in fields.minutes)
        self._months = frozenset(fields.months)
        self._doms = frozenset(fields.days_of_month)
        self._dows = frozenset(fields.days_of_week)
        self._every_day = len(self._months) == 12 and (
            (len(self._doms) == 31 and len(self._dows) == 7)
            if fields.day_and
            else (len(self._doms) == 31 or len(self._dows) == 7)
        )

    def _day_ok(self, ordinal: int) -> bool:
        if self._every_day:
            return True
        d = date.fromordinal(ordinal)
        if d.month not in self._months:
            return False
        dom_ok = d.day in self._doms
        dow_ok = ordinal % 7 in self._dows
        return (dom_ok and dow_ok) if self.fields.day_and else (dom_ok or dow_ok)

    def _next_day(self, day: int, limit: int) -> int | None:
        """First firing day >= day (days since the epoch), or None past ``limit``."""
        limit = min(limit, _MAX_ORD - _EPOCH_ORD)
        day = max(day, 1 - _EPOCH_ORD)
        while day <= limit:
            ordinal = day + _EPOCH_ORD
            if self._every_day:
                return day
            d = date.fromordinal(ordinal)
            if d.month not in self._months:  # jump to the 1st of the next month
                y, mo = (d.year + 1, 1) if d.month == 12 else (d.year, d.month + 1)
                if y > date.max.year:
                    return None
                day = date(y, mo, 1).toordinal() - _EPOCH_ORD
                continue
            if self._day_ok(ordinal):
                return day
            day += 1
        return None

    def _prev_day(self, day: int, limit: int) -> int | None:
        """Last firing day <= day, or None before ``limit``."""
        limit = max(limit, 1 - _EPOCH_ORD)
        day = min(day, _MAX_ORD - _EPOCH_ORD)
        while day >= limit:
            ordinal = day + _EPOCH_ORD
            if self._every_day:
                return day
            d = date.fromordinal(ordinal)
            if d.month not in self._months:  # jump to the last day of the previous month
                day = date(d.year, d.month, 1).toordinal() - 1 - _EPOCH_ORD
                continue
            if self._day_ok(ordinal):
                return day
            day -= 1
        return None

    def next_match(self, lo: int, hi: int | None = None) -> int | None:
        """First firing local second >= lo (and <= hi), or None."""
        minute = -(-lo // 60)
        day, tod = divmod(minute, 1440)
        tods = self._tods
        found: int | None = None
        if self._day_ok(day + _EPOCH_ORD):
            i = bisect_left(tods, tod)
            if i < len(tods):
                found = (day * 1440 + tods[i]) * 60
        if found is None:
            limit = (hi // _DAY) if hi is not None else _MAX_ORD
            nxt = self._next_day(day + 1, limit)
            if nxt is None:
                return None
            found = (nxt * 1440 + tods[0]) * 60
        return found if hi is None or found <= hi else None

    def prev_match(self, hi: int, lo: int | None = None) -> int | None:
        """Last firing local second <= hi (and >= lo), or None."""
        minute = hi // 60
        day, tod = divmod(minute, 1440)
        tods = self._tods
        found: int | None = None
        if self._day_ok(day + _EPOCH_ORD):
            i = bisect_right(tods, tod)
            if i > 0:
                found = (day * 1440 + tods[i - 1]) * 60
        if found is None:
            limit = (lo // _DAY) if lo is not None else -_EPOCH_ORD
            prv = self._prev_day(day - 1, limit)
            if prv is None:
                return None
            found = (prv * 1440 + tods[-1]) * 60
        return found if lo is None or found >= lo else None

    def matches(self, lo: int, hi: int) -> list[int]:
        """All firing local seconds in [lo, hi], ascending."""
        out: list[int] = []
        first_min, last_min = -(-lo // 60), hi // 60
        if first_min > last_min:
            return out
        first_day, last_day = first_min // 1440, last_min // 1440
        tods = self._tods
        day = self._next_day(first_day, last_day)
        while day is not None:
            base = day * 1440
            a = bisect_left(tods, first_min - base) if day == first_day else 0
            b = bisect_right(tods, last_min - base) if day == last_day else len(tods)
            out.extend((base + t) * 60 for t in tods[a:b])
            day = self._next_day(day + 1, last_day)
        return out


# --------------------------------------------------------------------------------------------
# zones: offset changes
#
# A transition is (T, before, after): from UTC second T on, the offset is ``after`` seconds;
# just before T it was ``before``.

_Transition = tuple[int, int, int]


@cache
def _zone(key: str) -> ZoneInfo:
    return ZoneInfo(key)


def _offset_at(zone: ZoneInfo, second: int) -> int:
    offset = (_EPOCH + timedelta(seconds=second)).astimezone(zone).utcoffset()
    assert offset is not None
    return offset // _SECOND


def _year_start(year: int) -> int:
    return (date(year, 1, 1).toordinal() - _EPOCH_ORD) * _DAY


def _year_of(second: int) -> int:
    ordinal = second // _DAY + _EPOCH_ORD
    return date.fromordinal(min(max(ordinal, 1), _MAX_ORD)).year


@lru_cache(maxsize=8192)
def _year_transitions(key: str, year: int) -> tuple[tuple[int, ...], tuple[_Transition, ...]]:
    """The offset changes of zone ``key`` in UTC year ``year``: (instants, transitions)."""
    if not _FIRST_PROBE_YEAR <= year <= _LAST_PROBE_YEAR:
        return (), ()
    zone = _zone(key)
    end = _year_start(year + 1) - 1
    p = _year_start(year) - 1
    op = _offset_at(zone, p)
    found: list[_Transition] = []
    while p < end:
        q = min(p + _PROBE_STEP, end)
        oq = _offset_at(zone, q)
        if oq != op:
            lo, hi = p, q  # offset(lo) == op, offset(hi) != op
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if _offset_at(zone, mid) == op:
                    lo = mid
                else:
                    hi = mid
            found.append((hi, op, oq))
        p, op = q, oq
    return tuple(t[0] for t in found), tuple(found)


def _first_transition(key: str, lo: int, hi: int) -> _Transition | None:
    """The first transition T with lo < T <= hi."""
    for year in range(_year_of(lo), _year_of(hi) + 1):
        instants, transitions = _year_transitions(key, year)
        i = bisect_right(instants, lo)
        if i < len(instants):
            return transitions[i] if instants[i] <= hi else None
    return None


def _last_transition(key: str, lo: int, hi: int) -> _Transition | None:
    """The last transition T with lo < T <= hi."""
    for year in range(_year_of(hi), _year_of(lo) - 1, -1):
        instants, transitions = _year_transitions(key, year)
        i = bisect_right(instants, hi) - 1
        if i >= 0:
            return transitions[i] if instants[i] > lo else None
    return None


def _transitions_in(key: str, lo: int, hi: int) -> list[_Transition]:
    """All transitions T with lo < T <= hi, ascending."""
    out: list[_Transition] = []
    for year in range(_year_of(lo), _year_of(hi) + 1):
        instants, transitions = _year_transitions(key, year)
        a, b = bisect_right(instants, lo), bisect_right(instants, hi)
        out.extend(transitions[a:b])
    return out


# --------------------------------------------------------------------------------------------
# instants


def _utc_micros(t: datetime, name: str = "t") -> int:
    if not isinstance(t, datetime):
        raise TypeError(f"{name} must be a datetime, got {type(t).__name__}")
    if t.tzinfo is None or t.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime, got naive {t.isoformat()}")
    return (t - _EPOCH) // _MICRO


def _from_seconds(second: int) -> datetime:
    return _EPOCH + timedelta(seconds=second)


def _from_micros(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


def _floor_s(micros: int) -> int:
    return micros // _US_PER_S


def _ceil_s(micros: int) -> int:
    return -(-micros // _US_PER_S)


# --------------------------------------------------------------------------------------------
# Schedule

_ZONE_KEY = re.compile(r"[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*", re.ASCII)


# Zone names that are also PostgreSQL time zone abbreviations (its 'Default' set) with a
# non-zero offset: PostgreSQL's timezone(name, t) reads them as that fixed offset, zoneinfo as
# the tz database zone (with summer time, or a different history). Each maps to (its offset,
# the tz database's own location for it since 2024b).
_PG_ABBREVIATIONS = {
    "CET": ("+01:00", "Europe/Brussels"),
    "MET": ("+01:00", "Europe/Brussels"),
    "EET": ("+02:00", "Europe/Athens"),
    "WET": ("+00:00", "Europe/Lisbon"),
    "EST": ("-05:00", "America/Panama"),
    "MST": ("-07:00", "America/Phoenix"),
    "HST": ("-10:00", "Pacific/Honolulu"),
}


def _zone_file(key: str) -> bytes | None:
    """The first bytes of the file ``ZoneInfo(key)`` reads: the first of ``TZPATH`` holding
    it, else the ``tzdata`` package; None if neither can be read here."""
    for root in TZPATH:
        path = Path(root, key)
        if path.is_file():
            with path.open("rb") as f:
                return f.read(1 << 16)
    try:
        return resources.files("tzdata.zoneinfo").joinpath(*key.split("/")).read_bytes()[: 1 << 16]
    except (ImportError, OSError):
        return None


def _leap_seconds_in(data: bytes) -> int:
    """The leap-second records of a TZif file (RFC 8536), in either of its data blocks."""
    if len(data) < 44 or data[:4] != b"TZif":
        return 0
    counts: tuple[int, ...] = struct.unpack(">6l", data[20:44])
    isut, isstd, leap, timecnt, typecnt, charcnt = counts
    if data[4:5] == b"\x00":  # version 1: one block
        return leap
    at = 44 + 5 * timecnt + 6 * typecnt + charcnt + 8 * leap + isstd + isut  # the v2+ header
    if len(data) < at + 44:
        return leap
    v2_counts: tuple[int, ...] = struct.unpack(">6l", data[at + 20:at + 44])
    return max(leap, v2_counts[2])


@cache
def _postgres_disagrees(key: str) -> str | None:
    """Why PostgreSQL's ``timezone(key, t)`` would give other local times than zoneinfo (so
    the gap scan and the watermarks would expect other slots than the loop), or None."""
    abbreviation = _PG_ABBREVIATIONS.get(key.upper())
    if abbreviation is not None:
        offset, place = abbreviation
        return (
            f"PostgreSQL reads {key!r} as the time zone abbreviation {key.upper()} (a fixed "
            f"UTC{offset}) while Python reads the tz database zone, so SQL and Python slots would "
            f"differ; name the location instead, e.g. {place!r}, or a fixed offset such as "
            f"'Etc/GMT{_etc_sign(offset)}'"
        )
    data = _zone_file(key)
    if data is not None and _leap_seconds_in(data):
        instead = repr(key.removeprefix("right/")) if key.startswith("right/") else "a zone without them"
        return (
            f"{key!r} counts leap seconds: PostgreSQL applies them (local times about 27 s off) "
            f"while Python's zoneinfo ignores them, so SQL and Python slots would differ; use {instead}"
        )
    return None


def _etc_sign(offset: str) -> str:
    """'Etc/GMT' name suffix of a '+hh:00' offset (POSIX signs: Etc/GMT-1 is UTC+01:00)."""
    hours = int(offset[1:3])
    return "" if hours == 0 else f"{'-' if offset[0] == '+' else '+'}{hours}"


def _check_timezone(key: object) -> str:
    if not isinstance(key, str):
        raise ScheduleError("timezone", f"expected an IANA zone name, got {type(key).__name__}")
    if not _ZONE_KEY.fullmatch(key) or key == "localtime":
        raise ScheduleError("timezone", f"{key!r} is not an IANA zone name (e.g. 'Asia/Seoul')")
    try:
        _zone(key)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ScheduleError(
            "timezone", f"unknown zone {key!r}; expected an IANA name like 'Europe/Berlin'"
        ) from None
    why = _postgres_disagrees(key)
    if why is not None:
        raise ScheduleError("timezone", why)
    return key


@dataclass(frozen=True)
class Schedule:
    """A validated schedule; see the module docstring for its slot rules."""

    kind: Literal["cron", "every"]
    cron: str | None = None
    every: timedelta | None = None
    timezone: str = "UTC"
    _matcher: _CronMatcher | None = field(default=None, init=False, repr=False, compare=False)
    _tz: ZoneInfo = field(default=_zone("UTC"), init=False, repr=False, compare=False)
    _every_us: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_tz", _zone(_check_timezone(self.timezone)))
        if self.kind == "cron":
            if self.every is not None:
                raise ScheduleError("schedule", "give exactly one of cron= and every=, not both")
            if self.cron is None:
                raise ScheduleError("schedule", "a cron schedule needs cron=")
            normalised = _normalise_cron(self.cron)
            object.__setattr__(self, "cron", normalised)
            object.__setattr__(self, "_matcher", _compile_cron(normalised))
        elif self.kind == "every":
            if self.cron is not None:
                raise ScheduleError("schedule", "give exactly one of cron= and every=, not both")
            if self.every is None:
                raise ScheduleError("schedule", "an every schedule needs every=")
            every = parse_interval(self.every)
            object.__setattr__(self, "every", every)
            object.__setattr__(self, "_every_us", every // _MICRO)
        else:
            raise ScheduleError("schedule", f"kind must be 'cron' or 'every', got {self.kind!r}")

    @property
    def cron_fields(self) -> CronFields | None:
        """The expanded cron sets (None for every=)."""
        return self._matcher.fields if self._matcher is not None else None

    # -- public queries --------------------------------------------------------------------

    def next_after(self, t: datetime) -> datetime:
        """The first slot strictly after ``t``."""
        us = _utc_micros(t)
        if self._matcher is None:
            return _from_micros((us // self._every_us + 1) * self._every_us)
        return _from_seconds(self._next_cron(_floor_s(us) + 1))

    def prev_before(self, t: datetime) -> datetime:
        """The last slot strictly before ``t``."""
        us = _utc_micros(t)
        if self._matcher is None:
            return _from_micros((-(-us // self._every_us) - 1) * self._every_us)
        return _from_seconds(self._prev_cron(_ceil_s(us) - 1))

    def latest_at_or_before(self, t: datetime) -> datetime:
        """The last slot ``<= t``."""
        us = _utc_micros(t)
        if self._matcher is None:
            return _from_micros(us // self._every_us * self._every_us)
        return _from_seconds(self._prev_cron(_floor_s(us)))

    def slots_between(self, start: datetime, end: datetime) -> list[datetime]:
        """Every slot ``s`` with ``start < s <= end``, ascending."""
        a, b = _utc_micros(start, "start"), _utc_micros(end, "end")
        if self._matcher is None:
            step = self._every_us
            return [_from_micros(k * step) for k in range(a // step + 1, b // step + 1)]
        return [_from_seconds(s) for s in self._cron_range(_floor_s(a) + 1, _floor_s(b))]

    def window(self, slot: datetime) -> tuple[datetime, datetime]:
        """The default business window of ``slot``: ``[previous slot, slot)``."""
        return self.prev_before(slot), _from_micros(_utc_micros(slot, "slot"))

    def business_date(self, window_start: datetime) -> date:
        """The local date of ``window_start`` in the job's zone."""
        _utc_micros(window_start, "window_start")
        return window_start.astimezone(self._tz).date()

    # -- cron in UTC seconds ---------------------------------------------------------------
    #
    # Between two offset changes the zone has one offset ``o``. In such a segment starting at
    # transition A (offset ``op`` before it) the slots are
    #   R: each firing local w >= A + max(o, op) (a fold's first pass belongs to the segment
    #      before), at w - o;
    #   G: if the clock jumped forward (o > op), each firing w in the skipped local range
    #      [A + op, A + o), at w - op: the gap's times shifted forward, inside [A, A + o - op).
    # Both runs ascend; they can interleave (a 30-minute shift maps a skipped 02:15 after a
    # real 02:30), so they are merged, and an instant reached by both is one slot.

    def _segment_at(self, second: int) -> tuple[int | None, int, int]:
        """(A, op, o) for the segment holding ``second``; A is None when no change is recent."""
        tr = _last_transition(self.timezone, second - _LOOKBACK, second)
        if tr is not None:
            return tr
        o = _offset_at(self._tz, second)
        return None, o, o

    def _next_cron(self, x: int) -> int:
        """The first slot >= x (UTC seconds)."""
        matcher = self._matcher
        assert matcher is not None
        a, op, o = self._segment_at(x)
        while True:
            lo = x + o if a is None or op <= o else max(x + o, a + op)
            w = matcher.next_match(lo)
            if w is None:
                raise ValueError(f"{self.cron!r} has no slot before year {date.max.year}")
            cand = w - o
            if a is not None and o > op and x < a + (o - op):
                g = matcher.next_match(max(a + op, x + op), a + o - 1)
                if g is not None:
                    cand = min(cand, g - op)
            nxt = _first_transition(self.timezone, x, cand)
            if nxt is None:
                return cand
            a, op, o = nxt
            x = a

    def _prev_cron(self, y: int) -> int:
        """The last slot <= y (UTC seconds)."""
        matcher = self._matcher
        assert matcher is not None
        while True:
            a, op, o = self._segment_at(y)
            if a is None:
                w = matcher.prev_match(y + o)
                if w is None:
                    raise ValueError(f"{self.cron!r} has no slot after year 1")
                cand = w - o
                tr = _last_transition(self.timezone, cand - _LOOKBACK, y - _LOOKBACK)
                if tr is None:
                    return cand
                a, op, o = tr
            best: int | None = None
            floor_r = a + max(o, op)
            if y + o >= floor_r:
                w = matcher.prev_match(y + o, floor_r)
                if w is not None:
                    best = w - o
            if o > op:
                g = matcher.prev_match(min(a + o - 1, y + op), a + op)
                if g is not None and (best is None or g - op > best):
                    best = g - op
            if best is not None:
                return best
            y = a - 1

    def _cron_range(self, lo: int, hi: int) -> list[int]:
        """All slots in [lo, hi] (UTC seconds), ascending."""
        matcher = self._matcher
        assert matcher is not None
        if lo > hi:
            return []
        out: list[int] = []
        segments: list[tuple[int | None, int, int]] = [self._segment_at(lo)]
        segments.extend(_transitions_in(self.timezone, lo, hi))
        for i, (a, op, o) in enumerate(segments):
            seg_lo = lo if i == 0 else a
            assert seg_lo is not None
            following = segments[i + 1][0] if i + 1 < len(segments) else None
            seg_hi = hi if following is None else following - 1
            r_lo = seg_lo + o if a is None or op <= o else max(seg_lo + o, a + op)
            run = [w - o for w in matcher.matches(r_lo, seg_hi + o)]
            if a is not None and o > op:
                gap = matcher.matches(max(a + op, seg_lo + op), min(a + o - 1, seg_hi + op))
                if gap:
                    run = sorted(set(run).union(w - op for w in gap))
            out.extend(run)
        return out


def parse_schedule(
    *,
    cron: str | None = None,
    every: str | int | float | timedelta | None = None,
    timezone: str | None = None,
) -> Schedule:
    """A ``Schedule`` from job options; exactly one of ``cron`` and ``every``.

    Raises ``ScheduleError`` with ``field`` 'schedule', 'cron', 'every' or 'timezone'.
    """
    if (cron is None) == (every is None):
        raise ScheduleError(
            "schedule", "give exactly one of cron= (e.g. '0 2 * * *') and every= (e.g. '30s')"
        )
    zone = "UTC" if timezone is None else timezone
    if cron is not None:
        return Schedule(kind="cron", cron=cron, timezone=zone)
    assert every is not None
    return Schedule(kind="every", every=parse_interval(every), timezone=zone)


# --------------------------------------------------------------------------------------------
# idempotency keys


def _iso_utc(t: datetime, name: str) -> str:
    u = _from_micros(_utc_micros(t, name))
    return (
        f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}"
        f".{u.microsecond:06d}Z"
    )


def idempotency_key(
    job_name: str, window_start: datetime, window_end: datetime, partition: str, version: str
) -> str:
    """A stable key for one job x window x partition x version: 32 hex chars of sha256.

    The digest input is ``b"runner.idempotency.v1"`` followed, for each of job name, window
    start, window end, partition and version, by ``<byte length>:<UTF-8 bytes>``; instants are
    written ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` in UTC. Length prefixes keep any characters apart:
    ("a|b", "c") and ("a", "b|c") differ. The same bytes can be built in SQL.
    """
    return idempotency_keys(job_name, window_start, window_end, [partition], version)[0]


def idempotency_keys(
    job_name: str, window_start: datetime, window_end: datetime, partitions: Sequence[str], version: str
) -> list[str]:
    """``idempotency_key`` for many partitions of one job x window: the common prefix of the
    digest is hashed once (a slot fanned out to 10,000 partitions costs 10,000 short hashes)."""
    for name, value in (("job_name", job_name), ("version", version)):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    start, end = _iso_utc(window_start, "window_start"), _iso_utc(window_end, "window_end")
    head = hashlib.sha256(b"runner.idempotency.v1")
    for part in (job_name, start, end):
        raw = part.encode("utf-8", "surrogatepass")
        head.update(b"%d:%s" % (len(raw), raw))
    raw_version = version.encode("utf-8", "surrogatepass")
    tail = b"%d:%s" % (len(raw_version), raw_version)
    keys = []
    for partition in partitions:
        if not isinstance(partition, str):
            raise TypeError(f"partition must be a str, got {type(partition).__name__}")
        raw = partition.encode("utf-8", "surrogatepass")
        digest = head.copy()
        digest.update(b"%d:%s%s" % (len(raw), raw, tail))
        keys.append(digest.hexdigest()[:32])
    return keys
