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
    got = {(a, t): (n, s, e, sc, eo) for a, t, n, s, e, sc, eo in con.execute(
        "SELECT agent, task_type, attempts, successes, errors, score, errors_only "
        "FROM ability_matrix").fetchall()}
    assert got == {
        ("a1", "airline"): (3, 2, 0, 2 / 3, False), ("a1", "retail"): (1, 0, 0, 0.0, False),
        ("a2", "airline"): (1, 1, 1, 1.0, False), ("a2", "retail"): (2, 2, 0, 1.0, False),
        ("a3", "airline"): (0, 0, 0, 0.5, False), ("a3", "retail"): (0, 0, 0, 0.5, False),
    }
    p = {(st, a, d): (e, er, s, p1) for st, a, d, e, er, s, p1 in con.execute(
        "SELECT stage, agent, domain, episodes, errors, successes, pass_at_1 FROM pass_at_1").fetchall()}
    # an errored episode counts as a failure in Pass@1 (and is shown beside it)
    assert p[("execute", "a2", "airline")] == (2, 1, 1, 0.5)
    assert p[("execute", "a1", "airline")][3] == 2 / 3
    assert p[("infer", "a3", "airline")] == (1, 0, 1, 1.0)
    lo, hi = con.execute("SELECT ci_low, ci_high FROM pass_at_1 WHERE stage = 'execute' "
                         "AND agent = 'a1' AND domain = 'airline'").fetchone()
    assert 0.2 < lo < 2 / 3 < hi < 0.95  # Wilson 95 % for 2/3: [0.208, 0.939]
    assert (round(lo, 3), round(hi, 3)) == (0.208, 0.939)


def test_error_only_cells_never_beat_a_measured_cell():
    from edv_ray.methods.selector import select_solver

    # a2 only ever errored: no evidence of ability, ranks below a1's measured 0.4
    assert select_solver({"a1": (5, 2, 0), "a2": (0, 0, 3)}, {}, ["a1", "a2"])[:2] == ("a1", "task_type")
    # an untried agent keeps the paper's 0.5 prior and beats 0.4
    assert select_solver({"a1": (5, 2, 0)}, {}, ["a1", "a3"])[0] == "a3"
    # unseen task type: the domain's row decides; nothing measured: the prior
    assert select_solver({}, {"a1": (4, 1, 0), "a2": (4, 3, 0)}, ["a1", "a2"])[:2] == ("a2", "domain")
    assert select_solver({}, {}, ["b", "a"])[:2] == ("a", "prior")


def test_views_exist_on_an_empty_run(tmp_path):
    con = connect(tmp_path)
    for view in ("episodes", "episode_attempts", "ability_matrix", "pass_at_1", "tokens_by_stage"):
        assert con.execute(f"SELECT count(*) FROM {view}").fetchone()[0] == 0
