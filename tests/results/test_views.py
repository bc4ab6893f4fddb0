"""The run's generic DuckDB views (results/views.py) against hand-computed counts."""

from __future__ import annotations

from edv_ray.results.schema import EPISODE_SCHEMA
from edv_ray.results.store import RunStore
from edv_ray.results.views import connect


def _row(agent, domain, success, stage="execute", status="ok", task="t", attempt=1):
    row = {k: None for k in EPISODE_SCHEMA.names}
    row.update(run_id="r", method="m", epoch=0, domain=domain, task_id=task, task_type=domain,
               trial=0, attempt=attempt, agent=agent, model="x", status=status,
               success=None if status == "error" else success,
               reward=None if status == "error" else float(success),
               episode_id=f"{stage}-{agent}-{task}", experiences=[],
               retrieved_item_ids=[], retrieved_banks=[])
    return stage, row


def test_pass_at_1_counts_errors_as_failures_with_wilson_intervals(tmp_path):
    store = RunStore(tmp_path)
    rows = [
        _row("a1", "airline", True, task="1"), _row("a1", "airline", False, task="2"),
        _row("a1", "airline", True, task="3"),
        _row("a2", "airline", False, status="error", task="1"),
        # a retried episode counts once, with its latest attempt
        _row("a2", "airline", False, status="error", task="2"),
        _row("a2", "airline", True, task="2", attempt=2),
        _row("a3", "airline", True, stage="infer", task="9"),
    ]
    for stage, row in rows:
        store.write_episode(stage, row, [])
    con = connect(tmp_path, with_methods=False)
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


def test_views_exist_on_an_empty_run(tmp_path):
    con = connect(tmp_path)
    for view in ("episodes", "episode_attempts", "ability_matrix", "pass_at_1", "tokens_by_stage",
                 "routing_basis", "method_results"):
        assert con.execute(f"SELECT count(*) FROM {view}").fetchone()[0] == 0
    # without the methods' views, only the generic ones
    bare = connect(tmp_path, with_methods=False)
    names = {r[0] for r in bare.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    assert {"episodes", "pass_at_1", "routing", "routing_matrix"} <= names
    assert not names & {"ability_matrix", "matrix_episodes", "routing_basis", "method_results"}
