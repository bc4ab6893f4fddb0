"""The oracle: what a simulated world plants, computed apart from the framework.

For the validation suite and tests only — the framework never imports it (its numbers
would then not be measurements). Given the profile (and, for Mind2Web / MMTB task
types, the benchmark sections), it decodes the hidden truth of item texts and run
transcripts, and gives every planted probability::

    o = Oracle(cfg.models["sim"].simulation, [cfg.benchmark.model_dump()])
    o.success_probability("glm", "airline", "airline", retrieved_texts)
    o.p_approve("glm", correct=False, own_run_failed=True)
    o.item_is_correct(row["rule"])

It reuses the engine's own functions (:mod:`.planted`, :mod:`.codec`), so expectation and
behaviour cannot drift apart; what it adds is the view from outside a request.
"""

from __future__ import annotations

from edv_ray.config_simulation import SimulationProfile
from edv_ray.simulation import planted as P
from edv_ray.simulation.acting import episode_key
from edv_ray.simulation.codec import Codec, ItemTruth, uniform
from edv_ray.simulation.world import World


class Oracle:
    def __init__(self, profile: SimulationProfile | dict | None,
                 benchmarks: list[dict] | None = None) -> None:
        self.profile = SimulationProfile.model_validate(profile or {})
        self.codec = Codec(self.profile.tag_salt)
        self.world = World(self.profile, benchmarks or [])

    # ---- hidden truth ------------------------------------------------------------------
    def item_truth(self, text: str) -> ItemTruth | None:
        """The decoded tag of an item's text (None: undecodable, which acts as wrong)."""
        return self.codec.item_truth(text)

    def item_is_correct(self, text: str) -> bool:
        t = self.codec.item_truth(text)
        return t is not None and t.correct

    def item_relevant(self, text: str, domain: str, task_type: str) -> bool:
        """Written from a task of this planted type (and domain)."""
        t = self.codec.item_truth(text)
        return t is not None and t.type_hash == self.codec.h16(f"{domain}/{task_type}")

    def item_written_by(self, text: str, agent: str) -> bool:
        t = self.codec.item_truth(text)
        return t is not None and t.writer_hash == self.codec.h16(agent)

    def run_outcome(self, transcript: str) -> bool | None:
        """The planted outcome in a run's marker (None: the transcript holds none, e.g. a
        τ²-bench solo run — use its reward, which the benchmark graded)."""
        mark = self.codec.run_mark(transcript)
        return None if mark is None else mark.success

    # ---- acting -----------------------------------------------------------------------
    def task_type(self, domain: str, task_id: str) -> str:
        return self.world.task_type(domain, task_id)

    def base_success(self, agent: str, task_type: str) -> float:
        return P.base_success(self.profile, agent, task_type)

    def task_rate(self, agent: str, domain: str, task_id: str) -> float:
        """The agent's planted rate on one task (= the type's base rate without
        ``task_spread``)."""
        return P.task_rate(self.profile, agent, self.task_type(domain, task_id), (domain, task_id))

    def memory_count(self, agent: str, domain: str, task_type: str, items: list[str]) -> P.MemoryCount:
        """Retrieved items classified as the engine sees them (first max_items)."""
        return P.count_items([self.codec.item_truth(t) for t in items],
                             self.codec.h16(f"{domain}/{task_type}"), P.block(self.profile, agent, "memory"))

    def success_probability(self, agent: str, domain: str, task_type: str,
                            items: list[str] = ()) -> float:
        """P(success) of an episode of this agent on a task of this planted type, given the
        texts of the items retrieved into its prompt (empty: no memory); with
        ``task_spread``, over the population of tasks (the base rate μ: exact while no
        clipping at 0 / 1 — :meth:`task_rate` gives one task's)."""
        n = self.memory_count(agent, domain, task_type, list(items))
        return P.success_probability(self.profile, agent, task_type, n)

    def success_given(self, agent: str, task_type: str, correct_same: int = 0,
                      correct_other: int = 0, wrong: int = 0) -> float:
        """P(success) with these counts of retrieved items (as :meth:`memory_count` would
        classify them; only the first ``max_items`` count, as in the engine), clipped."""
        effect = P.block(self.profile, agent, "memory")
        n = P.MemoryCount(correct_same, correct_other, wrong)
        if effect.max_items is not None and n.total > effect.max_items:
            raise ValueError("success_given: counts beyond memory.max_items depend on the "
                             "items' order; pass the first max_items only")
        return P.success_probability(self.profile, agent, task_type, n)

    def items_per_answer(self, writer: str) -> int:
        """How many experiences the writer returns per answer (before a prompt's cap)."""
        return P.block(self.profile, writer, "writer").n_items

    def best_agent(self, task_type: str, agents: list[str]) -> tuple[str, float]:
        """The agent with the highest planted base rate for the type (ties: first listed)."""
        best = max(agents, key=lambda a: self.base_success(a, task_type))
        return best, self.base_success(best, task_type)

    def planned_success(self, agent: str, domain: str, task_id: str, trial: int, episode_id: str,
                        items: list[str] = (), request_seed: int | None = None,
                        model: str | None = None) -> bool:
        """The engine's decision for one episode, as the server draws it (``request_seed`` and
        ``model``, the served name, matter only with ``draw_identity: request_seed``)."""
        tag = {"agent": agent, "domain": domain, "task_id": task_id, "trial": str(trial),
               "episode_id": episode_id}
        task_type = self.task_type(domain, task_id)
        n = self.memory_count(agent, domain, task_type, list(items))
        p = P.success_probability(self.profile, agent, task_type, n, (domain, task_id))
        key = episode_key(self.profile, tag, {"seed": request_seed, "model": model})
        return uniform(key, "success") < p

    # ---- stages -----------------------------------------------------------------------
    def p_item_correct(self, writer: str, *, contrast: bool, own: bool, sees_reward: bool,
                       mislabeled: bool = False) -> float:
        """P(an item a distiller / extractor writes is correct) from what it sees."""
        return P.p_correct(P.block(self.profile, writer, "writer"), contrast=contrast, own=own,
                           sees_reward=sees_reward, mislabeled=mislabeled)

    def p_unknown_writer_correct(self, role: str) -> float:
        return P.writer_p_correct(self.profile, role)

    def p_approve(self, verifier: str, *, correct: bool, own_run_failed: bool = False,
                  own_lesson: bool = False) -> float:
        return P.p_approve(P.block(self.profile, verifier, "verify"), correct=correct,
                           own_run_failed=own_run_failed, own_lesson=own_lesson)

    def judge_pick_distribution(self, judge: str, outcomes: list[bool | None],
                                own: list[bool] | None = None) -> list[float]:
        """P(the Judge picks run i) given the runs' planted outcomes (and which are its own)."""
        return P.judge_pick_distribution(P.block(self.profile, judge, "judge"), outcomes,
                                         own or [False] * len(outcomes))

    def p_judge_picks_pass(self, judge: str, outcomes: list[bool | None],
                           own: list[bool] | None = None) -> float:
        probs = self.judge_pick_distribution(judge, outcomes, own)
        return sum(p for p, ok in zip(probs, outcomes) if ok)

    def p_self_label_success(self, agent: str, success: bool) -> float:
        """P(ReasoningBank's self-judge says success | the run's planted outcome)."""
        return P.p_label_success(P.block(self.profile, agent, "self_judge"), success)

    def rb_pick_distribution(self, agent: str, outcomes: list[bool | None]) -> list[float]:
        sj = P.block(self.profile, agent, "self_judge")
        return P.pick_distribution(sj.pick_pass, outcomes, [False] * len(outcomes))
