"""Human rating sheets keyed by rater (issue 22 item 7): two people who both return the
exported `human_rating_sheet.csv` are two raters, never one replacing the other; a sheet
naming no rater is refused; several raters are kept and the summary's agreement (with
the LLM and between raters) uses them all; a sheet that is not UTF-8, holds NUL bytes or
is missing is one line (exit 2), nothing written. Through `edv audit-import`."""

from __future__ import annotations

import pytest

from edv_ray.cli import main
from edv_ray.report import memory_audit as MA
from edv_ray.results.parquet_io import read_rows
from tests.hostile.security_kit import one_line
from tests.report.test_memory_audit import (  # noqa: F401 - judge/judge_server are fixtures
    audit,
    judge,
    judge_server,
    make_run,
    read_sheet,
    write_sheet,
)


@pytest.fixture
def audited(judge, tmp_path):  # noqa: F811 - the imported fixture
    run = make_run(tmp_path)
    audit(judge, run)
    return run


def _filled(run, score: str, **extra) -> list[dict]:
    return [{**r, **{c: score for c in MA.CRITERIA}, **extra} for r in read_sheet(run)]


def _import(run, path, *rater) -> int:
    return main(["audit-import", str(run), str(path), *rater])


def test_two_people_returning_the_same_file_name_are_two_raters(audited, tmp_path, capsys):
    (tmp_path / "alice").mkdir()
    (tmp_path / "bob").mkdir()
    alice = write_sheet(tmp_path / "alice" / "human_rating_sheet.csv", _filled(audited, "4"))
    bob = write_sheet(tmp_path / "bob" / "human_rating_sheet.csv", _filled(audited, "3"))
    assert _import(audited, alice) == 2  # no rater named: refused, nothing written
    assert "no rater: give --rater NAME" in one_line(capsys.readouterr().out)
    assert not (audited / "audit" / "human_scores.parquet").exists()
    assert _import(audited, alice, "--rater", "alice") == 0
    assert _import(audited, bob, "--rater", "bob") == 0
    assert "raters: alice, bob" in capsys.readouterr().out
    rows = read_rows(audited / "audit" / "human_scores.parquet")
    assert sorted({r["rater"] for r in rows}) == ["alice", "bob"] and len(rows) == 10
    s = {(r["method"], r["criterion"]): r for r in MA.summarize(audited)}
    g = s[("edv", "groundedness")]
    n_edv = sum(r["method"] == "edv" for r in read_rows(audited / "audit" / "memory_audit.parquet"))
    assert g["raters"] == 2 and g["human_n"] == 2 * n_edv and g["rater_pairs"] == n_edv
    assert g["rater_exact"] == 0.0 and g["rater_within_one"] == 1.0  # 4 vs 3 on every item
    assert g["pairs"] == 2 * sum(1 for r in read_rows(audited / "audit" / "memory_audit.parquet")
                                 if r["method"] == "edv" and r["groundedness"] is not None)
    # alice again: only alice's rows replaced
    assert _import(audited, alice, "--rater", "alice") == 0
    assert len(read_rows(audited / "audit" / "human_scores.parquet")) == 10


def test_a_rater_column_holds_several_raters(audited, tmp_path):
    rows = _filled(audited, "2", rater="carol") + _filled(audited, "5", rater="dan")
    assert _import(audited, write_sheet(tmp_path / "both.csv", rows)) == 0
    got = read_rows(audited / "audit" / "human_scores.parquet")
    assert sorted({r["rater"] for r in got}) == ["carol", "dan"] and len(got) == 10


@pytest.mark.parametrize("name,content,phrase", [
    ("latin1", lambda h: (h + "\n").encode() + "x,caf\xe9\n".encode("latin-1"), "is not UTF-8"),
    ("utf16", lambda h: (h + "\n").encode("utf-16"), "is not UTF-8"),
    ("nul", lambda h: (h + "\nx,\x00\n").encode(), "nothing imported"),
    ("missing", None, "no such file"),
    ("blank_rater_rows", "blank", "no rater"),
    ("rated_twice_by_one", "twice", "rated twice by 'erin'"),
])
def test_bad_sheet_is_one_line_nothing_written(audited, tmp_path, capsys, name, content, phrase):
    path = tmp_path / f"{name}.csv"
    header = ",".join(MA.SHEET_COLUMNS)
    if content == "blank":
        write_sheet(path, _filled(audited, "1", rater=""))
    elif content == "twice":
        write_sheet(path, _filled(audited, "1", rater="erin") * 2)
    elif content is not None:
        path.write_bytes(content(header))
    assert _import(audited, path) == 2
    assert phrase in one_line(capsys.readouterr().out)
    assert not (audited / "audit" / "human_scores.parquet").exists()
