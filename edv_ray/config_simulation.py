"""The planted profile of a simulated model (``engine: simulated``): a world whose truth is
known, so that what the framework measures can be checked against it.

It is a model's ``simulation:`` section. Entries are keyed by *agent* name — the agent a
request comes from is named in its OpenAI ``user`` tag — and every probability is a
number in [0, 1]. What each field plants is documented field by field in
``experiments/simulated_example.yaml``; the engine is :mod:`edv_ray.simulation`,
the expected effects are computed by :mod:`edv_ray.simulation.oracle`.

A block given inside an agent's entry (``memory``, ``writer``, ``verify``, ``judge``,
``self_judge``) replaces the global block for that agent.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

FAILURE_MODES = ("stop_early", "wrong_argument")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _p(default: float, **kw):
    return Field(default, ge=0.0, le=1.0, **kw)


def _in_unit(v: dict[str, float], what: str) -> dict[str, float]:
    """``v`` unchanged when every probability lies in [0, 1]; else a ValueError naming them."""
    bad = {k: p for k, p in v.items() if not 0.0 <= p <= 1.0}
    if bad:
        raise ValueError(f"{what} must be in [0, 1]: {bad}")
    return v


def _shift(default: float):
    return Field(default, ge=-1.0, le=1.0)


class MemoryEffect(_Strict):
    """What retrieved items do to an acting agent's success probability (additive, per
    item, then clipped to [0, 1])."""

    gain_correct: float = _shift(0.05)  # per correct item of the task's own planted type
    gain_correct_other: float = _shift(0.0)  # per correct item of another type
    harm_wrong: float = _shift(0.05)  # per wrong item, and per item the sim cannot decode
    max_items: int | None = Field(None, ge=0)  # only the first N items count (None = all)


class WriterProfile(_Strict):
    """An experience writer (EDV distiller, ReasoningBank extractor): how likely each
    item it writes is correct, from what it sees."""

    p_correct: float = _p(0.5)  # base
    contrast: float = _shift(0.2)  # + when the runs shown hold a success and a failure
    third_party: float = _shift(0.1)  # + when none of the runs shown is the writer's own
    sees_reward: float = _shift(0.05)  # + when the runs' outcomes are shown
    # P(correct) instead, when the stated labels (RB's self-judgements) of most runs shown
    # contradict their planted outcomes, e.g. "strategies" from a failed run judged a success
    mislabeled: float | None = _p(0.1)
    n_items: int = Field(3, ge=0, le=10)  # items per answer (capped by the prompt's "at most N")


class VerifyProfile(_Strict):
    """An EDV verifier's vote."""

    approve_correct: float = _p(0.85)  # P(approve | correct item)
    approve_wrong: float = _p(0.2)  # P(approve | wrong item), no bias
    own_run_failed: float = _shift(0.0)  # + P(approve | wrong) when its own run shown failed
    own_lesson: float = _shift(0.0)  # + P(approve | wrong) when it wrote the item itself


class JudgeProfile(_Strict):
    """The Judge method's LLM judge (one pick among the pool's runs, no rewards)."""

    pick_pass: float = _p(0.8)  # P(pick a passing run | at least one passing run shown)
    self_preference: float = _p(0.0)  # P(pick its own run first, when one is shown)
    # P(pick a run shown as passing | one is) when the runs' grades are shown — the Judge
    # method must not show them: a judge that reads the grades is an oracle
    pick_pass_shown: float = _p(1.0)


class SelfJudgeProfile(_Strict):
    """ReasoningBank's self-judge (its own run, no reward) and its best-of-k pick."""

    success_given_success: float = _p(0.9)  # P(label success | run succeeded)
    success_given_failure: float = _p(0.5)  # P(label success | run failed): the trap
    pick_pass: float = _p(0.7)  # MaTTS best-of-k: P(pick a passing attempt | one exists)
    # P(label = the grade shown) when the run's grade is shown (ReasoningBank's judge
    # must not see it: the self-judgement would just copy the reward)
    follows_shown: float = _p(1.0)


class AgentIdentity(_Strict):
    """What the agent's acting requests must carry — its run-config entry as the world's
    author wrote it. A request that names the agent but differs (tools sent or not, as
    its prompt strategy says; its temperature and top_p) is refused with HTTP 400: a
    framework that mixes up its agents' prompts or sampling errs loudly."""

    prompt_strategy: Literal["native_tools", "text_tools", "text_tools_plan"] | None = None
    temperature: float | None = None
    top_p: float | None = None


class AgentProfile(_Strict):
    """One agent of the pool: how it acts, and (optionally) its own stage behaviour."""

    # planted type → P(success) with no memory; "default" covers unlisted types
    success: dict[str, float] = Field(default_factory=lambda: {"default": 0.5})
    # how a failing episode fails (weights, normalised): stop before the decisive action,
    # or take it with a wrong argument (see the engine's README for each benchmark)
    failure_modes: dict[Literal["stop_early", "wrong_argument"], float] = Field(
        default_factory=lambda: {"stop_early": 0.5, "wrong_argument": 0.5})
    memory: MemoryEffect | None = None
    writer: WriterProfile | None = None
    verify: VerifyProfile | None = None
    judge: JudgeProfile | None = None
    self_judge: SelfJudgeProfile | None = None
    identity: AgentIdentity | None = None  # None: any request naming the agent is its own

    @field_validator("success")
    @classmethod
    def _probabilities(cls, v: dict[str, float]) -> dict[str, float]:
        _in_unit(v, "success probabilities")
        if not v:
            raise ValueError("success needs at least one entry (e.g. default: 0.5)")
        return v

    @field_validator("failure_modes")
    @classmethod
    def _weights(cls, v: dict[str, float]) -> dict[str, float]:
        if any(w < 0 for w in v.values()) or sum(v.values()) <= 0:
            raise ValueError("failure_modes: non-negative weights, at least one positive")
        return v


class TaskSpread(_Strict):
    """Per-task difficulty (tasks are not alike): each task's rate is drawn once from
    Beta(μκ, (1 − μ)κ) around the agent's base rate μ for its type — mean μ, κ the
    ``concentration`` (κ = 1-2: tasks mostly solved or mostly not; a task's trials then
    correlate with 1 / (κ + 1)). ``per: agent``: each (agent, task) draws its own (agents
    find different tasks hard); ``per: task``: one quantile per task, shared by every
    agent (a hard task is hard for all). A base of 0 or 1 stays. Memory shifts add to the
    task's rate. The checks' closed forms take μ as the rate of a type: a world that sets
    this plants only what holds over the population of tasks (check 6d's coverage)."""

    concentration: float = Field(..., gt=0.0, le=1000.0)
    per: Literal["agent", "task"] = "agent"


class SimulationProfile(_Strict):
    """The ``simulation:`` section of a model with ``engine: simulated``."""

    seed: int = 0  # every draw is keyed by it (and by agent, task, epoch, trial, stage)
    # salt of the hidden truth tags' HMAC key: items written under another salt count as
    # undecodable (wrong); keep it when a bank is reused with memory_from
    tag_salt: str = Field("edv-sim", min_length=1)
    # whose randomness an agent's draws are: its own (agent name), or the model's at the
    # request's sampling seed (agents of one model with the same seed then act alike,
    # as a real model would)
    draw_identity: Literal["agent", "request_seed"] = "agent"
    # the planted task type: the benchmark's own (its task_type_key), or the domain;
    # task_type_map ("domain/task_id" → type) overrides single tasks
    task_types: Literal["benchmark", "domain"] = "benchmark"
    task_type_map: dict[str, str] = Field(default_factory=dict)
    # planted type → what its tasks are about, in words: the simulated user opens its
    # first turn with it, so the observed text (the retrieval query, and the words the
    # engine's lessons are written after) carries the task's kind — a world where an item
    # helps only tasks of its own type (memory.gain_correct_other) and retrieval must find
    # them. τ²-bench with a user simulator only (a solo ticket is the benchmark's text)
    type_phrases: dict[str, str] = Field(default_factory=dict)
    agents: dict[str, AgentProfile] = Field(default_factory=dict)
    task_spread: TaskSpread | None = None  # None: every task of a type at the base rate
    # used for agents not listed; None: such an agent's requests are refused (HTTP 400)
    default_agent: AgentProfile | None = None
    memory: MemoryEffect = Field(default_factory=MemoryEffect)
    writer: WriterProfile = Field(default_factory=WriterProfile)
    verify: VerifyProfile = Field(default_factory=VerifyProfile)
    judge: JudgeProfile = Field(default_factory=JudgeProfile)
    self_judge: SelfJudgeProfile = Field(default_factory=SelfJudgeProfile)
    # P(correct) of experiences written by other roles (the contamination twin writer,
    # roles the engine has no model of), by role name; others: unknown_writer_p_correct
    writers: dict[str, float] = Field(default_factory=dict)
    unknown_writer_p_correct: float = _p(0.0)
    latency_s: float = Field(0.0, ge=0.0, le=60.0)  # every answer leaves this late

    @field_validator("type_phrases")
    @classmethod
    def _phrases(cls, v: dict[str, str]) -> dict[str, str]:
        bad = sorted(t for t, text in v.items() if len(text.split()) < 3)
        if bad:
            raise ValueError(f"type_phrases: give each type at least three words ({bad})")
        return v

    @field_validator("writers")
    @classmethod
    def _writer_probs(cls, v: dict[str, float]) -> dict[str, float]:
        return _in_unit(v, "writers: probabilities")

    @model_validator(mode="after")
    def _agents_named(self) -> SimulationProfile:
        if not self.agents and self.default_agent is None:
            self.default_agent = AgentProfile()  # `simulation: {}` → every agent at 0.5
        return self
