"""EDV's contrast gate on graded rewards (issue 29, item 5): a group contrasts when its
rewards lie ``contrast_margin`` apart (``contrast: graded``, the default), or — the old
gate, kept as an option — when it holds a success and a failure (``binary``). On a
low-success benchmark (Mind2Web: success = every step right) only the graded gate lets
groups through."""

from __future__ import annotations

from pathlib import Path

import pytest

from edv_ray.config import ConfigError, load_config_dict
from edv_ray.config_files import read_yaml
from edv_ray.envs.mind2web.data import Mind2WebData
from edv_ray.methods.edv.config import CONTRAST_MARGIN, EDVConfig
from edv_ray.methods.edv.jobs import has_contrast
from edv_ray.methods.edv.records import TrajectoryView
from edv_ray.results.views import connect
from edv_ray.testing.helpers import scripted_config
from edv_ray.validation.expect import gate_opens
from tests.envs.test_mind2web_episode import gold_agent
from tests.methods import scripts
from tests.methods.test_methods import roles_sent, run

FIX = Path(__file__).parents[1] / "fixtures" / "mind2web"


def runs(*rewards: float, signatures: str = "") -> list[TrajectoryView]:
    return [TrajectoryView(label=f"T{i}", episode_id=f"e{i}", agent=f"a{i}",
                           success=r >= 1.0, reward=r, transcript="",
                           signature=signatures[i - 1] if signatures else "same")
            for i, r in enumerate(rewards, 1)]


def test_graded_gate_sees_step_level_contrast_the_binary_gate_misses():
    mind2web_like = runs(0.2, 0.8)  # no run succeeded (every step right), rewards differ
    assert has_contrast(mind2web_like, sees_reward=True)  # graded is the default
    assert has_contrast(mind2web_like, sees_reward=True, contrast="graded")
    assert not has_contrast(mind2web_like, sees_reward=True, contrast="binary")
    # τ²-bench's 1/0 rewards: both gates agree for any allowed margin
    for margin in (CONTRAST_MARGIN, 0.5, 1.0):
        assert has_contrast(runs(1.0, 0.0), True, "graded", margin)
        assert not has_contrast(runs(1.0, 1.0), True, "graded", margin)
        assert not has_contrast(runs(0.0, 0.0), True, "graded", margin)
    assert has_contrast(runs(1.0, 0.0), True, "binary")


def test_graded_gate_margin_edges():
    assert not has_contrast(runs(0.5, 0.5), True)  # equal rewards: nothing to contrast
    assert not has_contrast(runs(0.4, 0.4, 0.4), True, "graded", 0.01)
    assert has_contrast(runs(0.5, 0.6), True, "graded", 0.1)  # exactly the margin (0.6 − 0.5 < 0.1 in floats)
    assert not has_contrast(runs(0.5, 0.59), True, "graded", 0.1)  # just under it
    assert has_contrast(runs(0.3, 0.35, 0.7), True, "graded", 0.4)  # max − min over the group
    assert not has_contrast(runs(0.3, 0.35, 0.7), True, "graded", 0.41)
    assert has_contrast(runs(0.0, 1.0), True, "graded", 1.0)  # the largest margin allowed
    assert not has_contrast(runs(0.7), True, "graded", 0.1)  # one run contrasts with nothing
    assert not has_contrast([], True)


def test_reward_blind_gate_never_reads_grades():
    # whatever the mode, a distiller not shown the grades is gated on what the runs did
    for mode in ("graded", "binary"):
        assert not has_contrast(runs(0.0, 1.0, signatures="xx"), False, mode)
        assert has_contrast(runs(0.3, 0.3, signatures="xy"), False, mode)


def test_contrast_settings_are_checked_up_front():
    assert EDVConfig().contrast == "graded" and EDVConfig().contrast_margin == CONTRAST_MARGIN
    for bad in ({"contrast_margin": 0.0}, {"contrast_margin": 1.5}, {"contrast": "any"},
                {"contrast": "binary", "contrast_margin": 0.3}):
        with pytest.raises(ValueError):
            EDVConfig(**bad)
    cfg = read_yaml(Path(__file__).parents[2] / "experiments" / "edv_mock_embedded.yaml")
    cfg["edv"] = {**cfg["edv"], "contrast": "binary", "contrast_margin": 0.3}
    with pytest.raises(ConfigError, match="contrast_margin applies to contrast=graded, not binary"):
        load_config_dict(cfg)


def test_validation_expectation_mirrors_the_gate():
    # the validation worlds' runs are graded 1/0: graded and binary pass the same groups
    groups = [(True, False), (True, True), (False, False), (False, True, True)]
    for outs in groups:
        rewards = [float(s) for s in outs]
        views = runs(*rewards)
        for e in ({}, {"contrast": "binary"}, {"contrast_margin": 1.0}):
            mode = e.get("contrast", "graded")
            margin = e.get("contrast_margin", CONTRAST_MARGIN)
            assert gate_opens(outs, e) == has_contrast(views, True, mode, margin), (outs, e)
        assert gate_opens(outs, {"require_contrast": False})


def _mind2web_config(server, tmp_path, contrast: str) -> dict:
    agents = [{"name": n, "model": "scripted", "prompt_strategy": "text_tools"}
              for n in ("bad", "partial", "third")]
    cfg = scripted_config(server.base_url, tmp_path / contrast, method="edv", agents=agents,
                          roles={"executors": ["bad", "partial"]},
                          edv={"n_executors": 2, "retrieval_tau": -1.0, "poison_per_task": 0,
                               "require_contrast": True, "contrast": contrast})
    cfg["benchmark"] = {"name": "mind2web", "data_dir": str(FIX), "split": "test_website",
                        "train_split": "train"}
    return cfg


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_low_success_benchmark_distills_under_graded_not_binary(server, tmp_path):
    """Mind2Web's training group: ``partial`` gets every step right but the last one
    (train-1, two steps: reward 0.5, no success), ``bad`` answers nothing (reward 0) —
    no success anywhere, so only the graded gate sees the contrast."""
    data = Mind2WebData(FIX)
    tasks = {t.annotation_id: t for s in ("train", "test_website") for t in data.tasks(s)}

    def agent(req, tag):
        if tag["agent"] == "bad":
            return {"role": "assistant", "content": "Answer: A"}
        task = tasks[tag["task_id"]]
        last = len(task.steps) - 1  # a wrong operation on the last step
        wrong = "Action: CLICK" if task.steps[last].op != "CLICK" else "Action: SELECT\nValue: x"
        complete, _ = gold_agent(task, mistakes={last: wrong})
        return {"role": "assistant", "content": complete(req["messages"])}

    server.add_script("agent", agent)
    server.add_script("distiller", scripts.distiller)
    server.add_script("verifier", scripts.verifier_all_approve)
    got = {}
    for mode in ("graded", "binary"):
        before = len(roles_sent(server, "distiller"))
        con = connect(run(_mind2web_config(server, tmp_path, mode)))
        rewards = dict(con.execute(
            "SELECT task_id, list(reward ORDER BY agent) FROM episodes WHERE stage = 'execute' "
            "GROUP BY task_id").fetchall())
        successes = con.execute("SELECT count(*) FILTER (WHERE success) FROM episodes "
                                "WHERE stage = 'execute'").fetchone()[0]
        status = dict(con.execute("SELECT task_id, status FROM distill_runs").fetchall())
        got[mode] = (rewards, successes, status, len(roles_sent(server, "distiller")) - before)
    rewards, successes, status, calls = got["graded"]
    assert successes == 0 and rewards == {"train-1": [0.0, 0.5], "train-2": [0.0, 0.0]}
    assert status == {"train-1": "ok", "train-2": "no_contrast"} and calls == 1
    assert got["binary"][:2] == (rewards, 0)  # the same runs ...
    assert got["binary"][2:] == ({"train-1": "no_contrast", "train-2": "no_contrast"}, 0)
