"""Ability Matrix and Pass@1 views against hand-computed counts."""

from __future__ import annotations

from edv_ray.results.store import RunStore
from edv_ray.results.views import connect
from edv_ray.results.schema import EPISODE_SCHEMA


def _row(agent, task_type, success, stage="execute", status="ok", task="t", attempt=1, trial=0):
    row = {k: None for k in EPISODE_SCHEMA.names}
    row.update(run_id="r", method="m", epoch=0, domain=task_type.split(":")[0], task_id=task,
               task_type=task_type, trial=trial, attempt=attempt, agent=agent, model="x",
               status=status, success=None if status == "error" else success,
               reward=None if status == "error" else float(success),
               episode_id=f"{stage}-{agent}-{task}-{trial}", experiences=[],
               retrieved_item_ids=[], retrieved_banks=[])
    return stage, row


def test_ability_matrix_counts_prior_and_error_rows(tmp_path):
    store = RunStore(tmp_path)
    store.write_pool([{"agent": a, "model": "x", "prompt_strategy": "text_tools", "is_executor": True}
                      for a in ("a1", "a2", "a3")])
    rows = [
        _row("a1", "airline", True, task="1"), _row("a1", "airline", False, task="2"),
        _row("a1", "airline", True, task="3"), _row("a1", "retail", False, task="4"),
        _row("a2", "retail", True, task="4"), _row("a2", "retail", True, task="5"),
        # an infrastructure error is not an attempt
        _row("a2", "airline", False, status="error", task="1"),
        # a retried episode counts once, with its latest attempt
        _row("a2", "airline", False, status="error", task="2"),
        _row("a2", "airline", True, task="2", attempt=2),
        # inference episodes do not feed the matrix
        _row("a3", "airline", True, stage="infer", task="9"),
    ]
    for stage, row in rows:
        store.write_episode(stage, row, [])
    con = connect(tmp_path)
    got = {(a, t): (n, s, sc) for a, t, n, s, sc in con.execute(
        "SELECT agent, task_type, attempts, successes, score FROM ability_matrix").fetchall()}
    assert got == {
        ("a1", "airline"): (3, 2, 2 / 3), ("a1", "retail"): (1, 0, 0.0),
        ("a2", "airline"): (1, 1, 1.0), ("a2", "retail"): (2, 2, 1.0),
        ("a3", "airline"): (0, 0, 0.5), ("a3", "retail"): (0, 0, 0.5),
    }
    p = {(st, a, d): (e, er, s, p1) for st, _m, a, d, e, er, s, p1 in con.execute(
        "SELECT * FROM pass_at_1").fetchall()}
    assert p[("execute", "a2", "airline")] == (2, 1, 1, 1.0)
    assert p[("execute", "a1", "airline")][3] == 2 / 3
    assert p[("infer", "a3", "airline")] == (1, 0, 1, 1.0)


def test_views_exist_on_an_empty_run(tmp_path):
    con = connect(tmp_path)
    for view in ("episodes", "episode_attempts", "ability_matrix", "pass_at_1", "tokens_by_stage"):
        assert con.execute(f"SELECT count(*) FROM {view}").fetchone()[0] == 0
