"""What a planted world implies, computed APART from the framework.

Everything here reads the planted profile only through the oracle
(:class:`edv_ray.simulation.oracle.Oracle`) and the few method settings a world's
config names (group size, retrieval k, epochs, who distils), and models what each method
is *specified* to do — it never calls the framework's method, retrieval, routing or
statistics code. Closed forms where a method is a fixed recipe (the Model Selector, the
Judge, EDV's bank after an epoch without memory); a small seeded Monte Carlo where a
method feeds on itself (ReasoningBank's stream, EDV over epochs).

Modelling assumptions, stated once (each is checked on the run by a diagnostic):
* retrieval does not know whether an item is right: the items an episode retrieves are
  a random draw from what it may see (same domain, leave-one-task-out);
* EDV retrieves exactly ``k`` shared items once its shared bank holds ``k`` of the domain
  (τ = −1 in the worlds);
* one planted task type per domain (the worlds' task types are their domains), except
  the relevance world's sub-types: there a right retriever finds a task's own kind (its
  phrase is in the query and in every lesson written from such a task; an embedding
  check in the world file) and EDV retrieves ``k`` items of the task's sub-type.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from edv_ray.methods.edv.config import CONTRAST_MARGIN
from edv_ray.simulation.oracle import Oracle


class Expect:
    """The planted world of one run: ``profile`` (its ``simulation:`` section), its
    executors, distillers and the pool's names, and ``design`` (a
    :class:`~edv_ray.validation.worlds.Design`: domains, tasks per domain, trials — read
    from the world's config, never from the run); ``benchmarks``: the benchmark sections
    the oracle reads task types from where a benchmark's data is a folder (Mind2Web)."""

    def __init__(self, profile: dict, executors: list[str], pool: list[str],
                 distillers: list[str] | None = None, design=None,
                 benchmarks: list[dict] | None = None) -> None:
        self.o = Oracle(profile, benchmarks)
        self.executors = sorted(executors)
        self.pool = list(pool)
        self.distillers = list(distillers or [])
        self.design = design

    @property
    def domains(self) -> list[str]:
        """The design's domains, sorted (one planted task type each)."""
        return sorted(self.design.domains)

    def n_train(self, domain: str) -> int:
        return self.design.n_train[domain]

    def n_test(self, domain: str) -> int:
        return self.design.n_test[domain] * self.design.trials

    # ---- acting ------------------------------------------------------------------------
    @functools.lru_cache(maxsize=65536)
    def p(self, agent: str, ttype: str, correct: int = 0, wrong: int = 0) -> float:
        """P(success) of ``agent`` on type ``ttype`` with these retrieved items."""
        return self.o.success_given(agent, ttype, correct_same=correct, wrong=wrong)

    def with_items(self, agent: str, ttype: str, n: int, q: float) -> float:
        """E[P(success)] with ``n`` retrieved items, each right with probability ``q``."""
        pmf = sps.binom.pmf(np.arange(n + 1), n, q)
        return float(sum(pmf[c] * self.p(agent, ttype, c, n - c) for c in range(n + 1)))

    def from_bank(self, agent: str, ttype: str, k: int, right: int, total: int) -> float:
        """E[P(success)] retrieving min(k, total) items at random from a bank holding
        ``right`` right items out of ``total``."""
        m = min(k, total)
        if m == 0:
            return self.p(agent, ttype)
        pmf = sps.hypergeom.pmf(np.arange(m + 1), total, right, m)
        return float(sum(pmf[c] * self.p(agent, ttype, c, m - c) for c in range(m + 1)))

    def best(self, ttype: str) -> tuple[str, float]:
        """The planted best executor for the type and its rate (ties: first by name)."""
        return self.o.best_agent(ttype, self.executors)

    def no_memory(self, ttype: str) -> float:
        """No-Memory pooled over the pool's executors (each runs every task)."""
        return float(np.mean([self.p(a, ttype) for a in self.executors]))

    def routing_gain(self, ttype: str) -> float:
        return self.best(ttype)[1] - self.no_memory(ttype)

    def agreement(self, ttype: str) -> float:
        """P(two distinct executors' runs of a task agree), outcomes independent."""
        pairs = list(itertools.combinations(self.executors, 2))
        return float(np.mean([self.p(a, ttype) * self.p(b, ttype)
                              + (1 - self.p(a, ttype)) * (1 - self.p(b, ttype)) for a, b in pairs]))

    def judge(self, judge: str, ttype: str) -> float:
        """The Judge's Pass@1: every executor runs the task, the judge picks one run."""
        total = 0.0
        for outs in itertools.product([True, False], repeat=len(self.executors)):
            prob = np.prod([self.p(a, ttype) if s else 1 - self.p(a, ttype)
                            for a, s in zip(self.executors, outs)])
            total += prob * self.o.p_judge_picks_pass(judge, list(outs),
                                                      [a == judge for a in self.executors])
        return float(total)

    def judge_pick_mixed(self, judge: str, ttype: str) -> tuple[float, float]:
        """(P(the executors' runs of a task are mixed: some pass, some fail), P(the Judge
        picks a passing run | mixed)) — the judge shown no grades, outcomes independent."""
        mixed = picks = 0.0
        for outs in itertools.product([True, False], repeat=len(self.executors)):
            if all(outs) or not any(outs):
                continue
            prob = np.prod([self.p(a, ttype) if s else 1 - self.p(a, ttype)
                            for a, s in zip(self.executors, outs)])
            mixed += prob
            picks += prob * self.o.p_judge_picks_pass(judge, list(outs),
                                                      [a == judge for a in self.executors])
        return float(mixed), float(picks / mixed) if mixed else 0.0

    def p_correct_pick(self, ttype: str, attempts: dict[str, int], sims: int = 20000,
                       seed: int = 0) -> float:
        """P(the Ability Matrix ranks the planted best first) with these attempts per
        agent (highest rate wins; ties go against the planted best: a lower bound)."""
        rng = np.random.default_rng(seed)
        best = self.best(ttype)[0]
        rates = {a: rng.binomial(n, self.p(a, ttype), sims) / max(n, 1)
                 for a, n in attempts.items() if n > 0}
        if best not in rates:
            return 0.0
        others = [r for a, r in rates.items() if a != best]
        wins = np.all([rates[best] > r for r in others], axis=0) if others else np.ones(sims, bool)
        return float(np.mean(wins))

    # ---- EDV: one epoch of construction without memory (closed form) -----------------
    def edv_groups(self, e: dict):
        """(probability, group, outcomes, distiller) over every execution group the
        method may draw (uniform over groups, distiller uniform outside the group)."""
        n = e.get("n_executors", 2)
        groups = list(itertools.combinations(self.executors, n))
        for group in groups:
            dist = self._distillers(group, e.get("distill_by", "third_party"))
            for outs in itertools.product([True, False], repeat=n):
                yield group, outs, dist, 1.0 / len(groups)

    def _distillers(self, group, how: str) -> list[str]:
        if how == "third_party":
            return sorted(set(self.distillers or self.pool) - set(group))
        if how == "executor":
            return list(group)
        return [group[0]]

    def edv_bank(self, ttype: str, e: dict, with_p=None) -> dict:
        """Expected items per training task written to the shared bank (right / wrong),
        the audit's P(approve | every supporting run failed) and its vote weight, and where
        a candidate goes (``p_admitted``: shared / private / discard, per candidate, over
        ``candidates`` expected per training task).
        ``with_p(agent)``: the acting probability (default: no memory)."""
        if e.get("verify_by", "executors") != "executors" or not e.get("distiller_sees_reward", True):
            raise NotImplementedError("expectations cover executor verifiers and a distiller "
                                      "that sees the rewards (the validation worlds)")
        with_p = with_p or (lambda a: self.p(a, ttype))
        right = wrong = fail_votes = fail_approvals = 0.0
        admitted = {"shared": 0.0, "private": 0.0, "discard": 0.0}  # candidates by destination
        for group, outs, dists, w in self.edv_groups(e):
            prob = w * np.prod([with_p(a) if s else 1 - with_p(a) for a, s in zip(group, outs)])
            contrast = any(outs) and not all(outs)
            if not gate_opens(outs, e):
                continue
            for d in dists:
                pw = prob / len(dists)
                pc = self.o.p_item_correct(d, contrast=contrast, own=d in group, sees_reward=True)
                n = min(self.o.items_per_answer(d), e.get("max_candidates", 3))
                ac = [self.o.p_approve(v, correct=True) for v in group]
                aw = [self.o.p_approve(v, correct=False, own_run_failed=not s,
                                       own_lesson=v == d) for v, s in zip(group, outs)]
                right += pw * n * pc * np.prod(ac)
                wrong += pw * n * (1 - pc) * np.prod(aw)
                # admission (default reject): all approve → shared, none → discard
                every = pc * np.prod(ac) + (1 - pc) * np.prod(aw)
                none = pc * np.prod([1 - a for a in ac]) + (1 - pc) * np.prod([1 - a for a in aw])
                for where, share in (("shared", every), ("discard", none),
                                     ("private", 1 - every - none)):
                    admitted[where] += pw * n * share
                if not any(outs):  # the audit's P(approve | every supporting run failed)
                    fail_votes += pw * n * len(group)
                    fail_approvals += pw * n * sum(pc * a + (1 - pc) * b for a, b in zip(ac, aw))
        cands = sum(admitted.values())
        return {"right": right, "wrong": wrong, "q": right / (right + wrong) if right + wrong else 0.0,
                "p_approve_all_failed": fail_approvals / fail_votes if fail_votes else None,
                "p_admitted": {k: v / cands if cands else 0.0 for k, v in admitted.items()},
                "candidates": cands}

    def edv_inference(self, ttype: str, e: dict) -> float:
        """EDV after one epoch: the planted best solver with ``k`` shared items of the
        bank's planted quality."""
        k = e.get("retrieval_k", 3)
        return self.with_items(self.best(ttype)[0], ttype, k, self.edv_bank(ttype, e)["q"])

    def planted_types(self, domain: str, split: str = "test") -> dict[str, list[str]]:
        """The design's tasks of ``domain`` (``split``: test or train) by planted type —
        one type per domain, or the profile's sub-types (``task_type_map``)."""
        ids = (self.design.test_ids if split == "test" else self.design.train_ids)[domain]
        out: dict[str, list[str]] = {}
        for i in ids:
            out.setdefault(self.o.task_type(domain, i), []).append(i)
        return out

    # ---- Monte Carlo: ReasoningBank's stream, EDV over epochs ---------------------------
    def rb_curve(self, domains: dict[str, tuple[str, int]], rb: dict, epochs: int,
                 reps: int = 2000, seed: int = 0) -> dict[int, dict[str, float]]:
        """ReasoningBank's test Pass@1 after each epoch, per domain, pooled over the
        executors: each agent streams its training tasks (``domains``: domain → (type,
        training tasks)), retrieving the latest entries of ``k`` random distinct other
        tasks, self-judging, and appending an entry of items whose quality depends on
        whether its label was right."""
        v = self.rb_curve_reps(domains, rb, epochs, reps, seed)
        return {e: {d: float(v[:, e, j].mean()) for j, d in enumerate(domains)} for e in range(epochs)}

    def rb_curve_reps(self, domains: dict[str, tuple[str, int]], rb: dict, epochs: int,
                      reps: int = 2000, seed: int = 0) -> np.ndarray:
        """:meth:`rb_curve` per repetition: reps × epochs × domains (in ``domains``' order),
        each the test Pass@1 pooled over the executors' banks of that repetition."""
        rng = np.random.default_rng(seed)
        k, cap = rb.get("retrieval_k", 1), rb.get("max_items") or 3
        out = np.zeros((reps, epochs, len(domains)))
        for agent in self.executors:
            n_items = min(self.o.items_per_answer(agent), cap)
            for rep in range(reps):
                entries = {d: {} for d in domains}
                for e in range(epochs):
                    for d, (ttype, n_train) in domains.items():
                        for i in range(n_train):
                            seen = [v for j, v in entries[d].items() if j != i]
                            r, w = _draw_entries(rng, seen, k)
                            ok = rng.random() < self.p(agent, ttype, r, w)
                            said_ok = rng.random() < self.o.p_self_label_success(agent, ok)
                            pi = self.o.p_item_correct(agent, contrast=False, own=True,
                                                       sees_reward=False, mislabeled=said_ok != ok)
                            entries[d][i] = int((rng.random(n_items) < pi).sum()), n_items
                    for j, (d, (ttype, _n)) in enumerate(domains.items()):
                        out[rep, e, j] += self._rb_eval(agent, ttype, list(entries[d].values()), k, rng)
        return out / len(self.executors)

    def rb_given(self, agent: str, ttype: str, entries: list[tuple[int, int]], k: int,
                 seed: int = 0) -> float:
        """ReasoningBank's P(success) for a test task given the bank it reads: ``entries``
        (right items, items) of each past task's latest entry, ``k`` of them retrieved at
        random."""
        return self._rb_eval(agent, ttype, entries, k, np.random.default_rng(seed))

    def _rb_eval(self, agent, ttype, entries, k, rng) -> float:
        if not entries:
            return self.p(agent, ttype)
        if k == 1:
            return float(np.mean([self.p(agent, ttype, r, n - r) for r, n in entries]))
        return float(np.mean([self.p(agent, ttype, *_draw_entries(rng, entries, k))
                              for _ in range(16)]))

    def edv_curve(self, ttype: str, n_train: int, e: dict, reps: int = 2000,
                  seed: int = 0) -> dict[str, list[float]]:
        """EDV over ``epochs``: per epoch, the mean P(success) of its construction runs
        (memory-guided from epoch 1: the bank frozen after the epoch before, without the
        task's own items) and of its routed test runs after the epoch, and per repetition
        (reps × epochs) the shared bank's size after each epoch (``bank_sizes``) and both
        rates (``construction_reps``, ``inference_reps``).
        Shared bank only (``retrieval_scope: shared``)."""
        if e.get("retrieval_scope", "both") != "shared":
            raise NotImplementedError("the epoch expectation models retrieval_scope: shared")
        rng = np.random.default_rng(seed)
        epochs, k = e.get("epochs", 1), e.get("retrieval_k", 3)
        solver = self.best(ttype)[0]
        groups = list(itertools.combinations(self.executors, e.get("n_executors", 2)))
        construct, evals = np.zeros((reps, epochs)), np.zeros((reps, epochs))
        sizes = np.zeros((reps, epochs), dtype=int)
        for rep in range(reps):
            bank: list[tuple[bool, int]] = []  # (right, source task)
            for ep in range(epochs):
                frozen, ps = list(bank), []
                for i in range(n_train):
                    group = groups[rng.integers(len(groups))]
                    outs = []
                    for a in group:
                        mine = [ok for ok, t in frozen if t != i] if ep > 0 and e.get(
                            "retrieve_during_construction", True) else []
                        r, w = _draw_items(rng, mine, k)
                        ps.append(self.p(a, ttype, r, w))
                        outs.append(rng.random() < ps[-1])
                    bank += self._edv_write(rng, ttype, e, group, outs, i)
                construct[rep, ep] = np.mean(ps)
                evals[rep, ep] = self.from_bank(solver, ttype, k, sum(ok for ok, _ in bank), len(bank))
                sizes[rep, ep] = len(bank)
        return {"construction": list(construct.mean(axis=0)), "inference": list(evals.mean(axis=0)),
                "bank_sizes": sizes, "construction_reps": construct, "inference_reps": evals}

    def _edv_write(self, rng, ttype, e, group, outs, task) -> list[tuple[bool, int]]:
        contrast = any(outs) and not all(outs)
        if not gate_opens(outs, e):
            return []
        dists = self._distillers(group, e.get("distill_by", "third_party"))
        d = dists[rng.integers(len(dists))]
        pc = self.o.p_item_correct(d, contrast=contrast, own=d in group, sees_reward=True)
        n = min(self.o.items_per_answer(d), e.get("max_candidates", 3))
        out = []
        for _ in range(n):
            ok = rng.random() < pc
            votes = [rng.random() < self.o.p_approve(v, correct=ok, own_run_failed=not s,
                                                      own_lesson=v == d)
                     for v, s in zip(group, outs)]
            if all(votes):
                out.append((bool(ok), task))
        return out


def gate_opens(outs, e: dict) -> bool:
    """EDV's contrast gate as specified, on a group's planted outcomes (a distiller shown
    the grades; τ²-bench grades the worlds' runs 1 or 0): off → every group; ``binary`` →
    a success and a failure; ``graded`` → rewards at least ``contrast_margin`` apart, which
    on 1/0 rewards is the same groups for any margin the config allows (0 < m ≤ 1)."""
    if not e.get("require_contrast", True):
        return True
    if e.get("contrast", "graded") == "binary":
        return any(outs) and not all(outs)
    rewards = [1.0 if s else 0.0 for s in outs]
    return max(rewards) - min(rewards) >= e.get("contrast_margin", CONTRAST_MARGIN) - 1e-9


def twins_in_top(k: int, share: float) -> tuple[float, float]:
    """Expected wrong twins among the ``k`` items a similarity ranking returns from a bank
    in which a share ``share`` of the items are twins, each beside a clean host (hosts: a
    random ``share / (1 − share)`` of the clean items, capped at all), when a twin ranks
    next to its host: (twins always just below their hosts, always just above) — the
    range any mix of the two orders lies in. Random ranking would give ``share · k``,
    which lies inside. By the recursion over the clean items in rank order: the next is
    hosted with probability h and then takes two slots (twin and host) instead of one."""
    h = min(1.0, share / (1 - share)) if share < 1 else 1.0
    below, above = [0.0] * (k + 1), [0.0] * (k + 1)
    for m in range(1, k + 1):
        below[m] = h * ((1 + below[m - 2]) if m >= 2 else 0.0) + (1 - h) * below[m - 1]
        above[m] = h * (1 + above[max(m - 2, 0)]) + (1 - h) * above[m - 1]
    return below[k], above[k]


def _draw_items(rng, items: list[bool], k: int) -> tuple[int, int]:
    """(right, wrong) among min(k, len(items)) items drawn without replacement."""
    m = min(k, len(items))
    if m == 0:
        return 0, 0
    pick = rng.choice(len(items), size=m, replace=False)
    r = int(sum(items[j] for j in pick))
    return r, m - r


def _draw_entries(rng, entries: list[tuple[int, int]], k: int) -> tuple[int, int]:
    """(right, wrong) over the items of min(k, len) entries drawn without replacement."""
    m = min(k, len(entries))
    if m == 0:
        return 0, 0
    pick = rng.choice(len(entries), size=m, replace=False)
    r = sum(entries[j][0] for j in pick)
    return r, sum(entries[j][1] for j in pick) - r


@dataclass(frozen=True)
class Truth:
    """A planted number and how it was obtained (closed form / Monte Carlo, reps)."""

    value: float
    how: str
