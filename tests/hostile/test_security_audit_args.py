"""`edv audit` checks its arguments up front (issue 28 D4): a key pasted into
`--api-key-env` landed in the `error` column of memory_audit.parquet; an unset variable or
an unreachable endpoint exited 0 having scored nothing. Now each is one line (exit 2)
before any item is sampled or written, the key never echoed; a judge that answers but
scores no item is exit 4 (like episodes ending as infrastructure errors)."""

from __future__ import annotations

import pytest

from edv_ray.cli import main
from edv_ray.results.parquet_io import read_rows
from tests.hostile.security_kit import one_line
from tests.hostile.test_security_key_names import SHAPED
from tests.report.test_memory_audit import (  # noqa: F401 - judge/judge_server are fixtures
    answer,
    auditor,
    judge,
    judge_server,
    make_run,
)


def _audit(run, url, *extra) -> int:
    return main(["audit", str(run), "--model-endpoint", url, "--model", "m", "--sample", "1",
                 "--retries", "0", *extra])


@pytest.mark.parametrize("key", [SHAPED["groq"], SHAPED["stripe_live"],
                                 "sk-proj-Zq3x9Lw0Vb7Hn2Rt5Ys8Kd1Fg4Jm6Pc"])
def test_key_pasted_into_api_key_env_is_refused_unechoed(judge, tmp_path, capsys, key):
    run = make_run(tmp_path)
    assert _audit(run, judge.base_url, "--api-key-env", key) == 2
    out = capsys.readouterr()
    line = one_line(out.out + out.err)
    assert "--api-key-env" in line and key not in line and key[:8] not in line
    assert not (run / "audit").exists() and not judge.requests


def test_unset_variable_is_refused(judge, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("EDV_TEST_JUDGE_KEY", raising=False)
    run = make_run(tmp_path)
    assert _audit(run, judge.base_url, "--api-key-env", "EDV_TEST_JUDGE_KEY") == 2
    assert "EDV_TEST_JUDGE_KEY is not set" in one_line(capsys.readouterr().out)
    assert not (run / "audit").exists()


@pytest.mark.parametrize("url,phrase", [("http://127.0.0.1:9/v1", "unreachable"),
                                        ("not a url", "unreachable")])
def test_unreachable_endpoint_is_refused_before_any_item(tmp_path, capsys, url, phrase):
    run = make_run(tmp_path)
    assert _audit(run, url) == 2
    assert phrase in one_line(capsys.readouterr().out)
    assert not (run / "audit").exists()


def test_no_item_scored_is_not_success(judge, tmp_path, capsys):
    judge.add_script("auditor", auditor(lambda prompt, attempt: "{not json"))
    run = make_run(tmp_path)
    assert _audit(run, judge.base_url) == 4
    assert "no item was scored" in capsys.readouterr().out
    rows = read_rows(run / "audit" / "memory_audit.parquet")  # the attempts are kept
    assert rows and not any(r["parse_ok"] for r in rows)


def test_a_scoring_judge_still_passes(judge, tmp_path):
    judge.add_script("auditor", auditor(lambda prompt, attempt: answer({})))
    assert _audit(make_run(tmp_path), judge.base_url) == 0
