"""Scripted answers for the stage roles of every method (the server reads the role from
the OpenAI ``user`` tag our client sends)."""

from __future__ import annotations

import json
import re


def reply(obj) -> dict:
    return {"role": "assistant", "content": json.dumps(obj)}


def prompt_of(req) -> str:
    return req["messages"][-1]["content"]


def distiller(req, tag):
    rule = f"Confirm the record before changing anything for task {tag['task_id']}."
    return reply({"experiences": [{"title": "Confirm first", "when_to_use": "Before an update",
                                   "rule": rule, "tags": [], "evidence": ["T1"]}]})


def verifier_all_approve(req, tag):
    return reply({"approve": True, "rationale": "consistent with the policy"})


def make_judge(prefer_agent: str):
    """Judge method: pick the run whose block names ``prefer_agent``'s label order."""
    def judge(req, tag):
        labels = re.findall(r'<run label="(T\d+)"', prompt_of(req))
        # runs are sorted by agent name; the test tells which index to pick
        return reply({"pick": labels[0] if prefer_agent == "first" else labels[-1],
                      "rationale": "looks right"})
    return judge


def make_self_judge(label_for):
    """RB's self-judge: ``label_for(agent)`` → success | failure (never sees a reward)."""
    def self_judge(req, tag):
        if "Exactly one will be kept" in prompt_of(req):  # MaTTS best-of-k pick
            return reply({"pick": "A1", "rationale": "first"})
        return reply({"reasoning": "judged from the record", "status": label_for(tag["agent"])})
    return self_judge


def extractor(req, tag):
    kind = "lesson" if "failed" in prompt_of(req) else "strategy"
    return reply({"items": [{"title": f"{kind} from {tag['task_id']}",
                             "description": f"When a task like {tag['task_id']} comes up.",
                             "content": f"A {kind} learned on {tag['task_id']} by {tag['agent']}."}]})


def script_stage_roles(server) -> None:
    """Scripted answers for every learning / judging role; agent ``bad`` never acts."""
    server.agent_modes["bad"] = "nothing"
    server.add_script("distiller", distiller)
    server.add_script("verifier", verifier_all_approve)
    server.add_script("judge", make_judge("last"))
    server.add_script("self_judge", make_self_judge(lambda a: "success"))
    server.add_script("extractor", extractor)


def conversation_config(server, tmp_path, train: list[str], test: list[str], **benchmark) -> dict:
    """EDV + ReasoningBank + Judge on airline in conversation mode: executors bad / good,
    judge third."""
    from edv_ray.testing.helpers import scripted_config

    agents = [{"name": n, "model": "scripted", "prompt_strategy": "native_tools"}
              for n in ("bad", "good", "third")]
    return scripted_config(
        server.base_url, tmp_path, method=["edv", "reasoning_bank", "judge"], agents=agents,
        roles={"executors": ["bad", "good"], "judge": "third",
               "user_simulator": {"model": "scripted"}},
        benchmark={"domains": ["airline"], "split": "all", "task_ids": test, "num_tasks": None,
                   "train_split": "all", "train_task_ids": train, "solo": "never", **benchmark},
        edv={"n_executors": 2, "retrieval_tau": -1.0, "poison_per_task": 0})
