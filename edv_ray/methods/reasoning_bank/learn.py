"""Worker side of ReasoningBank: judge your own run(s), extract items, append an entry.

One job per (agent, task, epoch): the same model as the agent judges each rollout at
temperature 0 from the record alone (no reward), then extracts at most ``max_items``
items from *each* rollout (several on the stream: every rollout, each item keeping the
episode it came from) — strategies from a judged success, lessons from a judged
failure; with MaTTS parallel, one self-contrast extraction over all rollouts (≤ 5 items)
and a best-of-k pick by the same model. An item's description must be one sentence.
Malformed answers are retried, then dropped: no item is ever stored from an unparsed or
invalid answer. The entry file (the job's marker) is written last.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from edv_ray.memory.records import LessonRule, LessonTitle, LessonWhenToUse, lesson_bounds_text
from edv_ray.methods.jobbase import JobBase
from edv_ray.methods.reasoning_bank.store import (
    ENTRY_SCHEMA,
    JUDGMENT_SCHEMA,
    PKG,
    entry_path,
    judgment_path,
)

# a sentence ends where . ! or ? is followed by space and a capital, digit or quote
_NEXT_SENTENCE = re.compile(r"[.!?][\"')\]]*\s+[\"'(\[]?[A-Z0-9]")


class RBJudgeAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reasoning: str = Field(default="", max_length=4000)
    status: Literal["success", "failure"]


class RBItem(BaseModel):
    """A ReasoningBank memory item: a lesson under the paper's names (description: when
    to use it, content: the rule), with the lesson's bounds; one-sentence description."""

    model_config = ConfigDict(extra="forbid")
    title: LessonTitle
    description: LessonWhenToUse
    content: LessonRule

    @field_validator("description")
    @classmethod
    def _one_sentence(cls, v: str) -> str:
        if "\n" in v or _NEXT_SENTENCE.search(v):
            raise ValueError("the description must be one sentence")
        return v


class RBItems(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[RBItem] = Field(max_length=10)


class RBPick(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pick: str = Field(min_length=1, max_length=16)
    rationale: str = Field(default="", max_length=2000)


class RBLearnJob(JobBase):
    kind: str = "rb_learn"
    stage: str  # the stage of the episodes learned from (rb_execute | rb_stream)
    agent: str
    binding: dict[str, Any]
    episode_ids: list[str]
    max_items: int = 3
    retries: int = 2
    extract_temperature: float = 1.0
    contrast: bool = False  # MaTTS parallel: self-contrast over all rollouts, best-of-k
    seq: int = 0  # the entry's place in the bank's order (see store.SEQ_EPOCH)

    @property
    def job_id(self) -> str:
        return f"rb_learn:{self.epoch}:{self.agent}:{self.domain}:{self.task_id}"

    @property
    def handler(self) -> str:
        return "edv_ray.methods.reasoning_bank.learn:run_learn_job"


def run_learn_job(job_json: str, client) -> dict[str, Any]:
    from edv_ray.prompts import fence
    from edv_ray.llm.client import CallLedger
    from edv_ray.memory import Embedder
    from edv_ray.methods.answers import ask_json
    from edv_ray.methods.jobkit import (RoleBinding, budget, env_of, json_caller, load_episode,
                                        stage_ctx, transcript, write_calls)
    from edv_ray.prompts import render_prompt
    from edv_ray.results.parquet_io import write_rows_atomic

    job = RBLearnJob.model_validate_json(job_json)
    env, bench = env_of(job.benchmark)
    rows = [load_episode(job.run_dir, job.stage, e) for e in job.episode_ids]
    if any(r["status"] != "ok" for r in rows):  # resume re-runs the episode, then this job
        return {"job_id": job.job_id, "status": "error", "error": "an episode errored"}
    base = RoleBinding.model_validate(job.binding)
    judge_b = base.model_copy(update={"sampling": base.sampling.model_copy(update={"temperature": 0.0})})
    extract_b = base.model_copy(update={"sampling": base.sampling.model_copy(
        update={"temperature": job.extract_temperature})})
    policy, observed = env.policy(bench, job.domain), rows[0]["observed_text"] or ""
    who = f"{job.agent} ({base.endpoint.model_name})"
    ledger = CallLedger()
    txs = [transcript(env, r) for r in rows]

    def call(binding, role):
        return json_caller(client, binding, stage_ctx(job, role, job.agent), ledger)

    def prompt_for(binding, name: str, parts: list[str], block) -> str:
        def render(ps: list[str]) -> str:
            return render_prompt(PKG, name, task_noun=env.task_noun, task=fence(observed),
                                 policy=policy, max_items=job.max_items,
                                 lesson_bounds=lesson_bounds_text("title", "description", "content"),
                                 **block(ps))
        return budget(binding, who)(render, parts)

    judgments = []
    try:
        for r, tx in zip(rows, txs):
            p = prompt_for(judge_b, "rb_judge.v1", [tx], lambda ps: {"trajectory": fence(ps[0])})
            ans, _n, _err = ask_json(call(judge_b, "self_judge"), p, RBJudgeAnswer, job.retries)
            judgments.append(dict(
                run_id=job.run_id, agent=job.agent, domain=job.domain, task_id=job.task_id,
                stage=job.stage, episode_id=r["episode_id"], label=ans.status if ans else None,
                parse_ok=ans is not None, reasoning=(ans.reasoning if ans else _err or "")[:2000],
                true_success=bool(r["success"]), reward=float(r["reward"])))
        labels = [j["label"] for j in judgments]
        items, sources, error, picked = [], [], None, None
        if job.contrast and len(rows) > 1:
            block = lambda ps: {"attempts": "\n".join(  # noqa: E731
                f'<attempt label="A{i}" judged="{labels[i - 1] or "unknown"}">\n{fence(x)}\n</attempt>'
                for i, x in enumerate(ps, 1))}
            p = prompt_for(extract_b, "rb_extract_contrast.v2", txs, block)
            got, _n, error = ask_json(call(extract_b, "extractor"), p, RBItems, job.retries)
            items = got.items[:job.max_items] if got else []
            sources = [None] * len(items)  # drawn from all the rollouts
            p = prompt_for(judge_b, "rb_pick.v1", txs, block)
            names = {f"A{i}" for i in range(1, len(rows) + 1)}

            def known(a):
                if a.pick.strip() not in names:
                    raise ValueError(f"pick {a.pick!r} not in {sorted(names)}")
            pick, _n, _e = ask_json(call(judge_b, "self_judge"), p, RBPick, job.retries, known)
            picked = rows[int(pick.pick.strip()[1:]) - 1]["episode_id"] if pick else None
        else:  # each rollout the judge labelled: its own extraction (≤ max_items)
            errors = []
            for r, tx, label in zip(rows, txs, labels):
                if label is None:
                    continue
                name = "rb_extract_success.v2" if label == "success" else "rb_extract_failure.v2"
                p = prompt_for(extract_b, name, [tx], lambda ps: {"trajectory": fence(ps[0])})
                got, _n, err = ask_json(call(extract_b, "extractor"), p, RBItems, job.retries)
                kept = got.items[:job.max_items] if got else []
                items += kept
                sources += [r["episode_id"]] * len(kept)
                if err:
                    errors.append(f"{r['episode_id']}: {err}")
            error = "; ".join(errors) or None
    finally:
        write_calls(job, ledger, entry_path(job.run_dir, job.agent, job.epoch, job.domain,
                                            job.task_id, job.stage).name)
    vec = Embedder().embed_one(observed).tolist() if observed.strip() else []
    entry = dict(
        entry_id=f"rb-{job.agent}-e{job.epoch}-{job.stage}-{job.domain}-{job.task_id}",
        run_id=job.run_id, agent=job.agent, domain=job.domain, task_id=job.task_id,
        stage=job.stage, query=observed, query_embedding=vec, episode_ids=job.episode_ids,
        judge_labels=labels, true_success=[bool(r["success"]) for r in rows],
        items=[i.model_dump() for i in items], item_episode_ids=sources,
        status="ok" if items else "no_items", error=error, picked_episode_id=picked, seq=job.seq)
    write_rows_atomic(judgments, judgment_path(job.run_dir, job.agent, job.epoch, job.domain,
                                               job.task_id, job.stage), JUDGMENT_SCHEMA)
    write_rows_atomic([entry], entry_path(job.run_dir, job.agent, job.epoch, job.domain,
                                          job.task_id, job.stage), ENTRY_SCHEMA)
    return {"job_id": job.job_id, "status": "ok", "n": len(items)}
