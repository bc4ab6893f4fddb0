"""The planted probabilities: pure functions of the profile and of what a prompt shows.

The engine draws every decision against these numbers, and the oracle
(:mod:`edv_ray.simulation.oracle`) reports them, so expected effects can be
computed apart from the framework.
"""

from __future__ import annotations

from dataclasses import dataclass

from scipy.special import betaincinv

from edv_ray.config_simulation import (
    AgentProfile,
    JudgeProfile,
    MemoryEffect,
    SelfJudgeProfile,
    SimulationProfile,
    VerifyProfile,
    WriterProfile,
)
from edv_ray.simulation.codec import ItemTruth, uniform


class UnknownAgent(KeyError):
    """A request from an agent the profile does not list (and no default_agent)."""


class NotTheAgent(UnknownAgent):
    """An acting request that names an agent but does not carry its identity."""


def check_identity(profile: SimulationProfile, agent: str, req: dict) -> None:
    """Raise :class:`NotTheAgent` when ``req`` differs from the agent's declared
    :class:`~edv_ray.config_simulation.AgentIdentity` (none declared: nothing to check)."""
    ident = agent_profile(profile, agent).identity
    if ident is None:
        return
    wrong = []
    if ident.prompt_strategy is not None and bool(req.get("tools")) != (ident.prompt_strategy == "native_tools"):
        wrong.append(f"tools {'sent' if req.get('tools') else 'not sent'} for prompt strategy "
                     f"{ident.prompt_strategy}")
    for key in ("temperature", "top_p"):
        want, got = getattr(ident, key), req.get(key)
        if want is not None and (got is None or abs(float(got) - want) > 1e-9):
            wrong.append(f"{key} {got} (agent {agent}: {want})")
    if wrong:
        raise NotTheAgent(f"a request as agent {agent!r} that is not its own: {'; '.join(wrong)}")


def clip(p: float) -> float:
    return min(1.0, max(0.0, p))


def agent_profile(profile: SimulationProfile, agent: str) -> AgentProfile:
    found = profile.agents.get(agent, profile.default_agent)
    if found is None:
        raise UnknownAgent(f"agent {agent!r} has no entry in the simulation profile "
                           f"(listed: {sorted(profile.agents)}) and there is no default_agent")
    return found


def block(profile: SimulationProfile, agent: str, name: str):
    """The agent's own ``name`` block (memory, writer, verify, judge, self_judge), else the
    profile's. An agent without any entry uses the global blocks."""
    entry = profile.agents.get(agent, profile.default_agent)
    own = getattr(entry, name, None) if entry is not None else None
    return own if own is not None else getattr(profile, name)


def base_success(profile: SimulationProfile, agent: str, task_type: str) -> float:
    table = agent_profile(profile, agent).success
    return table.get(task_type, table.get("default", 0.0))


@dataclass(frozen=True)
class MemoryCount:
    correct_same: int = 0
    correct_other: int = 0
    wrong: int = 0  # decoded wrong items and undecodable items

    @property
    def total(self) -> int:
        return self.correct_same + self.correct_other + self.wrong


def count_items(items: list[ItemTruth | None], type_hash: int, effect: MemoryEffect) -> MemoryCount:
    """Classify retrieved items (None = undecodable = wrong); only the first max_items count."""
    if effect.max_items is not None:
        items = items[:effect.max_items]
    same = sum(1 for t in items if t is not None and t.correct and t.type_hash == type_hash)
    other = sum(1 for t in items if t is not None and t.correct and t.type_hash != type_hash)
    return MemoryCount(same, other, len(items) - same - other)


def memory_shift(effect: MemoryEffect, n: MemoryCount) -> float:
    return (n.correct_same * effect.gain_correct + n.correct_other * effect.gain_correct_other
            - n.wrong * effect.harm_wrong)


def task_rate(profile: SimulationProfile, agent: str, task_type: str,
              task: tuple[str, str]) -> float:
    """The agent's rate on one task (``task``: domain, task id): the base rate of its type,
    or with ``task_spread`` the Beta(μκ, (1 − μ)κ) quantile at the task's seeded draw."""
    mu = base_success(profile, agent, task_type)
    spread = profile.task_spread
    if spread is None or not 0.0 < mu < 1.0:
        return mu
    who = agent if spread.per == "agent" else ""
    u = uniform(profile.seed, "difficulty", who, *task)
    k = spread.concentration
    return float(betaincinv(mu * k, (1.0 - mu) * k, u))


def success_probability(profile: SimulationProfile, agent: str, task_type: str,
                        n: MemoryCount = MemoryCount(),
                        task: tuple[str, str] | None = None) -> float:
    """P(the episode succeeds) for this agent and planted type, with these items retrieved;
    on one ``task`` (domain, id) its :func:`task_rate`, else the type's base rate."""
    effect = block(profile, agent, "memory")
    base = base_success(profile, agent, task_type) if task is None else task_rate(
        profile, agent, task_type, task)
    return clip(base + memory_shift(effect, n))


def p_correct(w: WriterProfile, *, contrast: bool, own: bool, sees_reward: bool,
              mislabeled: bool = False) -> float:
    """P(an item written from these runs is correct)."""
    if mislabeled and w.mislabeled is not None:
        return w.mislabeled
    return clip(w.p_correct + w.contrast * contrast + w.third_party * (not own)
                + w.sees_reward * sees_reward)


def p_approve(v: VerifyProfile, *, correct: bool, own_run_failed: bool = False,
              own_lesson: bool = False) -> float:
    """P(a verifier approves the item)."""
    if correct:
        return v.approve_correct
    return clip(v.approve_wrong + v.own_run_failed * own_run_failed + v.own_lesson * own_lesson)


def p_label_success(sj: SelfJudgeProfile, success: bool) -> float:
    """P(ReasoningBank's self-judge labels a run a success)."""
    return sj.success_given_success if success else sj.success_given_failure


def pick_distribution(pick_pass: float, outcomes: list[bool | None], own: list[bool],
                      self_preference: float = 0.0) -> list[float]:
    """P(pick run i): first its own run with ``self_preference`` (uniform among its own),
    then a known passing run with ``pick_pass`` (uniform among them), else any other run
    (uniform). No passing run known: uniform over all."""
    n = len(outcomes)
    probs = [0.0] * n
    rest = 1.0
    owned = [i for i in range(n) if own[i]]
    if owned and self_preference > 0:
        for i in owned:
            probs[i] += self_preference / len(owned)
        rest -= self_preference
    passing = [i for i in range(n) if outcomes[i] is True]
    others = [i for i in range(n) if outcomes[i] is not True]
    if passing and others:
        for i in passing:
            probs[i] += rest * pick_pass / len(passing)
        for i in others:
            probs[i] += rest * (1 - pick_pass) / len(others)
    else:
        for i in range(n):
            probs[i] += rest / n
    return probs


def judge_pick_distribution(j: JudgeProfile, outcomes: list[bool | None],
                            own: list[bool], grades_shown: bool = False) -> list[float]:
    """P(pick run i) for the Judge; ``grades_shown``: the prompt showed the runs' grades
    (then it picks a passing one with ``pick_pass_shown``)."""
    return pick_distribution(j.pick_pass_shown if grades_shown else j.pick_pass, outcomes, own,
                             j.self_preference)


def draw_index(probs: list[float], u: float) -> int:
    acc = 0.0
    for i, p in enumerate(probs):
        acc += p
        if u < acc:
            return i
    return len(probs) - 1


def writer_p_correct(profile: SimulationProfile, role: str) -> float:
    """P(correct) of items written by a role the engine has no model of."""
    return profile.writers.get(role, profile.unknown_writer_p_correct)
