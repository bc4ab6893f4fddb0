"""Calls of a lost attempt are not counted twice (issue 28 D13).

A damaged episodes segment is set aside on ``--resume`` and its episodes run again — as
the same attempt number, since their rows are gone — while the lost attempts' call rows
(in an intact ``llm_calls`` segment) stayed: 8 calls for 4 episodes. Now an episode's call
rows carry its attempt and a per-attempt ``attempt_id``; ``llm_calls`` (and every token
view over it) counts only calls of attempts that have an episode row, and the others stay
on disk, listed by ``orphan_calls``."""

from __future__ import annotations

import pytest

from edv_ray.cli import main
from edv_ray.results.store import compact_stage, numbered_segments
from edv_ray.results.views import connect
from tests.hostile.security_kit import mock_config, write_yaml


def _tokens(run_dir) -> tuple:
    con = connect(run_dir)
    return (con.execute("SELECT sum(calls), sum(prompt_tokens), sum(completion_tokens) "
                        "FROM tokens_by_stage").fetchone(),
            con.execute("SELECT sum(calls), sum(prompt_tokens), sum(completion_tokens) "
                        "FROM token_use").fetchone(),
            con.execute("SELECT count(*) FROM episodes").fetchone()[0])


@pytest.mark.slow
def test_rerun_after_a_damaged_segment_counts_one_attempt(server, tmp_path, capsys):
    path = write_yaml(tmp_path / "cfg.yaml", mock_config(server, tmp_path))
    assert main(["run", "--no-progress", path]) == 0
    run_dir = tmp_path / "runs" / "t"
    compact_stage(run_dir, "eval")  # both tables merged into segments, as a long run does
    before = _tokens(run_dir)
    calls, _, _ = before[0]
    assert calls > 0 and before[2] == 2
    [segment] = numbered_segments(run_dir / "episodes" / "stage=eval", legacy=False)
    assert numbered_segments(run_dir / "llm_calls" / "stage=eval", legacy=False)
    segment.write_bytes(segment.read_bytes()[:60])  # cut short: every episode row is lost
    assert main(["run", "--no-progress", "--resume", str(run_dir)]) == 0
    capsys.readouterr()
    assert _tokens(run_dir) == before  # one attempt's calls and tokens, not two
    con = connect(run_dir)
    orphans = con.execute("SELECT count(*) FROM orphan_calls").fetchone()[0]
    assert orphans == calls  # the lost attempts' calls are kept on disk, not counted
    assert con.execute("SELECT count(*) FROM llm_call_rows").fetchone()[0] == 2 * calls
