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
