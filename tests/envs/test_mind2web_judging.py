"""What judging roles see on Mind2Web, read from the requests the scripted server got:
the acting agent's rounds list the gold previous actions (MindAct), but no prompt of
the distiller, verifiers, Judge, ReasoningBank's self-judge or extractor holds a gold
action — they see the agent's own previous actions. The run's validity checks give the
split figures in the configured metrics mode."""

from __future__ import annotations

import html
import json
from pathlib import Path

import duckdb
import pytest
import yaml

from edv_ray.envs.mind2web.data import (
    Mind2WebData,
    RankerScores,
    attach_ranks,
    parse_task,
)
from edv_ray.envs.mind2web.episode import REVIEW_HEADING, render_trajectory, run_episode
from edv_ray.report.validity import run_checks
from edv_ray.testing.helpers import scripted_config
from tests.envs.test_mind2web_episode import gold_agent
from tests.envs.test_mind2web_official import CASES, scripted_model
from tests.methods import scripts
from tests.methods.test_methods import run

FIX = Path(__file__).parents[1] / "fixtures" / "mind2web"
JUDGING = {"distiller", "verifier", "judge", "self_judge", "extractor"}
WRONG = "Action: TYPE\nValue: Boston"  # every agent types Boston where the gold differs


def _texts(req) -> str:
    """A request's text with the fencing's escapes undone (``->`` is fenced as ``-&gt;``)."""
    return html.unescape("\n".join(str(m.get("content") or "") for m in req["messages"]))


@pytest.mark.slow
def test_judging_prompts_hold_no_gold_action(server, tmp_path):
    data = Mind2WebData(FIX)
    tasks = {t.annotation_id: t for s in ("train", "test_task") for t in data.tasks(s)}

    def agent(req, tag):
        if tag["agent"] == "bad":
            return {"role": "assistant", "content": "Answer: A"}
        task = tasks[tag["task_id"]]
        mistakes = {i: WRONG for i, s in enumerate(task.steps) if s.op == "TYPE"}
        complete, _ = gold_agent(task, mistakes)
        return {"role": "assistant", "content": complete(req["messages"])}

    for role, script in {"agent": agent, "distiller": scripts.distiller,
                         "verifier": scripts.verifier_all_approve,
                         "judge": scripts.make_judge("last"), "extractor": scripts.extractor,
                         "self_judge": scripts.make_self_judge(lambda a: "success")}.items():
        server.add_script(role, script)
    agents = [{"name": n, "model": "scripted", "prompt_strategy": "text_tools"}
              for n in ("bad", "good", "judge")]
    cfg = scripted_config(server.base_url, tmp_path, agents=agents,
                          method=["no_memory", "edv", "judge", "reasoning_bank"],
                          roles={"executors": ["bad", "good"], "judge": "judge"},
                          edv={"n_executors": 2, "retrieval_tau": -1.0},
                          reasoning_bank={"epochs": 1, "retrieval_k": 1})
    cfg["benchmark"] = {"name": "mind2web", "data_dir": str(FIX), "split": "test_task",
                        "task_ids": ["tt-1"], "train_split": "train"}
    run_dir = run(cfg)

    gold = {r for t in tasks.values() for r in t.action_reprs[:-1]}  # those listed as previous
    by_role: dict[str, list] = {}
    for req in server.requests:
        by_role.setdefault((req.get("user") or "").split("|")[1], []).append(req)
    assert JUDGING <= set(by_role), sorted(by_role)
    # the acting agent is shown gold previous actions (allowed under MindAct) ...
    assert any(g in _texts(r) for r in by_role["agent"] for g in gold)
    # ... no judging role ever is; they see what the agent itself did
    for role in JUDGING:
        for req in by_role[role]:
            text = _texts(req)
            assert not [g for g in gold if g in text], (role, [g for g in gold if g in text])
    seen = "\n".join(_texts(r) for role in JUDGING for r in by_role[role])
    assert REVIEW_HEADING in seen and "-> TYPE: Boston" in seen

    checks = [c for c in run_checks(run_dir) if c.name == "mind2web_metrics"]
    assert checks and all(c.ok for c in checks)
    good = next(c for c in checks if c.method == "no_memory" and c.figure.startswith("good"))
    # tt-1: CLICK right, TYPE Boston for "New York City" (F1 1/3), SELECT right
    assert "official: SR 0.000, macro EA 1.000, AF1 0.778, SSR 0.667" in good.figure
    assert "1 tasks" in good.figure and "agree" in good.detail


def test_transcripts_stored_before_review_content_hide_previous_actions():
    task = Mind2WebData(FIX).task("test_task", "tt-1")
    out = run_episode(task, gold_agent(task)[0])
    legacy = [{k: v for k, v in m.items() if k != "review_content"} for m in out.messages]
    assert any("Flights -> CLICK" in m["content"] for m in legacy)
    text = render_trajectory(legacy, 10**6)
    assert "Flights -> CLICK" not in text and "Previous actions: (not shown)" in text
    assert "[link]" not in render_trajectory(out.messages, 10**6)


def _con(case: str, mode: str, tmp_path: Path):
    """The tables the check reads, for one method over an official differential case."""
    c = CASES[case]
    tasks = [attach_ranks(parse_task(r, "case"), RankerScores({}, c["ranks"])) for r in c["tasks"]]
    complete = scripted_model(c)
    outs = [run_episode(t, complete, seed=c["seed"], top_k=c["top_k"], metrics=mode)
            for t in tasks]
    con = duckdb.connect()
    con.execute("CREATE TABLE selection AS SELECT * FROM (VALUES " + ", ".join(
        f"('test', '{t.annotation_id}')" for t in tasks) + ") v(selection, task_id)")
    con.execute("CREATE TABLE episodes (episode_id VARCHAR, reward_json VARCHAR)")
    con.execute("CREATE TABLE method_results (method VARCHAR, epoch INT, agent VARCHAR, "
                "trial INT, task_id VARCHAR, episode_id VARCHAR)")
    for o in reversed(outs):  # stored out of order: the check sorts by the selection
        detail = o.to_dict()
        detail.pop("messages")
        con.execute("INSERT INTO episodes VALUES (?, ?)", [o.task_id, json.dumps(detail)])
        con.execute("INSERT INTO method_results VALUES ('no_memory', NULL, 'a', 0, ?, ?)",
                    [o.task_id, o.task_id])
    cfg = scripted_config("http://127.0.0.1:9/v1", tmp_path)
    cfg["benchmark"] = {"name": "mind2web", "data_dir": str(FIX), "metrics": mode}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    return con


def test_the_check_names_the_mode_and_what_the_official_code_drops(tmp_path):
    from edv_ray.report.mind2web_checks import mind2web_metrics

    [off] = mind2web_metrics(_con("last_step_no_positive", "official", tmp_path), tmp_path)
    assert off.ok and off.figure.startswith("a — official: SR 0.500, macro EA 1.000, AF1 0.875, "
                                            "SSR 0.750")
    assert off.detail.startswith("the official scorer leaves out 1 trailing step(s)")
    assert "corrected: SR 0.000, macro EA 0.750, AF1 0.625, SSR 0.500" in off.detail
    [cor] = mind2web_metrics(_con("last_step_no_positive", "corrected", tmp_path), tmp_path)
    assert cor.ok and cor.figure.startswith("a — corrected: SR 0.000")
    assert "official: SR 0.500" in cor.detail
    # episodes scored in one mode, the config saying the other: a failed check
    con = _con("multiline_gold", "official", tmp_path)
    cfg = yaml.safe_load((tmp_path / "config.yaml").read_text())
    cfg["benchmark"]["metrics"] = "corrected"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    [mixed] = mind2web_metrics(con, tmp_path)
    assert not mixed.ok and "modes ['official']" in mixed.detail
