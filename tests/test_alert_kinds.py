"""One registry of alert kinds (runner/model/alerts.py): runner.alerts is the union of one view per
kind, each in its own file, and the registry, the union and the files agree."""

from __future__ import annotations

import re

import pytest

from runner import sqlfiles
from runner.model import alerts
from tests.support import ROOT, rows, scalar


def test_the_union_names_every_kind_of_the_registry_in_order() -> None:
    union = sqlfiles.read_sql("views/alerts.sql")
    named = re.findall(r"SELECT \* FROM runner\.alert_([a-z_]+)", union)
    assert named == list(alerts.KINDS)


def test_the_view_as_the_database_holds_it_reads_every_kind(db_url: str) -> None:
    """The union as applied (a stray ';' between two branches leaves the file naming a kind
    the view never reads: a merge once did)."""
    definition = scalar(db_url, "SELECT pg_get_viewdef('runner.alerts'::regclass)")
    assert re.findall(r"FROM runner\.alert_([a-z_]+)", definition) == list(alerts.KINDS)


def test_every_kind_has_its_file_listed_before_the_union() -> None:
    live = sqlfiles.live_objects()
    on_disk = {p.name for p in (ROOT / "sql" / "views").glob("alert_*.sql")} - {"alert_jobs.sql"}
    assert on_disk == {f"alert_{kind}.sql" for kind in alerts.KINDS}
    for kind in alerts.KINDS:
        text = sqlfiles.read_sql(alerts.file_of(kind))
        assert f"CREATE OR REPLACE VIEW {alerts.view_of(kind)} AS" in text
        assert f"SELECT '{kind}'" in text, f"{kind}: its rows carry another kind"
        assert live.index(alerts.file_of(kind)) < live.index("views/alerts.sql")


def test_each_kind_view_has_the_six_columns(db_url: str) -> None:
    for kind in alerts.KINDS:
        columns = rows(db_url, "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
                               " WHERE attrelid = %s::regclass AND attnum > 0 ORDER BY attnum",
                       (alerts.view_of(kind),))
        assert columns == [("kind", "text"), ("job_name", "text"), ("owner", "text"), ("run_id", "bigint"),
                           ("detail", "text"), ("since", "timestamp with time zone")], kind
        assert scalar(db_url, f"SELECT count(*) FROM {alerts.view_of(kind)} WHERE kind <> %s", (kind,)) == 0


def test_an_unknown_kind_is_one_line() -> None:
    with pytest.raises(ValueError, match="no alert kind 'nope'"):
        alerts.view_of("nope")
