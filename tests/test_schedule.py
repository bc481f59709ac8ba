"""Slot arithmetic at real DST transitions, with exact expected UTC instants.

Each expectation was worked out by hand from the zone's rules (offsets in the comments); the
module under test never computes its own expected values.
"""

from __future__ import annotations

import hashlib
import pickle
from datetime import UTC, date, datetime, timedelta, timezone
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest

from runner.model.schedule import (
    Schedule,
    ScheduleError,
    idempotency_key,
    idempotency_keys,
    parse_interval,
    parse_schedule,
)

NY = ZoneInfo("America/New_York")
BERLIN = ZoneInfo("Europe/Berlin")
LORD_HOWE = ZoneInfo("Australia/Lord_Howe")
SEOUL = ZoneInfo("Asia/Seoul")
APIA = ZoneInfo("Pacific/Apia")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def Z(*args: int) -> datetime:
    """An aware UTC datetime."""
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def cron(expr: str, tz: str = "UTC") -> Schedule:
    return parse_schedule(cron=expr, timezone=tz)


def hourly_run(first: datetime, last: datetime, step: timedelta = timedelta(hours=1)) -> list:
    out, t = [], first
    while t <= last:
        out.append(t)
        t += step
    return out


def check_neighbours(s: Schedule, slots: list[datetime]) -> None:
    """next_after / prev_before step exactly through a known consecutive run of slots."""
    for a, b in pairwise(slots):
        assert s.next_after(a) == b
        assert s.prev_before(b) == a
        assert s.latest_at_or_before(b - timedelta(microseconds=1)) == a
        assert s.latest_at_or_before(b) == b


# ------------------------------------------------------------------------------------------
# America/New_York: EST -5, EDT -4. 2024-03-10 02:00 -> 03:00 (07:00Z);
# 2024-11-03 02:00 EDT -> 01:00 EST (06:00Z).


def test_new_york_spring_daily_0230_fires_once_at_0330_edt():
    s = cron("30 2 * * *", "America/New_York")
    slots = s.slots_between(Z(2024, 3, 8), Z(2024, 3, 12))
    # 02:30 EST = 07:30Z; the missing 02:30 fires at 03:30 EDT = 07:30Z; then 02:30 EDT = 06:30Z
    assert slots == [Z(2024, 3, 8, 7, 30), Z(2024, 3, 9, 7, 30), Z(2024, 3, 10, 7, 30),
                     Z(2024, 3, 11, 6, 30)]
    assert slots[2].astimezone(NY).strftime("%H:%M %Z") == "03:30 EDT"
    check_neighbours(s, slots)


def test_new_york_spring_hourly_has_23_slots():
    s = cron("0 * * * *", "America/New_York")
    # local day 2024-03-10 runs from 05:00Z (00:00 EST) to 04:00Z next day (00:00 EDT)
    slots = s.slots_between(Z(2024, 3, 10, 4, 59), Z(2024, 3, 11, 3, 59))
    assert slots == hourly_run(Z(2024, 3, 10, 5), Z(2024, 3, 11, 3))
    assert len(slots) == 23
    assert [t.astimezone(NY).hour for t in slots] == [0, 1, *range(3, 24)]
    check_neighbours(s, slots)


def test_new_york_spring_quarter_hours_merge_gap_into_real_times():
    s = cron("*/15 * * * *", "America/New_York")
    slots = s.slots_between(Z(2024, 3, 10, 4, 59), Z(2024, 3, 11, 3, 59))
    assert slots == hourly_run(Z(2024, 3, 10, 5), Z(2024, 3, 11, 3, 45), timedelta(minutes=15))
    assert len(slots) == 92  # 23 hours x 4: the skipped 02:xx land on the real 03:xx
    assert s.next_after(Z(2024, 3, 10, 6, 45)) == Z(2024, 3, 10, 7)


def test_new_york_fall_hourly_fires_repeated_hour_once():
    s = cron("0 * * * *", "America/New_York")
    # local day 2024-11-03: 00:00 EDT = 04:00Z .. 23:00 EST = 04:00Z on the 4th
    slots = s.slots_between(Z(2024, 11, 3, 3, 59), Z(2024, 11, 4, 4, 0))
    assert slots == [Z(2024, 11, 3, 4), Z(2024, 11, 3, 5),  # 00:00, 01:00 EDT
                     *hourly_run(Z(2024, 11, 3, 7), Z(2024, 11, 4, 4))]  # 02:00 EST ..
    assert len(slots) == 24
    assert Z(2024, 11, 3, 6) not in slots  # 01:00 EST, the second 01:00
    assert [t.astimezone(NY).hour for t in slots] == list(range(24))
    assert s.next_after(Z(2024, 11, 3, 5)) == Z(2024, 11, 3, 7)
    assert s.prev_before(Z(2024, 11, 3, 7)) == Z(2024, 11, 3, 5)
    assert s.latest_at_or_before(Z(2024, 11, 3, 6, 30)) == Z(2024, 11, 3, 5)
    # the slot after the repeated hour covers it: a two-hour window
    assert s.window(Z(2024, 11, 3, 7)) == (Z(2024, 11, 3, 5), Z(2024, 11, 3, 7))
    check_neighbours(s, slots)


def test_new_york_fall_daily_0130_fires_at_first_occurrence():
    s = cron("30 1 * * *", "America/New_York")
    slots = s.slots_between(Z(2024, 11, 2), Z(2024, 11, 5))
    # 01:30 EDT = 05:30Z (twice: the 2nd, and the first pass on the 3rd); then 01:30 EST = 06:30Z
    assert slots == [Z(2024, 11, 2, 5, 30), Z(2024, 11, 3, 5, 30), Z(2024, 11, 4, 6, 30)]
    assert slots[1].astimezone(NY).strftime("%H:%M %Z") == "01:30 EDT"
    check_neighbours(s, slots)


def test_new_york_fall_quarter_hours_skip_the_second_pass():
    s = cron("*/15 * * * *", "America/New_York")
    slots = s.slots_between(Z(2024, 11, 3, 3, 59), Z(2024, 11, 4, 4, 59))
    assert len(slots) == 96
    assert not [t for t in slots if Z(2024, 11, 3, 6) <= t < Z(2024, 11, 3, 7)]
    assert s.next_after(Z(2024, 11, 3, 5, 45)) == Z(2024, 11, 3, 7)
    assert s.prev_before(Z(2024, 11, 3, 7)) == Z(2024, 11, 3, 5, 45)


def test_input_in_the_second_pass_of_a_fold_is_read_as_its_instant():
    s = cron("*/15 * * * *", "America/New_York")
    second_pass = datetime(2024, 11, 3, 1, 20, fold=1, tzinfo=NY)  # 01:20 EST = 06:20Z
    assert s.next_after(second_pass) == Z(2024, 11, 3, 7)
    assert s.prev_before(second_pass) == Z(2024, 11, 3, 5, 45)
    first_pass = datetime(2024, 11, 3, 1, 20, fold=0, tzinfo=NY)  # 05:20Z
    assert s.next_after(first_pass) == Z(2024, 11, 3, 5, 30)


# ------------------------------------------------------------------------------------------
# Europe/Berlin: CET +1, CEST +2. 2024-03-31 02:00 -> 03:00 (01:00Z);
# 2024-10-27 03:00 CEST -> 02:00 CET (01:00Z).


def test_berlin_spring_daily_0230():
    s = cron("30 2 * * *", "Europe/Berlin")
    slots = s.slots_between(Z(2024, 3, 30), Z(2024, 4, 2))
    # 02:30 CET = 01:30Z; missing 02:30 -> 03:30 CEST = 01:30Z; 02:30 CEST = 00:30Z
    assert slots == [Z(2024, 3, 30, 1, 30), Z(2024, 3, 31, 1, 30), Z(2024, 4, 1, 0, 30)]
    check_neighbours(s, slots)


def test_berlin_fall_daily_0230():
    s = cron("30 2 * * *", "Europe/Berlin")
    slots = s.slots_between(Z(2024, 10, 26), Z(2024, 10, 29))
    # 02:30 CEST = 00:30Z on the 26th and (first pass) the 27th; 02:30 CET = 01:30Z on the 28th
    assert slots == [Z(2024, 10, 26, 0, 30), Z(2024, 10, 27, 0, 30), Z(2024, 10, 28, 1, 30)]
    check_neighbours(s, slots)


def test_berlin_hourly_counts_on_both_transition_days():
    s = cron("0 * * * *", "Europe/Berlin")
    spring = s.slots_between(Z(2024, 3, 30, 22, 59), Z(2024, 3, 31, 21, 59))
    assert spring == [Z(2024, 3, 30, 23), Z(2024, 3, 31, 0), *hourly_run(Z(2024, 3, 31, 1),
                                                                        Z(2024, 3, 31, 21))]
    assert len(spring) == 23
    fall = s.slots_between(Z(2024, 10, 26, 21, 59), Z(2024, 10, 27, 22, 59))
    # 00:00 CEST = 22:00Z .. 02:00 CEST = 00:00Z, [01:00Z = 02:00 CET skipped], 03:00 CET = 02:00Z
    assert fall == [Z(2024, 10, 26, 22), Z(2024, 10, 26, 23), Z(2024, 10, 27, 0),
                    *hourly_run(Z(2024, 10, 27, 2), Z(2024, 10, 27, 22))]
    assert len(fall) == 24


# ------------------------------------------------------------------------------------------
# Australia/Lord_Howe: +10:30 standard, +11 summer, a 30-minute shift.
# 2024-04-07 02:00 (+11) -> 01:30 (+10:30) at 2024-04-06 15:00Z;
# 2024-10-06 02:00 (+10:30) -> 02:30 (+11) at 2024-10-05 15:30Z.


def test_lord_howe_fall_quarter_hours():
    s = cron("*/15 * * * *", "Australia/Lord_Howe")
    slots = s.slots_between(Z(2024, 4, 6, 13, 59), Z(2024, 4, 6, 16))
    # 01:00..01:45 (+11) = 14:00..14:45Z; 15:00Z and 15:15Z are the second 01:30/01:45;
    # 02:00 (+10:30) = 15:30Z
    assert slots == [Z(2024, 4, 6, 14), Z(2024, 4, 6, 14, 15), Z(2024, 4, 6, 14, 30),
                     Z(2024, 4, 6, 14, 45), Z(2024, 4, 6, 15, 30), Z(2024, 4, 6, 15, 45),
                     Z(2024, 4, 6, 16)]
    check_neighbours(s, slots)


def test_lord_howe_fall_daily_0145_first_occurrence():
    s = cron("45 1 * * *", "Australia/Lord_Howe")
    slots = s.slots_between(Z(2024, 4, 5), Z(2024, 4, 8))
    # 01:45 +11 = 14:45Z (5th, and first pass on 6th/7th local); then 01:45 +10:30 = 15:15Z
    assert slots == [Z(2024, 4, 5, 14, 45), Z(2024, 4, 6, 14, 45), Z(2024, 4, 7, 15, 15)]


def test_lord_howe_spring_quarter_hours_merge():
    s = cron("*/15 * * * *", "Australia/Lord_Howe")
    slots = s.slots_between(Z(2024, 10, 5, 14, 59), Z(2024, 10, 5, 16, 15))
    # 01:30, 01:45 (+10:30) = 15:00, 15:15Z; missing 02:00/02:15 -> 15:30/15:45Z, the same
    # instants as the real 02:30/02:45 (+11); 03:00 = 16:00Z
    assert slots == hourly_run(Z(2024, 10, 5, 15), Z(2024, 10, 5, 16, 15), timedelta(minutes=15))
    check_neighbours(s, slots)


def test_lord_howe_spring_shift_reorders_local_times():
    # the missing 02:15 fires at 15:45Z, AFTER the real 02:30 (+11) at 15:30Z
    s = cron("15,30 2 * * *", "Australia/Lord_Howe")
    slots = s.slots_between(Z(2024, 10, 4), Z(2024, 10, 7))
    assert slots == [
        Z(2024, 10, 4, 15, 45), Z(2024, 10, 4, 16, 0),  # 02:15, 02:30 (+10:30) on the 5th
        Z(2024, 10, 5, 15, 30), Z(2024, 10, 5, 15, 45),  # real 02:30 (+11), shifted 02:15
        Z(2024, 10, 6, 15, 15), Z(2024, 10, 6, 15, 30),  # 02:15, 02:30 (+11) on the 7th
    ]
    assert s.next_after(Z(2024, 10, 5, 15)) == Z(2024, 10, 5, 15, 30)
    assert s.next_after(Z(2024, 10, 5, 15, 30)) == Z(2024, 10, 5, 15, 45)
    assert s.prev_before(Z(2024, 10, 5, 16)) == Z(2024, 10, 5, 15, 45)
    assert s.prev_before(Z(2024, 10, 5, 15, 45)) == Z(2024, 10, 5, 15, 30)
    check_neighbours(s, slots)


def test_lord_howe_spring_two_missing_times():
    s = cron("0,15 2 * * *", "Australia/Lord_Howe")
    assert s.slots_between(Z(2024, 10, 5, 12), Z(2024, 10, 5, 18)) == [
        Z(2024, 10, 5, 15, 30), Z(2024, 10, 5, 15, 45)]


# ------------------------------------------------------------------------------------------
# Asia/Seoul: +9 with no DST today; DST (+10) in 1988 from 05-08 02:00 -> 03:00 (05-07 17:00Z)
# to 10-09 03:00 -> 02:00 (10-08 17:00Z).


def test_seoul_today_daily_0200():
    s = cron("0 2 * * *", "Asia/Seoul")
    assert s.slots_between(Z(2024, 3, 8), Z(2024, 3, 10)) == [Z(2024, 3, 8, 17), Z(2024, 3, 9, 17)]
    assert s.next_after(Z(2024, 3, 9, 17)) == Z(2024, 3, 10, 17)


def test_seoul_1988_spring_gap():
    s = cron("30 2 * * *", "Asia/Seoul")
    slots = s.slots_between(Z(1988, 5, 6), Z(1988, 5, 9))
    # 02:30 KST = 17:30Z; the missing 02:30 -> 03:30 KDT = 17:30Z; 02:30 KDT = 16:30Z
    assert slots == [Z(1988, 5, 6, 17, 30), Z(1988, 5, 7, 17, 30), Z(1988, 5, 8, 16, 30)]
    check_neighbours(s, slots)


def test_seoul_1988_fall_fold():
    s = cron("30 2 * * *", "Asia/Seoul")
    slots = s.slots_between(Z(1988, 10, 7), Z(1988, 10, 10))
    # 02:30 KDT = 16:30Z (first pass on the 9th too); 02:30 KST = 17:30Z on the 10th
    assert slots == [Z(1988, 10, 7, 16, 30), Z(1988, 10, 8, 16, 30), Z(1988, 10, 9, 17, 30)]
    hourly = cron("0 * * * *", "Asia/Seoul")
    assert hourly.next_after(Z(1988, 10, 8, 16)) == Z(1988, 10, 8, 18)  # 02:00 KDT -> 03:00 KST


# ------------------------------------------------------------------------------------------
# Pacific/Apia skipped 2011-12-30: -10 until 2011-12-30 10:00Z, then +14.


def test_apia_skipped_day_fires_on_the_next_day_once():
    s = cron("0 12 * * *", "Pacific/Apia")
    # 12:00 -10 = 22:00Z on the 29th; the missing 30th 12:00 -> 22:00Z on the 30th, which is
    # also the real 31st 12:00 (+14): one slot; 1 Jan 12:00 +14 = 22:00Z on the 31st
    slots = s.slots_between(Z(2011, 12, 29), Z(2012, 1, 1))
    assert slots == [Z(2011, 12, 29, 22), Z(2011, 12, 30, 22), Z(2011, 12, 31, 22)]
    only_30th = cron("0 12 30 12 *", "Pacific/Apia")
    assert only_30th.next_after(Z(2011, 12, 1)) == Z(2011, 12, 30, 22)
    daily = cron("0 0 * * *", "Pacific/Apia")
    assert daily.window(Z(2011, 12, 31, 10)) == (Z(2011, 12, 30, 10), Z(2011, 12, 31, 10))
    assert daily.business_date(Z(2011, 12, 30, 10)) == date(2011, 12, 31)
    assert daily.business_date(Z(2011, 12, 29, 10)) == date(2011, 12, 29)


# ------------------------------------------------------------------------------------------
# cron syntax


def test_aliases_normalise_to_five_fields():
    assert cron("@yearly").cron == "0 0 1 1 *"
    assert cron("@annually").cron == "0 0 1 1 *"
    assert cron("@monthly").cron == "0 0 1 * *"
    assert cron("@weekly").cron == "0 0 * * 0"
    assert cron("@daily").cron == "0 0 * * *"
    assert cron("@midnight").cron == "0 0 * * *"
    assert cron("@HOURLY").cron == "0 * * * *"
    assert cron("@daily") == cron("0 0 * * *")
    assert cron("  0   2 *\t* *  ").cron == "0 2 * * *"


def test_aliases_fire_where_their_expansions_do():
    assert cron("@weekly").next_after(Z(2024, 1, 1)) == Z(2024, 1, 7)  # a Sunday
    assert cron("@monthly").next_after(Z(2024, 1, 1)) == Z(2024, 2, 1)
    assert cron("@yearly").prev_before(Z(2024, 6, 1)) == Z(2024, 1, 1)
    assert cron("@hourly", "Asia/Kolkata").next_after(Z(2024, 1, 1)) == Z(2024, 1, 1, 0, 30)
    assert cron("@daily", "Asia/Seoul").next_after(Z(2024, 1, 1)) == Z(2024, 1, 1, 15)


def test_names_ranges_steps_and_lists():
    s = cron("0 9 * jan-MAR Mon-fri")
    slots = s.slots_between(Z(2024, 3, 28), Z(2024, 4, 3))
    assert slots == [Z(2024, 3, 28, 9), Z(2024, 3, 29, 9)]  # Thu, Fri; April excluded
    assert [t.minute for t in cron("5/15 * * * *").slots_between(Z(2024, 1, 1), Z(2024, 1, 1, 1))
            ] == [5, 20, 35, 50]
    assert [t.minute for t in cron("10-20/5,59 * * * *").slots_between(
        Z(2024, 1, 1), Z(2024, 1, 1, 0, 59))] == [10, 15, 20, 59]
    assert [t.hour for t in cron("0 */6 * * *").slots_between(Z(2024, 1, 1), Z(2024, 1, 2))
            ] == [6, 12, 18, 0]
    assert cron("0 0 1 jul,JAN *").slots_between(Z(2024, 1, 1), Z(2025, 1, 1)) == [
        Z(2024, 7, 1), Z(2025, 1, 1)]


def test_sunday_is_0_and_7():
    sundays = [Z(2024, 1, 7), Z(2024, 1, 14)]
    assert cron("0 0 * * 0").slots_between(Z(2024, 1, 1), Z(2024, 1, 15)) == sundays
    assert cron("0 0 * * 7").slots_between(Z(2024, 1, 1), Z(2024, 1, 15)) == sundays
    assert cron("0 0 * * SUN").slots_between(Z(2024, 1, 1), Z(2024, 1, 15)) == sundays
    assert len(cron("0 0 * * 5-7").slots_between(Z(2024, 1, 1), Z(2024, 1, 8))) == 3


def test_day_of_month_and_week_or_when_both_restricted():
    # October 2024: the 13th is a Sunday; Fridays are the 4th, 11th, 18th, 25th
    s = cron("0 0 13 * FRI")
    assert s.slots_between(Z(2024, 10, 1), Z(2024, 10, 31)) == [
        Z(2024, 10, 4), Z(2024, 10, 11), Z(2024, 10, 13), Z(2024, 10, 18), Z(2024, 10, 25)]
    assert s.cron_fields is not None and s.cron_fields.day_and is False
    every_day = cron("0 0 1-31 * MON")  # neither field starts with '*': OR, so every day
    assert len(every_day.slots_between(Z(2024, 10, 1), Z(2024, 10, 31))) == 30


def test_day_of_month_and_week_and_when_a_field_starts_with_star():
    # Vixie cron: '*/2' in day-of-month makes the two fields AND: odd days that are Mondays.
    # January 2024 Mondays: 1, 8, 15, 22, 29.
    s = cron("0 0 */2 * MON")
    assert s.slots_between(Z(2023, 12, 31), Z(2024, 1, 31)) == [
        Z(2024, 1, 1), Z(2024, 1, 15), Z(2024, 1, 29)]
    assert s.cron_fields is not None and s.cron_fields.day_and is True
    mondays = cron("0 0 * * MON")
    assert mondays.slots_between(Z(2023, 12, 31), Z(2024, 1, 31)) == [
        Z(2024, 1, 1), Z(2024, 1, 8), Z(2024, 1, 15), Z(2024, 1, 22), Z(2024, 1, 29)]
    thirteenths = cron("0 0 13 * */1")  # dow '*/1' is every day, AND: just the 13th
    assert thirteenths.slots_between(Z(2024, 1, 1), Z(2024, 3, 31)) == [
        Z(2024, 1, 13), Z(2024, 2, 13), Z(2024, 3, 13)]


def test_sparse_schedules_reach_far():
    leap = cron("0 0 29 2 *", "Europe/Berlin")
    assert leap.next_after(Z(2024, 3, 1)) == Z(2028, 2, 28, 23)
    assert leap.prev_before(Z(2028, 2, 28, 23)) == Z(2024, 2, 28, 23)
    # 29 February on a Saturday or Sunday (AND, dow starts with '*'): 2020 (Sat), then 2032 (Sun)
    rare = cron("0 0 29 2 */6")
    assert rare.next_after(Z(2020, 3, 1)) == Z(2032, 2, 29)
    assert rare.prev_before(Z(2032, 2, 29)) == Z(2020, 2, 29)


# ------------------------------------------------------------------------------------------
# every=


def test_every_30s():
    s = parse_schedule(every="30s")
    assert s.kind == "every" and s.every == timedelta(seconds=30) and s.cron is None
    assert s.next_after(Z(2024, 1, 1, 0, 0, 10)) == Z(2024, 1, 1, 0, 0, 30)
    assert s.next_after(Z(2024, 1, 1, 0, 0, 30)) == Z(2024, 1, 1, 0, 1)
    assert s.prev_before(Z(2024, 1, 1, 0, 0, 30)) == Z(2024, 1, 1)
    assert s.latest_at_or_before(Z(2024, 1, 1, 0, 0, 30)) == Z(2024, 1, 1, 0, 0, 30)
    assert s.latest_at_or_before(Z(2024, 1, 1, 0, 0, 29, 999999)) == Z(2024, 1, 1)
    assert s.slots_between(Z(2024, 1, 1), Z(2024, 1, 1, 0, 1, 15)) == [
        Z(2024, 1, 1, 0, 0, 30), Z(2024, 1, 1, 0, 1)]


def test_every_1h_ignores_the_zone_for_slots():
    s = parse_schedule(every="1h", timezone="Asia/Kolkata")  # +05:30
    assert s.slots_between(Z(2024, 3, 10, 0, 30), Z(2024, 3, 10, 3, 30)) == [
        Z(2024, 3, 10, 1), Z(2024, 3, 10, 2), Z(2024, 3, 10, 3)]
    ny = parse_schedule(every="1h", timezone="America/New_York")
    assert len(ny.slots_between(Z(2024, 3, 10), Z(2024, 3, 11))) == 24  # DST is irrelevant


def test_every_7m_counts_from_the_epoch():
    s = parse_schedule(every="7m")
    # 2024-01-01T00:00Z is 1704067200 s after the epoch = 4057302 * 420 + 360
    assert s.next_after(Z(2024, 1, 1)) == Z(2024, 1, 1, 0, 1)
    assert s.prev_before(Z(2024, 1, 1)) == Z(2023, 12, 31, 23, 54)
    slots = s.slots_between(Z(2024, 1, 1), Z(2024, 1, 1, 1))
    assert slots[:3] == [Z(2024, 1, 1, 0, 1), Z(2024, 1, 1, 0, 8), Z(2024, 1, 1, 0, 15)]
    assert all((t - EPOCH) % timedelta(minutes=7) == timedelta(0) for t in slots)
    # the same slots from an input in another zone
    assert s.next_after(datetime(2024, 1, 1, 9, tzinfo=SEOUL)) == Z(2024, 1, 1, 0, 1)


def test_every_sub_second():
    s = parse_schedule(every="500ms")
    assert s.next_after(Z(2024, 1, 1, 0, 0, 0, 1)) == Z(2024, 1, 1, 0, 0, 0, 500000)
    assert parse_schedule(every=0.25).next_after(Z(2024, 1, 1)) == Z(2024, 1, 1, 0, 0, 0, 250000)


# ------------------------------------------------------------------------------------------
# window and business date


def test_window_start_on_the_previous_local_date():
    s = cron("0 2 * * *", "Asia/Seoul")
    slot = Z(2024, 3, 9, 17)  # 2024-03-10 02:00 KST
    start, end = s.window(slot)
    assert (start, end) == (Z(2024, 3, 8, 17), slot)  # 2024-03-09 02:00 KST
    assert s.business_date(start) == date(2024, 3, 9)  # local date, not the UTC 8th
    assert start.date() == date(2024, 3, 8)


def test_window_across_spring_forward_and_business_date():
    s = cron("30 2 * * *", "America/New_York")
    start, end = s.window(Z(2024, 3, 11, 6, 30))
    assert (start, end) == (Z(2024, 3, 10, 7, 30), Z(2024, 3, 11, 6, 30))  # a 23-hour window
    assert s.business_date(start) == date(2024, 3, 10)


def test_every_business_date_uses_the_zone():
    s = parse_schedule(every="1d", timezone="America/New_York")
    start, end = s.window(Z(2024, 3, 10))
    assert (start, end) == (Z(2024, 3, 9), Z(2024, 3, 10))
    assert s.business_date(start) == date(2024, 3, 8)  # 19:00 EST on the 8th
    assert parse_schedule(every="1d").business_date(start) == date(2024, 3, 9)


def test_results_are_utc_and_inputs_any_zone():
    s = cron("0 * * * *", "Europe/Berlin")
    t = datetime(2024, 6, 1, 12, 30, tzinfo=timezone(timedelta(hours=-7)))
    got = s.next_after(t)
    assert got == Z(2024, 6, 1, 20) and got.tzinfo is UTC
    assert all(x.tzinfo is UTC for x in s.window(got))
    assert s.slots_between(t, t)[:1] == []


def test_naive_and_non_datetime_inputs_are_rejected():
    for s in (cron("* * * * *"), parse_schedule(every="1m")):
        with pytest.raises(ValueError, match="aware"):
            s.next_after(datetime(2024, 1, 1))
        with pytest.raises(ValueError, match="aware"):
            s.slots_between(Z(2024, 1, 1), datetime(2024, 1, 2))
        with pytest.raises(TypeError):
            s.prev_before(date(2024, 1, 1))  # type: ignore[arg-type]


def test_microseconds_and_strictness():
    s = cron("* * * * *")
    assert s.next_after(Z(2024, 1, 1, 0, 0, 59, 999999)) == Z(2024, 1, 1, 0, 1)
    assert s.next_after(Z(2024, 1, 1, 0, 1)) == Z(2024, 1, 1, 0, 2)
    assert s.prev_before(Z(2024, 1, 1, 0, 1, 0, 1)) == Z(2024, 1, 1, 0, 1)
    assert s.prev_before(Z(2024, 1, 1, 0, 1)) == Z(2024, 1, 1, 0, 0)
    assert s.latest_at_or_before(Z(2024, 1, 1, 0, 1)) == Z(2024, 1, 1, 0, 1)
    assert s.slots_between(Z(2024, 1, 1, 0, 1), Z(2024, 1, 1, 0, 3)) == [
        Z(2024, 1, 1, 0, 2), Z(2024, 1, 1, 0, 3)]
    assert s.slots_between(Z(2024, 1, 1, 0, 3), Z(2024, 1, 1, 0, 1)) == []


def test_thirty_days_of_minutes():
    s = cron("* * * * *", "America/New_York")
    slots = s.slots_between(Z(2024, 3, 1), Z(2024, 3, 31))
    assert len(slots) == 30 * 24 * 60  # the gap hour merges into the real one: no loss in UTC
    assert slots == sorted(set(slots))


# ------------------------------------------------------------------------------------------
# parsing errors: one line, with the field's name


@pytest.mark.parametrize(
    "expr",
    [
        "", "   ", "abc", "* * * *", "0 0 0 * * *", "0 0 0 * * * 2024", "@reboot", "@fortnightly",
        "61 * * * *", "* 24 * * *", "* * 0 * *", "* * 32 * *", "* * * 13 *", "* * * * 8",
        "*/0 * * * *", "5-1 * * * *", "* * * * MON-SUN", "* * * FOO *", "0 0 L * *",
        "0 0 * * 1#2", "0 0 15W * *", "0 0 ? * *", "H * * * *", "1,,2 * * * *", "-1 * * * *",
        "0 0 30 2 *", "0 0 31 4,6,9,11 *", "\uff10 0 * * *", "0 0 * * 1 # x", "0 0 * * 7/2",
    ],
)
def test_bad_cron(expr):
    with pytest.raises(ScheduleError) as info:
        parse_schedule(cron=expr)
    assert info.value.field == "cron"
    assert str(info.value).startswith("invalid cron: ")
    assert "\n" not in str(info.value)


def test_bad_cron_messages_say_what_is_wrong():
    with pytest.raises(ScheduleError, match="6 fields; expected 5"):
        parse_schedule(cron="0 0 0 * * *")
    with pytest.raises(ScheduleError, match="never fires"):
        parse_schedule(cron="0 0 30 2 *")
    with pytest.raises(ScheduleError, match="@reboot"):
        parse_schedule(cron="@reboot")
    with pytest.raises(ScheduleError, match="minute field: 61 is outside 0-59"):
        parse_schedule(cron="61 * * * *")


@pytest.mark.parametrize(
    "zone", ["Mars/Olympus", "../etc", "/etc/localtime", "America", "", "localtime", "UTC\x00",
             "Europe/Berlin ", "utc/../UTC"],
)
def test_bad_timezone(zone):
    with pytest.raises(ScheduleError) as info:
        parse_schedule(cron="0 0 * * *", timezone=zone)
    assert info.value.field == "timezone"
    assert str(info.value).startswith("invalid timezone: ")
    assert "\n" not in str(info.value)
    with pytest.raises(ScheduleError):
        parse_schedule(every="1m", timezone=zone)


@pytest.mark.parametrize(
    "every",
    ["abc", "0s", "-5s", "", "  ", "5", "1h1h", "30m2h", "5 m s", "1.5.5s", "1x", "1e3s",
     "0.0000001s", 0, -1, True, float("nan"), float("inf"), 1e-7, timedelta(0),
     timedelta(seconds=-1), "99999999999d", [30]],
)
def test_bad_every(every):
    with pytest.raises(ScheduleError) as info:
        parse_schedule(every=every)
    assert info.value.field == "every"
    assert str(info.value).startswith("invalid every: ")
    assert "\n" not in str(info.value)


def test_parse_interval_reports_the_given_field():
    with pytest.raises(ScheduleError) as info:
        parse_interval("soon", field="grace")
    assert info.value.field == "grace" and "grace" in str(info.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)), ("5m", timedelta(minutes=5)), ("1h", timedelta(hours=1)),
        ("2h30m", timedelta(hours=2, minutes=30)), ("2h 30m", timedelta(hours=2, minutes=30)),
        ("1d", timedelta(days=1)), ("1w", timedelta(weeks=1)),
        ("500ms", timedelta(milliseconds=500)), ("1.5s", timedelta(seconds=1.5)),
        ("1.5h", timedelta(minutes=90)), ("250us", timedelta(microseconds=250)),
        ("1m30s500ms", timedelta(seconds=90.5)), (45, timedelta(seconds=45)),
        (0.25, timedelta(milliseconds=250)), (timedelta(minutes=2), timedelta(minutes=2)),
    ],
)
def test_parse_interval(text, expected):
    assert parse_interval(text) == expected


def test_schedule_needs_exactly_one_of_cron_and_every():
    for kwargs in ({}, {"cron": "* * * * *", "every": "1m"}, {"timezone": "UTC"}):
        with pytest.raises(ScheduleError) as info:
            parse_schedule(**kwargs)
        assert info.value.field == "schedule"
        assert str(info.value).startswith("invalid schedule: ")


def test_schedule_constructed_directly_is_validated():
    assert Schedule(kind="cron", cron="@daily").cron == "0 0 * * *"
    assert Schedule(kind="every", every=timedelta(seconds=5)).timezone == "UTC"
    with pytest.raises(ScheduleError, match="schedule"):
        Schedule(kind="cron", cron="* * * * *", every=timedelta(seconds=5))
    with pytest.raises(ScheduleError, match="schedule"):
        Schedule(kind="hourly")  # type: ignore[arg-type]
    with pytest.raises(ScheduleError) as info:
        Schedule(kind="cron", cron="* * * * *", timezone="Nowhere/Land")
    assert info.value.field == "timezone"


def test_schedule_is_a_value():
    a = parse_schedule(cron="0 2 * * *", timezone="Asia/Seoul")
    b = parse_schedule(cron="0  2 * * *", timezone="Asia/Seoul")
    assert a == b and hash(a) == hash(b)
    assert a != parse_schedule(cron="0 2 * * *", timezone="UTC")
    assert "Asia/Seoul" in repr(a) and "_matcher" not in repr(a)
    restored = pickle.loads(pickle.dumps(a))
    assert restored == a and restored.next_after(Z(2024, 1, 1)) == Z(2024, 1, 1, 17)
    err = pickle.loads(pickle.dumps(ScheduleError("cron", "boom")))
    assert (err.field, err.message, str(err)) == ("cron", "boom", "invalid cron: boom")


# ------------------------------------------------------------------------------------------
# idempotency keys


def _documented_key(job, start, end, partition, version):
    digest = hashlib.sha256(b"runner.idempotency.v1")
    for part in (job, start, end, partition, version):
        raw = part.encode("utf-8", "surrogatepass")
        digest.update(str(len(raw)).encode() + b":" + raw)
    return digest.hexdigest()[:32]


def test_idempotency_key_matches_its_documented_encoding():
    key = idempotency_key("daily-settlement", Z(2024, 3, 9, 17), Z(2024, 3, 10, 17), "t1", "2")
    assert key == _documented_key("daily-settlement", "2024-03-09T17:00:00.000000Z",
                                  "2024-03-10T17:00:00.000000Z", "t1", "2")
    assert len(key) == 32 and int(key, 16) >= 0


def test_idempotency_key_is_stable_across_zones_of_the_same_instants():
    a = idempotency_key("j", Z(2024, 3, 9, 17), Z(2024, 3, 10, 17), "", "1")
    b = idempotency_key("j", datetime(2024, 3, 10, 2, tzinfo=SEOUL),
                        datetime(2024, 3, 10, 13, 0, tzinfo=NY), "", "1")  # EDT
    assert a == b
    assert a == idempotency_key("j", Z(2024, 3, 9, 17), Z(2024, 3, 10, 17), "", "1")


def test_idempotency_key_separates_every_component():
    base = ("job", Z(2024, 1, 1), Z(2024, 1, 2), "p", "1")
    variants = [
        base,
        ("job2", *base[1:]),
        ("job", Z(2024, 1, 1, 0, 0, 0, 1), *base[2:]),
        ("job", Z(2024, 1, 1), Z(2024, 1, 2, 0, 0, 0, 1), "p", "1"),
        (*base[:3], "q", "1"),
        (*base[:4], "2"),
    ]
    assert len({idempotency_key(*v) for v in variants}) == len(variants)


def test_idempotency_keys_of_many_partitions_are_the_single_keys():
    w = (Z(2024, 1, 1), Z(2024, 1, 2))
    parts = ["", "a", "t1", "é", "\x00", "\ud800", "🙂", "2:ab", "a|b", "x" * 300]
    for version in ("", "1", "v:2"):
        assert idempotency_keys("job", *w, parts, version) == [
            idempotency_key("job", *w, p, version) for p in parts]
    assert idempotency_keys("job", *w, [], "1") == []


def test_idempotency_key_is_injective_on_tricky_strings():
    w = (Z(2024, 1, 1), Z(2024, 1, 2))
    cases = [
        ("a|b", "c", "1"), ("a", "b|c", "1"), ("a", "b", "c|1"),
        ("a:1", "", "1"), ("a", ":1", "1"), ("1:a", "", "1"), ("", "1:a", "1"),
        ("", "", ""), ("", "", "1"), ("1", "", ""),
        ("ab", "", "1"), ("a", "b", "1"), ("", "ab", "1"),
        ("é", "", "1"), ("e\u0301", "", "1"), ("\x00", "", "1"), ("\n", "", "1"),
        ("\ud800", "", "1"), ("🙂", "", "1"), ("a\"b", "", "1"), ("a\\b", "", "1"),
        ("2:ab", "", "1"), ("a", "2024-01-01T00:00:00.000000Z", "1"),
    ]
    keys = [idempotency_key(job, *w, part, version) for job, part, version in cases]
    assert len(set(keys)) == len(cases)


def test_idempotency_key_rejects_naive_windows_and_non_strings():
    with pytest.raises(ValueError, match="window_start"):
        idempotency_key("j", datetime(2024, 1, 1), Z(2024, 1, 2), "", "1")
    with pytest.raises(TypeError, match="version"):
        idempotency_key("j", Z(2024, 1, 1), Z(2024, 1, 2), "", 1)  # type: ignore[arg-type]
