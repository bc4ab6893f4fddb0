"""Test-time seeds are paired across methods (issue 29 item 6) and a picking method at
several trials passes its validity table (item 9), on one real run: No-Memory, Judge,
EDV and Router on the simulated engine at 2 trials, 2 construction epochs (EDV and Router
test at epoch 1, No-Memory and Judge at epoch 0).

Every method's test episodes of one (task, trial, agent) carry the same episode seed and
send the same sampling seed (read from the stored episode rows and from the requests'
``seed`` in the call rows), while construction epochs still differ by epoch. The run's
validity table passes — although the Judge picked different agents on different trials
of a task — and `edv compare` accepts it without ``--allow-invalid``."""

from __future__ import annotations

import pytest
import yaml
from rich.console import Console

from edv_ray import pipeline
from edv_ray.cli import main
from edv_ray.config import load_config_dict
from edv_ray.report.validity import run_checks
from edv_ray.results.views import connect
from tests.simulation.test_sim_runs import EXAMPLE

TEST_STAGES = ("eval", "infer", "route")  # no_memory / judge, edv, router
TEST_TASKS = ["update_task_with_message_history", "update_task_with_initialization_data",
              "update_task_with_initialization_actions", "update_task_with_history_and_env_assertions"]


@pytest.fixture(scope="module")
def run_dir(ray_session, tmp_path_factory):
    cfg = yaml.safe_load(EXAMPLE.read_text())
    # three executors: a Judge picking two of them on a task's two trials is neither
    # "one agent" nor "every agent" of the task
    cfg["models"]["sim"]["simulation"]["agents"]["mid"] = {"success": {"default": 0.55}}
    cfg["agents"].append({"name": "mid", "model": "sim", "prompt_strategy": "native_tools"})
    cfg["roles"]["executors"] = ["strong", "weak", "mid"]
    for a, seed in zip(cfg["agents"], (11, 22, 33, 44)):
        a["sampling"] = {"seed": seed}
    cfg.update({
        "output_dir": str(tmp_path_factory.mktemp("runs")),
        "method": ["no_memory", "judge", "edv", "router"],
        "runtime": {"concurrency": 8, "workers": 1, "episode_timeout_s": 60, "trials": 2},
        "benchmark": {"name": "tau2", "domains": ["mock"], "split": "all", "num_tasks": None,
                      "task_ids": TEST_TASKS, "train_split": "all", "num_train_tasks": None,
                      "train_task_ids": ["create_task_1", "update_task_1", "impossible_task_1"]},
        "edv": {"epochs": 2}, "router": {"epochs": 2}})
    cfg, run_id, run_dir = pipeline.prepare_from(load_config_dict(cfg))
    result = pipeline.execute(cfg, run_id, run_dir, console=Console(quiet=True), show_progress=False)
    assert result.complete, (result.errors, result.unfinished)
    return run_dir


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_test_episodes_share_seeds_across_methods(run_dir):
    con = connect(run_dir)
    rows = con.execute(f"""
        SELECT e.stage, e.epoch, e.task_id, e.trial, e.agent, e.seed,
               list(DISTINCT c.seed) FILTER (WHERE c.seed IS NOT NULL) AS sent
        FROM episodes e LEFT JOIN llm_calls c ON c.episode_id = e.episode_id AND c.role = 'agent'
        WHERE e.stage IN {TEST_STAGES} GROUP BY ALL""").fetchall()
    assert {(s, ep) for s, ep, *_ in rows} == {("eval", 0), ("infer", 1), ("route", 1)}
    by_key: dict[tuple, set] = {}
    for stage, _epoch, task, trial, agent, seed, sent in rows:
        assert len(sent) == 1, (stage, task, trial, agent, sent)  # the agent's requests carry one seed
        by_key.setdefault((task, trial, agent), set()).add((seed, sent[0]))
    assert all(len(v) == 1 for v in by_key.values()), {k: v for k, v in by_key.items() if len(v) > 1}
    # the pairing is real: every EDV / Router test episode has a No-Memory twin seed
    nm = {(t, tr, a) for s, _e, t, tr, a, *_ in rows if s == "eval"}
    assert {(t, tr, a) for s, _e, t, tr, a, *_ in rows if s != "eval"} <= nm
    # trials and agents still differ
    seeds = {k: next(iter(v)) for k, v in by_key.items()}
    task = TEST_TASKS[0]
    assert seeds[(task, 0, "strong")] != seeds[(task, 1, "strong")]
    assert seeds[(task, 0, "strong")][1] != seeds[(task, 0, "weak")][1]
    # construction epochs are new samples: epoch 0 and epoch 1 executions differ in seed
    ex = con.execute("""
        SELECT e.task_id, e.trial, e.agent, list(DISTINCT e.epoch ORDER BY e.epoch),
               count(DISTINCT e.seed), count(DISTINCT c.seed)
        FROM episodes e JOIN llm_calls c ON c.episode_id = e.episode_id AND c.role = 'agent'
        WHERE e.stage = 'execute' GROUP BY ALL""").fetchall()
    both = [r for r in ex if r[3] == [0, 1]]
    assert both and all(n_ep == 2 and n_sent == 2 for *_k, n_ep, n_sent in both), ex


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_picking_methods_pass_validity_at_two_trials(run_dir, capsys):
    con = connect(run_dir)
    # the case under test happened: the Judge picked different agents on trials of a task
    split = con.execute("""SELECT count(*) FROM (SELECT task_id FROM method_results
                           WHERE method = 'judge' GROUP BY task_id
                           HAVING count(DISTINCT agent) > 1)""").fetchone()[0]
    assert split >= 1 and con.execute("SELECT count(DISTINCT agent) FROM method_results "
                                      "WHERE method = 'judge'").fetchone()[0] == 3
    checks = {c.method: c for c in run_checks(run_dir) if c.name == "tasks_scored"}
    for method in ("judge", "router", "edv", "no_memory"):
        assert checks[method].ok, (method, checks[method])
    assert "one picked result per trial" in checks["judge"].detail
    assert "one result per agent and trial" in checks["no_memory"].detail
    failed = [c for c in run_checks(run_dir) if not c.ok]
    assert not failed, failed
    assert main(["compare", str(run_dir), "--out", str(run_dir.parent / "cmp"), "--boot", "100"]) == 0
    assert "validity check(s) failed" not in capsys.readouterr().out


def test_resume_of_a_run_seeded_by_the_earlier_rule_is_refused(tmp_path):
    """A run started before this rule holds EDV test episodes at epoch 1 seeded with the
    epoch: resuming it would seed its remaining test episodes by the new rule — refused,
    one line. Construction episodes (epoch in their seed, both rules) and test episodes
    under the new rule resume as before."""
    from edv_ray.config import ConfigError, Sampling
    from edv_ray.llm.client import Endpoint
    from edv_ray.results.store import RunStore
    from edv_ray.runtime.plan import EPOCH_SEED_STRIDE, episode_seed, pending_specs
    from edv_ray.runtime.spec import EpisodeSpec

    def spec(stage, task, epoch):
        return EpisodeSpec(run_id="r", stage=stage, method="edv", benchmark={}, domain="d",
                           task_id=task, task_type="x", agent="a", model="m", epoch=epoch,
                           prompt_strategy="native_tools", sampling=Sampling(), solo=True,
                           agent_endpoint=Endpoint("m", "openai/m", "http://x"),
                           seed=episode_seed(0, 0 if stage == "infer" else epoch, 0))

    def finish(s, seed):
        RunStore(tmp_path).write_episode(s.stage, {
            "run_id": "r", "stage": s.stage, "episode_id": s.episode_id, "attempt": 1,
            "status": "ok", "seed": seed, "experiences": [], "retrieved_item_ids": [],
            "retrieved_banks": []}, [])

    construct, test_new, test_old = spec("execute", "t1", 1), spec("infer", "t1", 1), spec("infer", "t2", 1)
    assert construct.seed == test_new.seed + EPOCH_SEED_STRIDE  # construction: epoch keyed
    finish(construct, construct.seed)
    finish(test_new, test_new.seed)
    assert pending_specs([construct, test_new], tmp_path) == []
    finish(test_old, test_old.seed + EPOCH_SEED_STRIDE)  # what the earlier rule sent
    with pytest.raises(ConfigError, match=r"1 finished test episode\(s\).*earlier rule.*start a new run"):
        pending_specs([construct, test_new, test_old], tmp_path)
