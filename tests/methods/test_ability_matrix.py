"""The Ability Matrix (methods/ability_matrix.py) against hand-computed counts, and the
Model Selector's rule over its cells."""

from __future__ import annotations

import duckdb

from edv_ray.methods import ability_matrix
from edv_ray.methods.selector import select_solver
from edv_ray.results.parquet_io import write_rows_atomic
from edv_ray.results.schema import EPISODE_SCHEMA, USES_SCHEMA
from edv_ray.results.store import RunStore
from edv_ray.results.views import connect


def _row(agent, task_type, success, stage="execute", status="ok", task="t", attempt=1, trial=0,
         epoch=0):
    row = {k: None for k in EPISODE_SCHEMA.names}
    row.update(run_id="r", method="m", epoch=epoch, domain=task_type.split(":")[0], task_id=task,
               task_type=task_type, trial=trial, attempt=attempt, agent=agent, model="x",
               status=status, success=None if status == "error" else success,
               reward=None if status == "error" else float(success),
               episode_id=f"{stage}-{agent}-{task}-{trial}-{epoch}", experiences=[],
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
    con = connect(tmp_path)  # a run's connection carries the matrix views
    got = {(a, t): (n, s, e, sc, eo) for a, t, n, s, e, sc, eo in con.execute(
        "SELECT agent, task_type, attempts, successes, errors, score, errors_only "
        "FROM ability_matrix").fetchall()}
    assert got == {
        ("a1", "airline"): (3, 2, 0, 2 / 3, False), ("a1", "retail"): (1, 0, 0, 0.0, False),
        ("a2", "airline"): (1, 1, 1, 1.0, False), ("a2", "retail"): (2, 2, 0, 1.0, False),
        ("a3", "airline"): (0, 0, 0, 0.5, False), ("a3", "retail"): (0, 0, 0, 0.5, False),
    }
    assert con.execute("SELECT agent, domain, attempts, successes, errors FROM ability_by_domain "
                       "WHERE agent = 'a2'").fetchall() == [("a2", "airline", 1, 1, 1),
                                                            ("a2", "retail", 2, 2, 0)]
    # the matrix stages are a parameter: over the inference rows a3 has a measured cell
    ability_matrix.add_views(con, stages=("infer",))
    assert con.execute("SELECT attempts, successes, score FROM ability_matrix "
                       "WHERE agent = 'a3' AND task_type = 'airline'").fetchone() == (1, 1, 1.0)


def test_a_method_counts_only_its_own_executions_up_to_the_epoch(tmp_path):
    store = RunStore(tmp_path)
    store.write_pool([{"agent": "a1", "model": "x", "prompt_strategy": "text_tools", "is_executor": True}])
    rows = [_row("a1", "airline", True, task="1"), _row("a1", "airline", False, task="2"),
            _row("a1", "airline", True, task="3", epoch=1)]
    for stage, row in rows:
        store.write_episode(stage, row, [])
    used = [dict(run_id="r", stage="execute", epoch=r["epoch"], episode_id=r["episode_id"],
                 memory_key=None, condition="") for _s, r in rows if r["task_id"] != "2"]
    write_rows_atomic(used, tmp_path / "uses" / "method=m" / "execute.parquet", USES_SCHEMA)

    def airline(epoch):
        cells = ability_matrix.counted_cells(tmp_path, "m", epoch)
        return ability_matrix.row(cells, "task_type", "airline")["a1"]

    assert airline(0) == (1, 1, 0)  # task 2 is another method's; epoch 1 is later evidence
    assert airline(1) == (2, 2, 0)
    assert ability_matrix.row(ability_matrix.counted_cells(tmp_path, "other", 1),
                              "domain", "airline") == {}
    # stored with the method's decisions, and read back as memory_from does
    ability_matrix.method_matrix(tmp_path, "r", "m", 1)
    stored = ability_matrix.stored_matrix(tmp_path, "m")
    assert stored is not None and stored.parent.name == "epoch=1"
    assert ability_matrix.stored_matrix(tmp_path, "other") is None


def test_routing_basis_counts_decisions_by_basis():
    con = duckdb.connect()
    con.execute("CREATE TABLE episodes (stage VARCHAR, episode_id VARCHAR, epoch INT, agent VARCHAR, "
                "task_type VARCHAR, domain VARCHAR, status VARCHAR, success BOOLEAN)")
    con.execute("CREATE TABLE pool (agent VARCHAR, is_executor BOOLEAN)")
    con.execute("CREATE TABLE uses (method VARCHAR, episode_id VARCHAR)")
    con.execute("CREATE TABLE routing AS SELECT * FROM (VALUES ('m', 0, 'prior'), ('m', 0, 'prior'), "
                "('m', 0, 'task_type')) t(method, epoch, basis)")
    ability_matrix.add_views(con)
    assert con.execute("SELECT basis, decisions, used_prior FROM routing_basis").fetchall() == [
        ("prior", 2, 2), ("task_type", 1, 0)]


def test_error_only_cells_never_beat_a_measured_cell():
    # a2 only ever errored: no evidence of ability, ranks below a1's measured 0.4
    assert select_solver({"a1": (5, 2, 0), "a2": (0, 0, 3)}, {}, ["a1", "a2"])[:2] == ("a1", "task_type")
    # an untried agent keeps the paper's 0.5 prior and beats 0.4
    assert select_solver({"a1": (5, 2, 0)}, {}, ["a1", "a3"])[0] == "a3"
    # unseen task type: the domain's row decides; nothing measured: the prior
    assert select_solver({}, {"a1": (4, 1, 0), "a2": (4, 3, 0)}, ["a1", "a2"])[:2] == ("a2", "domain")
    assert select_solver({}, {}, ["b", "a"])[:2] == ("a", "prior")
