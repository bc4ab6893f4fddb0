"""Mind2Web and MMTB end to end through `edv run` (real Ray, HTTP, the scripted server):
No-Memory and EDV on the fixture folders. An agent that plays the fixtures' gold
actions scores 1.0 on every metric; a do-nothing agent scores 0."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from edv_ray.config import ConfigError, load_config_dict
from edv_ray.envs.mind2web.data import Mind2WebData
from edv_ray.envs.mmtb.data import load_dialogues
from edv_ray.pipeline import validate
from edv_ray.results.views import connect
from edv_ray.testing.helpers import scripted_config
from tests.envs.test_mind2web_episode import gold_agent
from tests.envs.test_mmtb_episode import gold_for
from tests.methods import scripts
from tests.methods.test_methods import run

FIX = Path(__file__).parents[1] / "fixtures"


def _config(server, tmp_path, bench: dict) -> dict:
    agents = [{"name": n, "model": "scripted", "prompt_strategy": "text_tools"}
              for n in ("bad", "good", "third")]
    cfg = scripted_config(server.base_url, tmp_path, method=["no_memory", "edv"], agents=agents,
                          roles={"executors": ["bad", "good"]},
                          edv={"n_executors": 2, "retrieval_tau": -1.0, "poison_per_task": 1})
    cfg["benchmark"] = bench
    return cfg


def _stage_scripts(server) -> None:
    server.agent_modes["bad"] = "nothing"
    server.add_script("distiller", scripts.distiller)
    server.add_script("verifier", scripts.verifier_all_approve)


@pytest.mark.slow
def test_mind2web_gold_scores_one_nothing_scores_zero(server, tmp_path):
    data = Mind2WebData(FIX / "mind2web")
    tasks = {t.annotation_id: t for s in ("train", "test_website") for t in data.tasks(s)}

    def agent(req, tag):
        if tag["agent"] == "bad":
            return {"role": "assistant", "content": "Answer: A"}
        complete, _ = gold_agent(tasks[tag["task_id"]])
        return {"role": "assistant", "content": complete(req["messages"])}

    _stage_scripts(server)
    server.add_script("agent", agent)
    run_dir = run(_config(server, tmp_path, {"name": "mind2web", "data_dir": str(FIX / "mind2web"),
                                            "split": "test_website", "train_split": "train"}))
    con = connect(run_dir)
    got = {(m, a): (n, p) for m, a, n, p in con.execute(
        "SELECT method, agent, sum(n), sum(successes) / sum(n) FROM method_pass_at_1 "
        "GROUP BY ALL").fetchall()}
    n_test = len(data.tasks("test_website"))
    assert got[("no_memory", "good")] == (n_test, 1.0)
    assert got[("no_memory", "bad")] == (n_test, 0.0)
    assert got[("edv", "good")] == (n_test, 1.0)  # routed to the agent that succeeds
    for (detail,) in con.execute("SELECT reward_json FROM episodes WHERE agent = 'good' "
                                 "AND stage = 'eval'").fetchall():
        m = json.loads(detail)["metrics"]
        assert m["element_acc"] == m["action_f1"] == m["step_sr"] == 1.0
    # task type = the website's domain; EDV distilled from the training group's contrast
    types = {t for (t,) in con.execute("SELECT DISTINCT task_type FROM episodes").fetchall()}
    assert types == {t.domain for t in tasks.values()}
    assert con.execute("SELECT count(*) FROM distill_runs WHERE status = 'ok'").fetchone()[0] > 0


@pytest.mark.slow
def test_mmtb_gold_scores_one_nothing_scores_zero(server, tmp_path):
    dialogues = {d.id: d for d in load_dialogues(FIX / "mmtb")}
    queues, lock = {}, threading.Lock()

    def agent(req, tag):
        if tag["agent"] == "bad":
            return {"role": "assistant", "content": ""}
        with lock:
            q = queues.setdefault(tag["episode_id"], gold_for(dialogues[tag["task_id"]]))
            return {"role": "assistant", "content": q.pop(0) if q else ""}

    _stage_scripts(server)
    server.add_script("agent", agent)
    run_dir = run(_config(server, tmp_path, {"name": "mmtb", "data_dir": str(FIX / "mmtb"),
                                            "split": "all", "train_split": "all"}))
    con = connect(run_dir)
    got = {(m, a): p for m, a, p in con.execute(
        "SELECT method, agent, sum(successes) / sum(n) FROM method_pass_at_1 "
        "GROUP BY ALL").fetchall()}
    assert got[("no_memory", "good")] == 1.0 and got[("no_memory", "bad")] == 0.0
    for (detail,) in con.execute("SELECT reward_json FROM episodes WHERE agent = 'good' "
                                 "AND stage = 'eval'").fetchall():
        assert json.loads(detail)["metrics"]["overall"] == 1.0


def test_missing_data_folder_is_one_clear_error(tmp_path):
    cfg = scripted_config("http://127.0.0.1:9/v1", tmp_path)
    cfg["benchmark"] = {"name": "mind2web", "data_dir": str(tmp_path / "nope")}
    with pytest.raises(ConfigError, match="test_task"):
        validate(load_config_dict(cfg))
