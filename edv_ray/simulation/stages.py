"""The engine's answers to stage roles (strict JSON): EDV's distiller and verifiers, the
Judge, ReasoningBank's self-judge, extractor and best-of-k pick — and, for any role it
has no model of, a valid object of the request's JSON schema.

What an answer is shaped like comes from the request's schema (its property names), else
from the role in the tag. Every draw is keyed by the profile's seed, the role, the agent,
the job's id and a hash of the prompt, so a retried or resumed job
gets the same answer.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from edv_ray.simulation import planted as P
from edv_ray.simulation.codec import strip_marks, uniform
from edv_ray.simulation.lessons import keywords, lessons, twin
from edv_ray.simulation.outcomes import contrast, mislabeled, read_runs
from edv_ray.simulation.prompt_read import (
    at_most,
    blocks,
    section,
    text_of,
    without_blocks,
)
from edv_ray.simulation.schema_fill import fill


def _schema(req: dict[str, Any]) -> dict[str, Any] | None:
    rf = req.get("response_format")
    schema = rf.get("schema") if isinstance(rf, dict) else None
    return schema if isinstance(schema, dict) else None


def kind_of(req: dict[str, Any], role: str) -> str:
    schema = _schema(req)
    props = set((schema or {}).get("properties") or {})
    if schema is not None:
        for kind, needs in (("distill", {"experiences"}), ("vote", {"approve"}),
                            ("pick", {"pick"}), ("self_judge", {"status"}), ("items", {"items"}),
                            ("twin", {"title", "when_to_use", "rule"})):
            if needs <= props:
                return kind
        return "generic"
    by_role = {"distiller": "distill", "verifier": "vote", "judge": "pick",
               "extractor": "items", "self_judge": "self_judge"}
    return by_role.get(role, "generic")


class StageAnswers:
    def __init__(self, sim) -> None:
        self.sim = sim  # the engine (profile, codec, world)

    def answer(self, req: dict[str, Any], tag: dict[str, str]) -> str:
        role, agent = tag.get("role", ""), tag.get("agent", "")
        prompt = text_of(req.get("messages") or [], "user")
        digest = hashlib.sha1(prompt.encode()).hexdigest()[:16]
        key = "|".join(map(str, (self.sim.profile.seed, role, agent, tag.get("episode_id", ""),
                                 digest)))
        kind = kind_of(req, role)
        if kind == "pick" and "<attempt" in prompt and "<run" not in prompt:
            kind = "rb_pick"
        return json.dumps(getattr(self, kind)(req, tag, prompt, key), ensure_ascii=False)

    # ---- helpers ------------------------------------------------------------------------
    def _runs(self, tag, prompt):
        return read_runs(blocks(prompt), self.sim.codec, tag.get("agent", ""),
                         tag.get("domain", ""), tag.get("task_id", ""), self.sim.world)

    def _type_key(self, tag) -> str:
        domain, task_id = tag.get("domain", ""), tag.get("task_id", "")
        if not (domain and task_id):
            return "?/?"
        try:
            return self.sim.world.type_key(domain, task_id)
        except KeyError:  # a role that names no benchmark task (the memory audit's opaque ids)
            return "?/?"

    def _written(self, tag, prompt, key, p: float, limit: int) -> list[dict]:
        """Lessons with hidden tags, each correct with probability ``p``."""
        agent = tag.get("agent", "")
        n = min(limit, at_most(prompt) or limit)
        correct = [uniform(key, "correct", j) < p for j in range(n)]
        task = section(prompt, "task") or without_blocks(prompt)
        out = lessons(task, prompt, n, correct, key)
        type_key = self._type_key(tag)
        for j, item in enumerate(out):
            item["rule"] += " " + self.sim.codec.item_tag(correct[j], type_key, agent, f"{key}|{j}")
        return out

    def _writer_p(self, tag, prompt, runs) -> tuple[float, int]:
        agent = tag.get("agent", "")
        w = P.block(self.sim.profile, agent, "writer")
        own = any(r.own for r in runs) or tag.get("role") == "extractor"
        p = P.p_correct(w, contrast=contrast(runs), own=own,
                        sees_reward=any(r.outcome_shown for r in runs), mislabeled=mislabeled(runs))
        return p, w.n_items

    # ---- roles --------------------------------------------------------------------------
    def distill(self, req, tag, prompt, key) -> dict:
        runs = self._runs(tag, prompt)
        p, n = self._writer_p(tag, prompt, runs)
        labels = [r.label for r in runs if r.label]
        exps = self._written(tag, prompt, key, p, n)
        return {"experiences": [dict(e, evidence=labels) for e in exps]}

    def items(self, req, tag, prompt, key) -> dict:
        runs = self._runs(tag, prompt)
        p, n = self._writer_p(tag, prompt, runs)
        return {"items": [{"title": e["title"], "description": e["when_to_use"], "content": e["rule"]}
                          for e in self._written(tag, prompt, key, p, n)]}

    def vote(self, req, tag, prompt, key) -> dict:
        agent = tag.get("agent", "")
        lesson = section(prompt, "proposed_lesson") or without_blocks(prompt)
        truth = self.sim.codec.item_truth(lesson)
        runs = self._runs(tag, prompt)
        p = P.p_approve(P.block(self.sim.profile, agent, "verify"),
                        correct=truth is not None and truth.correct,
                        own_run_failed=any(r.own and r.believed is False for r in runs),
                        own_lesson=truth is not None and truth.writer_hash == self.sim.codec.h16(agent))
        ok = uniform(key, "vote") < p
        why = ("The rule is consistent with the policy and with what happened in my run." if ok
               else "The rule is not supported by my run or conflicts with the policy.")
        return {"approve": ok, "rationale": why}

    def _pick(self, runs, probs, key) -> dict:
        if not runs:
            return {"pick": "T1", "rationale": "No run was shown."}
        i = P.draw_index(probs, uniform(key, "pick"))
        return {"pick": runs[i].label, "rationale": "This run followed the policy most closely."}

    def pick(self, req, tag, prompt, key) -> dict:
        runs = self._runs(tag, prompt)
        j = P.block(self.sim.profile, tag.get("agent", ""), "judge")
        return self._pick(runs, P.judge_pick_distribution(
            j, [r.believed for r in runs], [r.own for r in runs],
            grades_shown=any(r.outcome_shown for r in runs)), key)

    def rb_pick(self, req, tag, prompt, key) -> dict:
        runs = self._runs(tag, prompt)
        sj = P.block(self.sim.profile, tag.get("agent", ""), "self_judge")
        return self._pick(runs, P.pick_distribution(sj.pick_pass, [r.success for r in runs],
                                                    [False] * len(runs)), key)

    def self_judge(self, req, tag, prompt, key) -> dict:
        runs = self._runs(tag, prompt)
        sj = P.block(self.sim.profile, tag.get("agent", ""), "self_judge")
        success = bool(runs) and runs[0].success is True  # unknown counts as a failure
        if runs and runs[0].outcome_shown and uniform(key, "copy") < sj.follows_shown:
            label = "success" if runs[0].believed else "failure"  # it copies the grade shown
        else:
            label = "success" if uniform(key, "label") < P.p_label_success(sj, success) else "failure"
        return {"reasoning": f"Reviewed every step of the attempt; judged a {label}.",
                "status": label}

    def twin(self, req, tag, prompt, key) -> Any:
        """A lesson's wrong twin (contamination): same title and situation as the lesson
        shown, its rule withdrawn in the same words; correct only with the role's planted
        probability (``writers``, default ``unknown_writer_p_correct``)."""
        lesson = section(prompt, "lesson")
        if not lesson:
            return self.generic(req, tag, prompt, key)
        title, when = section(lesson, "title"), section(lesson, "when_to_use")
        out = twin(strip_marks(title).strip() or "Lesson", strip_marks(when).strip() or "Always.",
                   section(lesson, "rule"))
        role, agent = tag.get("role", ""), tag.get("agent", "")
        correct = uniform(key, "twin") < P.writer_p_correct(self.sim.profile, role)
        out["rule"] += " " + self.sim.codec.item_tag(correct, self._type_key(tag), agent, f"{key}|twin")
        return out

    def generic(self, req, tag, prompt, key) -> Any:
        schema = _schema(req)
        if schema is None:
            return {}
        role, agent = tag.get("role", ""), tag.get("agent", "")
        correct = uniform(key, "generic") < P.writer_p_correct(self.sim.profile, role)
        type_key = self._type_key(tag)
        return fill(schema, keywords(prompt, 40), key, tag=lambda path: self.sim.codec.item_tag(
            correct, type_key, agent, f"{key}|{path}"))
