"""The outcome model of ``edv power``: methods as per-task-type success rates, tasks with
a latent difficulty, and the Monte Carlo of a planned experiment analysed as ``edv
compare`` analyses it.

Outcomes (a threshold model on a standard-normal latent scale). Episode e of method m on
task t, acted by agent a, fails or succeeds as

    Y = 1[ √ρ·U_t + √τ·V_{a,t} + √(1−ρ−τ)·E_e  <  Φ⁻¹(p_{m,a,type(t)}) ]

with U_t (the task's difficulty, shared by every agent and method), V_{a,t} (how hard
this task is for agent a, shared by every method that lets a act on it: trials, epochs,
memory variants, routed methods picking a) and E_e (the episode's own luck) independent
N(0, 1). Marginally P(Y = 1) = p exactly, whatever ρ and τ; ρ (``task_icc``) is the latent
correlation of any two episodes of a task, ρ + τ (``+ agent_icc``) of two episodes of a
task by the same agent. Given U and V, trials are independent Bernoulli draws, so one
replicate costs a few vectorised binomial draws per arm.

A method is, per task type, its arms: (agent, rate, weight) — the agent that acts, its
success rate there and its share of the method's episodes per task-trial (No-Memory
pooled over three models: three arms of weight 1/3; Router: the routed agent, weight 1).
A task's score is the weighted mean over arms and trials, as ``edv compare``'s pooled
row is its episodes' mean.

Analysis (:mod:`edv_ray.report.stats`, ``edv compare``'s paired comparison): d_t = score_A
− score_B per task; the difference is Σ w_t·d_t with w_t = 1 / (D · n_domain) (the mean of
domain scores); the test is the sign-flip test of "no difference", two-sided at α —
``normal``: its normal approximation |Σ w·d| > z_{1−α/2}·√(Σ w²·d²) (Σ w²d² is the
statistic's variance under sign flips; for one trial this is McNemar without continuity
correction), or ``exact``: :func:`edv_ray.report.paired.sign_flip_test` itself, per
replicate. A replicate DETECTS the planted difference when the test rejects and the
observed difference has the planted sign (with no planted difference: when it rejects —
the test's size).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.special import ndtr, ndtri

from edv_ray.config import ConfigError
from edv_ray.report.paired import sign_flip_test
from edv_ray.report.stats import z_value

TESTS = ("normal", "exact")
CHUNK_CELLS = 4_000_000  # replicates × tasks simulated at once (memory stays bounded)


@dataclass(frozen=True)
class Arm:
    agent: str  # who acts (arms of the same agent share its per-task latent V)
    rate: float  # P(success) of one episode
    weight: float = 1.0  # share of the method's episodes of a task-trial


@dataclass(frozen=True)
class Method:
    """A method's arms per task type (their weights sum to 1 within a type)."""

    name: str
    arms: dict[str, tuple[Arm, ...]]

    def rate(self, task_type: str) -> float:
        return sum(a.rate * a.weight for a in self.arms[task_type])


@dataclass(frozen=True)
class Design:
    """The planned experiment: tasks as (domain, task type), in order, and trials."""

    tasks: tuple[tuple[str, str], ...]
    trials: int = 1

    @property
    def domains(self) -> list[str]:
        return sorted({d for d, _ in self.tasks})

    def weights(self) -> np.ndarray:
        """w_t = 1 / (D · n_domain): the mean of domain scores (``edv compare``'s Avg.)."""
        counts = {d: sum(1 for x, _ in self.tasks if x == d) for d in self.domains}
        return np.array([1.0 / (len(counts) * counts[d]) for d, _ in self.tasks])

    def scaled(self, n_tasks: int, trials: int | None = None) -> Design:
        """``n_tasks`` tasks in this design's domain proportions (each domain at least one),
        each domain's task types cycled in their order here (the type mix is kept)."""
        if n_tasks < len(self.domains):
            raise ConfigError(f"--tasks {n_tasks}: need at least one task per domain "
                              f"({len(self.domains)} domains)")
        by_domain = {d: [t for x, t in self.tasks if x == d] for d in self.domains}
        exact = {d: n_tasks * len(ts) / len(self.tasks) for d, ts in by_domain.items()}
        alloc = {d: max(1, math.floor(v)) for d, v in exact.items()}
        for d in sorted(exact, key=lambda d: exact[d] - math.floor(exact[d]), reverse=True):
            if sum(alloc.values()) >= n_tasks:
                break
            alloc[d] += 1
        tasks = tuple((d, by_domain[d][i % len(by_domain[d])])
                      for d in self.domains for i in range(alloc[d]))
        return Design(tasks, self.trials if trials is None else trials)


@dataclass(frozen=True)
class Heterogeneity:
    task_icc: float = 0.0  # ρ
    agent_icc: float = 0.0  # τ
    source: str = "given"

    def __post_init__(self):
        if not (0.0 <= self.task_icc < 1.0 and 0.0 <= self.agent_icc < 1.0
                and self.task_icc + self.agent_icc < 1.0):
            raise ConfigError(f"task ICC {self.task_icc} and agent ICC {self.agent_icc}: each "
                              "must lie in [0, 1) and their sum below 1")


@dataclass
class PowerResult:
    a: str
    b: str
    design: Design
    planted: float  # the true difference A − B (mean of domain scores)
    detected: int
    reps: int
    test: str
    alpha: float
    mean_diff: float = 0.0  # the simulated differences' mean (a check of the planted one)
    extra: dict = field(default_factory=dict)

    @property
    def power(self) -> float:
        return self.detected / self.reps

    @property
    def half_width(self) -> float:
        """95 % Monte Carlo error of :attr:`power` (normal, binomial)."""
        p = self.power
        return 1.959964 * math.sqrt(max(p * (1 - p), 0.25 / self.reps) / self.reps)


def planted_difference(a: Method, b: Method, design: Design) -> float:
    w = design.weights()
    return float(sum(wt * (a.rate(k) - b.rate(k)) for wt, (_, k) in zip(w, design.tasks)))


def check_methods(methods: Sequence[Method], design: Design) -> None:
    types = sorted({k for _, k in design.tasks})
    for m in methods:
        missing = [k for k in types if k not in m.arms or not m.arms[k]]
        if missing:
            raise ConfigError(f"method {m.name!r} has no success rate for task type(s) "
                              f"{missing} of the design")
        for k, arms in m.arms.items():
            if any(not 0.0 <= x.rate <= 1.0 for x in arms):
                raise ConfigError(f"method {m.name!r}, type {k!r}: rates must lie in [0, 1]")
            if abs(sum(x.weight for x in arms) - 1.0) > 1e-9:
                raise ConfigError(f"method {m.name!r}, type {k!r}: arm weights must sum to 1")


def _scores(methods: Sequence[Method], design: Design, het: Heterogeneity, reps: int,
            rng: np.random.Generator) -> list[np.ndarray]:
    """Each method's task scores, shape (reps, tasks), from one draw of the latents."""
    g, trials = len(design.tasks), design.trials
    types = np.array([k for _, k in design.tasks])
    u = rng.standard_normal((reps, g))
    agents = sorted({x.agent for m in methods for arms in m.arms.values() for x in arms})
    v = {a: rng.standard_normal((reps, g)) for a in agents}
    noise = math.sqrt(1.0 - het.task_icc - het.agent_icc)
    out = []
    with np.errstate(divide="ignore", invalid="ignore"):
        for m in methods:
            score = np.zeros((reps, g))
            for k in np.unique(types):
                cols = np.flatnonzero(types == k)
                for arm in m.arms[str(k)]:
                    shift = (math.sqrt(het.task_icc) * u[:, cols]
                             + math.sqrt(het.agent_icc) * v[arm.agent][:, cols])
                    q = ndtr((ndtri(arm.rate) - shift) / noise)
                    score[:, cols] += arm.weight * rng.binomial(trials, np.nan_to_num(q)) / trials
            out.append(score)
    return out


def _rejects(d: np.ndarray, w: np.ndarray, test: str, alpha: float,
             cache: dict) -> np.ndarray:
    """Per replicate (row of ``d``): does the two-sided test reject "no difference"?"""
    if test == "normal":
        stat = d @ w
        v0 = (d * d) @ (w * w)
        return (v0 > 0) & (np.abs(stat) > z_value(1 - alpha) * np.sqrt(v0))
    out = np.zeros(len(d), dtype=bool)
    for i, row in enumerate(d):
        key = tuple(sorted(zip(np.round(row, 9), np.round(w, 12))))
        if key not in cache:  # the p-value depends only on the multiset of (d, w)
            cache[key] = sign_flip_test(row.tolist(), w.tolist())[0]
        out[i] = cache[key] < alpha
    return out


def simulate_power(a: Method, b: Method, design: Design, het: Heterogeneity, reps: int = 2000,
                   seed: int = 0, test: str = "normal", alpha: float = 0.05,
                   progress: Callable[[int], None] | None = None) -> PowerResult:
    """The share of ``reps`` simulated experiments (``design``, methods ``a`` and ``b`` on
    the same tasks) in which the paired test detects the planted difference. Seeded:
    the same arguments give the same answer (common random numbers across designs)."""
    if test not in TESTS:
        raise ConfigError(f"test {test!r}: use one of {', '.join(TESTS)}")
    if reps < 1:
        raise ConfigError(f"--reps {reps}: need at least 1 simulated experiment")
    check_methods([a, b], design)
    planted = planted_difference(a, b, design)
    w = design.weights()
    rng = np.random.default_rng(seed)
    chunk = max(1, CHUNK_CELLS // max(1, len(design.tasks)))
    detected, total_diff, done, cache = 0, 0.0, 0, {}
    while done < reps:
        n = min(chunk, reps - done)
        sa, sb = _scores([a, b], design, het, n, rng)
        d = sa - sb
        diff = d @ w
        rej = _rejects(d, w, test, alpha, cache)
        if planted != 0:
            rej &= np.sign(diff) == np.sign(planted)
        detected += int(rej.sum())
        total_diff += float(diff.sum())
        done += n
        if progress is not None:
            progress(n)
    return PowerResult(a.name, b.name, design, planted, detected, reps, test, alpha,
                       total_diff / reps)


def formula_tasks(a: Method, b: Method, base: Design, trials: int, het: Heterogeneity,
                  target: float = 0.8, alpha: float = 0.05, seed: int = 0,
                  sample: int = 50_000) -> float | None:
    """The paired-difference normal formula for the tasks needed (a starting point for the
    search, and a cross-check): with proportional allocation over D domains of shares π_d,
    Σw·d has mean δ and variance A₁/G, Σw²d² ≈ A₀/G, A_j = Σ_d s_{j,d} / (D²·π_d) with
    s₀ = E[d²] and s₁ = Var(d) per task of domain d (simulated here from ``sample`` tasks
    of this model), so G = ((z_{1−α/2}·√A₀ + z_power·√A₁) / δ)². None: nothing planted."""
    delta = planted_difference(a, b, base)
    if delta == 0:
        return None
    big = base.scaled(sample, trials)
    sa, sb = _scores([a, b], big, het, 1, np.random.default_rng(seed))
    d = (sa - sb)[0]
    doms = np.array([x for x, _ in big.tasks])
    a0 = a1 = 0.0
    for dom in big.domains:
        x = d[doms == dom]
        share = sum(1 for y, _ in base.tasks if y == dom) / len(base.tasks)
        a0 += float((x * x).mean()) / (len(big.domains) ** 2 * share)
        a1 += float(x.var()) / (len(big.domains) ** 2 * share)
    zb = float(ndtri(target))
    return ((z_value(1 - alpha) * math.sqrt(a0) + zb * math.sqrt(a1)) / delta) ** 2


def tasks_for_power(a: Method, b: Method, base: Design, trials: int, het: Heterogeneity,
                    target: float = 0.8, reps: int = 2000, seed: int = 0, test: str = "normal",
                    alpha: float = 0.05, max_tasks: int = 100_000,
                    progress: Callable[[int], None] | None = None) -> tuple[int | None, PowerResult | None]:
    """The fewest tasks (in ``base``'s domain and type proportions, ``trials`` each) whose
    simulated power reaches ``target``: bracketed around :func:`formula_tasks`, then
    bisected to 1 % (finer is below the Monte Carlo error); every point is simulated with
    the same seed. (None, None) when even ``max_tasks`` falls short or nothing is planted."""
    guess = formula_tasks(a, b, base, trials, het, target, alpha, seed)
    if guess is None:
        return None, None
    floor_n = len(base.domains)
    memo: dict[int, PowerResult] = {}

    def power_at(n: int) -> PowerResult:
        if n not in memo:
            memo[n] = simulate_power(a, b, base.scaled(n, trials), het, reps, seed, test, alpha,
                                     progress)
        return memo[n]

    hi = min(max_tasks, max(floor_n, math.ceil(guess * 1.1)))
    lo = max(floor_n - 1, min(hi - 1, math.floor(guess * 0.8)))
    while power_at(hi).power < target:  # the formula was optimistic: widen upwards
        if hi >= max_tasks:
            return None, None
        lo, hi = hi, min(max_tasks, math.ceil(hi * 1.5))
    while lo >= floor_n and power_at(lo).power >= target:  # pessimistic: widen downwards
        hi, lo = lo, max(floor_n - 1, lo // 2)
    while hi - lo > max(1, hi // 100):
        mid = (lo + hi) // 2
        if power_at(mid).power >= target:
            hi = mid
        else:
            lo = mid
    return hi, power_at(hi)
