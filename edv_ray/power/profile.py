"""The method rates a simulation profile implies (a run config whose agents are all served
by ``engine: simulated``), for ``edv power``.

Per planted task type (the profile's own typing of the config's test tasks), for each
method whose config section is one modelled here (by the section's class — a method
registered with a section of its own, e.g. ``edv_blind``'s subclass, is not modelled):

- ``no_memory``: every executor, its planted base rate (arms of weight 1/E: the pooled row);
- ``router``: the executor with the highest base rate (ties: first listed) — the planted
  best, i.e. the Ability Matrix ranks the pool correctly;
- ``judge``: the judge picks among the executors' runs, independent draws at their base
  rates, with its planted pick distribution (exact over the 2^E outcome patterns);
- ``edv``: the routed agent's base rate plus the memory shift of ``retrieval_k`` items
  from the shared bank (capped by ``max_items``): k·(s·gain_correct − (1 − s)·harm_wrong),
  s = P(an item is correct | admitted to the shared bank) over the seeded groups (uniform
  executor groups, distillers outside them), their outcome patterns (those the contrast
  gate passes when ``require_contrast``: 1/0 rewards, so graded = binary), the writer's
  P(correct) and every verifier's approval (its own run failed, it wrote the item);
- ``reasoning_bank``: per executor, its base rate plus ``retrieval_k`` × min(n_items, 3)
  items of its own bank, correct with (1 − m)·P(correct | own run) + m·``mislabeled``,
  m = P(its self-judge's label contradicts the outcome).

Assumptions, stated: memory is at steady state (a full bank, every retrieved item of the
task's own type), construction runs at base rates (no memory in the runs distilled);
ReasoningBank without MaTTS; one construction rollout per executor and training task
(EDV and ReasoningBank are not modelled when ``runtime.construction_rollouts`` > 1: their
groups and entries then hold several runs each); other methods are not modelled (named
in the output).
:mod:`edv_ray.simulation.oracle` gives the same planted numbers per decision; the
validation suite measures them through real runs.
"""

from __future__ import annotations

import itertools

from edv_ray.config import ConfigError, RunConfig
from edv_ray.methods.edv.config import EDVConfig
from edv_ray.methods.reasoning_bank.config import ReasoningBankConfig
from edv_ray.methods.sections import JudgeConfig, NoMemoryConfig, RouterConfig
from edv_ray.power.model import Arm, Design, Method
from edv_ray.simulation import planted as P
from edv_ray.validation.expect import gate_opens

RB_MAX_ITEMS = 3  # ReasoningBank extracts at most three items per run


class Profile:
    """The config's planted world: each agent's profile and the test design."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.execs = cfg.executor_names()
        self.profiles = {}
        for a in cfg.agents:
            model = cfg.models[a.model]
            if model.engine != "simulated":
                raise ConfigError(f"agent {a.name!r} runs on model {a.model!r} (engine "
                                  f"{model.engine}): edv power needs planted rates — a config "
                                  "whose agents all use engine: simulated, or a pilot run folder")
            self.profiles[a.name] = model.simulation
        try:
            for a in self.profiles:
                P.agent_profile(self.profiles[a], a)
        except P.UnknownAgent as err:
            raise ConfigError(str(err).strip('"')) from None

    def design(self) -> Design:
        """The config's test selection, each task with its planted type, and its trials."""
        from edv_ray.pipeline import selections
        from edv_ray.simulation.world import World

        rules = {(p.task_types, tuple(sorted(p.task_type_map.items())))
                 for p in self.profiles.values()}
        if len(rules) > 1:
            raise ConfigError("the simulated models plant different task types "
                              "(task_types / task_type_map differ): edv power needs one typing")
        world = World(next(iter(self.profiles.values())), [self.cfg.benchmark.model_dump()])
        _split, by_domain = selections(self.cfg)["test"]
        tasks = tuple((d, world.task_type(d, t.id)) for d, ts in by_domain.items() for t in ts)
        if not tasks:
            raise ConfigError("the config selects no test task")
        return Design(tasks, self.cfg.runtime.trials)

    def base(self, agent: str, task_type: str) -> float:
        return P.base_success(self.profiles[agent], agent, task_type)

    def block(self, agent: str, name: str):
        return P.block(self.profiles[agent], agent, name)

    # ---- methods -----------------------------------------------------------------------
    def methods(self, types: list[str]) -> tuple[list[Method], list[str]]:
        """(modelled methods of the config, names of those not modelled)."""
        models = {NoMemoryConfig: self.no_memory, RouterConfig: self.router,
                  JudgeConfig: self.judge, EDVConfig: self.edv,
                  ReasoningBankConfig: self.reasoning_bank}
        if self.cfg.runtime.construction_rollouts > 1:  # the models draw one run per executor
            for section in (EDVConfig, ReasoningBankConfig):
                del models[section]
        modelled, left = [], []
        for name in self.cfg.method_names():
            section = self.cfg.section(name)
            model = models.get(type(section))
            if model is None:
                left.append(name)
            else:
                modelled.append(Method(name, {k: model(section, k) for k in types}))
        return modelled, left

    def best(self, task_type: str) -> str:
        return max(self.execs, key=lambda a: self.base(a, task_type))

    def no_memory(self, _section: NoMemoryConfig, k: str) -> tuple[Arm, ...]:
        return tuple(Arm(a, self.base(a, k), 1.0 / len(self.execs)) for a in self.execs)

    def router(self, _section: RouterConfig, k: str) -> tuple[Arm, ...]:
        a = self.best(k)
        return (Arm(a, self.base(a, k)),)

    def judge(self, _section: JudgeConfig, k: str) -> tuple[Arm, ...]:
        judge = self.cfg.roles.judge
        if judge is None:
            raise ConfigError("method judge needs roles.judge")
        block = self.block(judge, "judge")
        own = [a == judge for a in self.execs]
        rate = 0.0
        for outcomes in itertools.product((True, False), repeat=len(self.execs)):
            prob = 1.0
            for a, ok in zip(self.execs, outcomes):
                prob *= self.base(a, k) if ok else 1.0 - self.base(a, k)
            picks = P.judge_pick_distribution(block, list(outcomes), own)
            rate += prob * sum(p for p, ok in zip(picks, outcomes) if ok)
        # the pick is one of the pool's runs: its own latent (not any one agent's)
        return (Arm("judge-pick", rate),)

    def edv(self, e: EDVConfig, k: str) -> tuple[Arm, ...]:
        a = e.fixed_solver if e.routing == "fixed" else self.best(k)
        return (Arm(a, self._with_memory(a, k, e.retrieval_k, self.edv_precision(e, k))),)

    def reasoning_bank(self, rb: ReasoningBankConfig, k: str) -> tuple[Arm, ...]:
        arms = []
        for a in self.execs:
            w, sj = self.block(a, "writer"), self.block(a, "self_judge")
            p = self.base(a, k)
            mis = p * (1 - P.p_label_success(sj, True)) + (1 - p) * P.p_label_success(sj, False)
            right = P.p_correct(w, contrast=False, own=True, sees_reward=False)
            wrong_label = P.p_correct(w, contrast=False, own=True, sees_reward=False,
                                      mislabeled=True)
            s = (1 - mis) * right + mis * wrong_label
            n = rb.retrieval_k * min(w.n_items, RB_MAX_ITEMS)
            arms.append(Arm(a, self._with_memory(a, k, n, s), 1.0 / len(self.execs)))
        return tuple(arms)

    def _with_memory(self, agent: str, k: str, n_items: int, share_correct: float) -> float:
        mem = self.block(agent, "memory")
        n = n_items if mem.max_items is None else min(n_items, mem.max_items)
        shift = n * (share_correct * mem.gain_correct - (1 - share_correct) * mem.harm_wrong)
        return P.clip(self.base(agent, k) + shift)

    def edv_precision(self, e: EDVConfig, k: str) -> float:
        """P(correct | admitted to the shared bank) of items distilled from tasks of type k
        under EDV section ``e``."""
        cfg = self.cfg
        pool = [a.name for a in cfg.agents]
        right = wrong = 0.0
        groups = list(itertools.combinations(self.execs, e.n_executors))
        for group in groups:
            if e.distill_by == "self":
                distillers = [group[0]]
            elif e.distill_by == "executor":
                distillers = list(group)
            else:
                distillers = sorted(set(cfg.roles.distillers or pool) - set(group))
            for outcomes in itertools.product((True, False), repeat=len(group)):
                if not gate_opens(outcomes, e.model_dump()):
                    continue
                prob = 1.0 / len(groups)
                for a, ok in zip(group, outcomes):
                    prob *= self.base(a, k) if ok else 1.0 - self.base(a, k)
                for dist in distillers:
                    pc = P.p_correct(self.block(dist, "writer"), contrast=len(set(outcomes)) > 1,
                                     own=dist in group, sees_reward=e.distiller_sees_reward)
                    ok_all, bad_all = self._approvals(e, group, outcomes, dist)
                    right += prob / len(distillers) * pc * ok_all
                    wrong += prob / len(distillers) * (1 - pc) * bad_all
        return right / (right + wrong) if right + wrong > 0 else 0.0

    def _approvals(self, e, group, outcomes, dist) -> tuple[float, float]:
        """(P(every verifier approves | correct), the same | wrong) for one group."""
        failed = {a for a, ok in zip(group, outcomes) if not ok}
        if e.verify_by == "executors":
            voters = list(group)
        elif e.verify_by in ("distiller", "self", "none"):
            voters = [dist]
        elif e.verify_by == "judge":
            if self.cfg.roles.judge is None:
                raise ConfigError("edv.verify_by=judge needs roles.judge")
            voters = [self.cfg.roles.judge]
        else:  # external: one pool member outside group and distiller, uniformly
            pool = [a.name for a in self.cfg.agents]
            options = sorted(set(self.cfg.roles.verifiers or pool) - set(group) - {dist})
            pairs = [self._approvals_of([v], failed, dist) for v in options]
            return (sum(p for p, _ in pairs) / len(pairs), sum(q for _, q in pairs) / len(pairs))
        if e.verify_by == "none":
            return 1.0, 1.0
        return self._approvals_of(voters, failed, dist)

    def _approvals_of(self, voters, failed, dist) -> tuple[float, float]:
        ok_all = bad_all = 1.0
        for v in voters:
            blk = self.block(v, "verify")
            ok_all *= P.p_approve(blk, correct=True)
            bad_all *= P.p_approve(blk, correct=False, own_run_failed=v in failed,
                                   own_lesson=v == dist)
        return ok_all, bad_all
