"""``edv power SOURCE``: the probability that a planned experiment detects each planted
difference, and the tasks × trials it needs for the target power — before booking GPUs.

SOURCE is a run config whose agents are all ``engine: simulated`` (the rates its profile
implies: :mod:`edv_ray.power.profile`) or a pilot run folder (its measured rates and
task heterogeneity: :mod:`edv_ray.power.pilot`). The outcome model and the test are in
:mod:`edv_ray.power.model`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from edv_ray.config import ConfigError
from edv_ray.report.method_facts import method_order
from edv_ray.power.model import (
    TESTS,
    Design,
    Heterogeneity,
    Method,
    formula_tasks,
    simulate_power,
    tasks_for_power,
)

EXACT_MAX_TASKS = 2000  # beyond: paired.sign_flip_test falls back to 200k × tasks Monte Carlo flips


@dataclass
class Source:
    kind: str  # "profile" | "pilot"
    methods: list[Method]
    design: Design
    het: Heterogeneity | None  # measured (pilot) or None
    notes: list[str]


def load_source(path: str) -> Source:
    p = Path(path)
    if p.is_dir():
        from edv_ray.power.pilot import estimate_heterogeneity, read_pilot

        methods, design, rows = read_pilot(p)
        return Source("pilot", methods, design, estimate_heterogeneity(rows), [])
    if not p.is_file():
        raise ConfigError(f"{path}: no such file or folder (give a run config with "
                          "engine: simulated models, or a pilot run folder)")
    from edv_ray.config import load_config
    from edv_ray.power.profile import Profile

    try:
        cfg = load_config(p)
    except ConfigError as err:  # a validation report: one line, as every power error
        raise ConfigError(" ".join(str(err).split())[:400]) from None
    prof = Profile(cfg)
    design = prof.design()
    methods, left = prof.methods(sorted({k for _, k in design.tasks}))
    if not methods:
        raise ConfigError(f"{path}: none of its methods ({', '.join(left)}) can be modelled "
                          "from a profile")
    notes = [f"not modelled from a profile: {', '.join(left)}"] if left else []
    spreads = {(sp.concentration, sp.per) for sp in (x.task_spread for x in prof.profiles.values()) if sp}
    notes += [f"the profile's task_spread (κ = {k:g}, per {per}: a task's trials correlate "
              f"{1 / (k + 1):.2f} on the rate scale) is not read here; the outcome model's "
              f"latent ICCs come from --{'agent' if per == 'agent' else 'task'}-icc"
              for k, per in sorted(spreads)]
    return Source("profile", methods, design, None, notes)


def comparisons(methods: list[str], asked: list[str] | None) -> list[tuple[str, str]]:
    """``--compare A:B`` pairs (checked), else the method last in report order
    (``Method.report_order``: the one under study, e.g. EDV) against every other — A − B
    is later − earlier, as ``edv compare`` pairs them."""
    if asked:
        out = []
        for spec in asked:
            a, sep, b = spec.partition(":")
            if not sep or not a or not b or a == b:
                raise ConfigError(f"--compare {spec!r}: use A:B with two different methods")
            for m in (a, b):
                if m not in methods:
                    raise ConfigError(f"--compare {spec}: no method {m!r} here "
                                      f"(methods: {', '.join(methods)})")
            out.append((a, b))
        return out
    if len(methods) < 2:
        raise ConfigError(f"only one method ({', '.join(methods)}): nothing to compare")
    # a pilot's contaminated condition (``<method>+<condition>``) is never the lead
    registered = [m for m in method_order() if m in methods]
    lead = registered[-1] if registered else methods[-1]
    return [(lead, m) for m in methods if m != lead]


def _het(src: Source, task_icc: float | None, agent_icc: float | None) -> Heterogeneity:
    if task_icc is not None or agent_icc is not None:
        base = src.het or Heterogeneity()
        return Heterogeneity(base.task_icc if task_icc is None else task_icc,
                             base.agent_icc if agent_icc is None else agent_icc, "given")
    if src.het is not None:
        return src.het
    return Heterogeneity(0.0, 0.0, "the profile plants none: episodes are independent given "
                                   "the task type; real benchmarks are not — set --task-icc / "
                                   "--agent-icc")


def _trials_grid(text: str | None, design_trials: int) -> list[int]:
    if text is None:
        return sorted({1, 2, 4, design_trials})
    try:
        grid = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise ConfigError(f"--trials-grid {text!r}: a comma list of whole numbers, e.g. 1,2,4") from None
    if not grid or grid[0] < 1:
        raise ConfigError(f"--trials-grid {text!r}: trials must be >= 1")
    return grid


def check_args(args) -> None:
    if args.reps < 100:
        raise ConfigError(f"--reps {args.reps}: use at least 100 simulated experiments "
                          "(the Monte Carlo error is ±1/√reps)")
    if args.tasks is not None and args.tasks < 1:
        raise ConfigError(f"--tasks {args.tasks}: need at least 1 task")
    if args.trials is not None and args.trials < 1:
        raise ConfigError(f"--trials {args.trials}: need at least 1 trial")
    if not 0.0 < args.power < 1.0:
        raise ConfigError(f"--power {args.power}: a probability in (0, 1), e.g. 0.8")
    if not 0.0 < args.alpha < 1.0:
        raise ConfigError(f"--alpha {args.alpha}: a probability in (0, 1), e.g. 0.05")
    if args.max_tasks < 1:
        raise ConfigError(f"--max-tasks {args.max_tasks}: need at least 1 task")
    if args.test not in TESTS:
        raise ConfigError(f"--test {args.test}: use one of {', '.join(TESTS)}")


def run_power(args, console: Console) -> dict:
    """Compute and print; returns the rows (for tests)."""
    check_args(args)
    grid = _trials_grid(args.trials_grid, 1)
    src = load_source(args.source)
    het = _het(src, args.task_icc, args.agent_icc)
    design = src.design
    if args.tasks is not None or args.trials is not None:
        design = design.scaled(args.tasks or len(design.tasks), args.trials or design.trials)
    if args.trials_grid is None:
        grid = _trials_grid(None, design.trials)
    if args.test == "exact" and len(design.tasks) > EXACT_MAX_TASKS:
        raise ConfigError(f"--test exact: {len(design.tasks):,} tasks is too many for the exact "
                          f"test per experiment (at most {EXACT_MAX_TASKS:,}); use --test normal")
    by_name = {m.name: m for m in src.methods}
    pairs = comparisons(list(by_name), args.compare)
    _header(console, args, src, design, het)
    _rates_table(console, src.methods, design)
    rows = []
    with Progress(TextColumn("[bold]simulating"), BarColumn(), TextColumn("{task.fields[what]}"),
                  TextColumn("{task.completed:,.0f} experiments"), TimeElapsedColumn(),
                  console=console, transient=True, disable=args.no_progress) as bar:
        tid = bar.add_task("power", total=None, what="")
        for a, b in pairs:
            ma, mb = by_name[a], by_name[b]

            def tick(n: int, what=f"{a} vs {b}") -> None:
                bar.update(tid, advance=n, what=what)

            at = simulate_power(ma, mb, design, het, args.reps, args.seed, args.test,
                                args.alpha, tick)
            need = {}
            for t in grid:
                n, res = tasks_for_power(ma, mb, design, t, het, args.power, args.reps,
                                         args.seed, "normal", args.alpha, args.max_tasks, tick)
                need[t] = (n, res)
            formula = formula_tasks(ma, mb, design, design.trials, het, args.power, args.alpha,
                                    args.seed)
            rows.append({"a": a, "b": b, "planted": at.planted, "at": at, "need": need,
                         "formula": formula})
    _power_table(console, rows, design, grid, args)
    return {"design": design, "het": het, "rows": rows, "methods": src.methods}


def _header(console, args, src: Source, design: Design, het: Heterogeneity) -> None:
    per = ", ".join(f"{d} {sum(1 for x, _ in design.tasks if x == d)}" for d in design.domains)
    what = ("planted rates the profile implies" if src.kind == "profile"
            else "rates measured in the pilot run")
    test = ("the normal approximation of edv compare's sign-flip test"
            if args.test == "normal" else "edv compare's exact sign-flip test (paired.sign_flip_test)")
    lines = [f"edv power: {args.source} ({what})",
             (f"design: {len(design.tasks)} tasks ({per}) × {design.trials} trial(s), scored "
             "as the mean of domain scores, methods paired by task"),
             (f"task heterogeneity (latent, probit scale): task ICC ρ = {het.task_icc:.2f}, "
             f"agent ICC τ = {het.agent_icc:.2f} — {het.source}"),
             (f"test: {test}, two-sided α = {args.alpha}; detected = rejects with the planted "
             f"sign; {args.reps:,} simulated experiments per point, seed {args.seed}; the "
             "tasks needed are searched with the normal approximation"),
             *src.notes]
    for line in lines:
        console.print(escape(line), highlight=False)


def _rates_table(console, methods: list[Method], design: Design) -> None:
    t = Table(title="Pass@1 per method (planted / measured)")
    t.add_column("method")
    for d in design.domains:
        t.add_column(d, justify="right")
    t.add_column("mean of domains", justify="right")
    w = design.weights()
    for m in methods:
        per = []
        for d in design.domains:
            ks = [k for x, k in design.tasks if x == d]
            per.append(sum(m.rate(k) for k in ks) / len(ks))
        mean = sum(wt * m.rate(k) for wt, (_, k) in zip(w, design.tasks))
        t.add_row(escape(m.name), *(f"{v:.3f}" for v in per), f"{mean:.3f}")
    console.print(t)


def _need_text(n, t: int, max_tasks: int) -> str:
    return f"> {max_tasks:,} tasks" if n is None else f"{n:,} ({n * t:,})"


def _power_table(console, rows: list[dict], design: Design, grid: list[int], args) -> None:
    t = Table(title=f"Power of each comparison, and tasks (task-trials) for {args.power:.0%} "
                    "power")
    for col in ("comparison", "planted A − B", f"power at {len(design.tasks)} × {design.trials}"):
        t.add_column(col, justify="right")
    for trials in grid:
        t.add_column(f"{trials} trial(s)", justify="right")
    t.add_column(f"normal formula, {design.trials} trial(s)", justify="right")
    for r in rows:
        at = r["at"]
        power = (f"{at.power:.3f} ± {at.half_width:.3f}" if r["planted"] != 0
                 else f"size {at.power:.3f} ± {at.half_width:.3f}")
        t.add_row(escape(f"{r['a']} vs {r['b']}"), f"{r['planted']:+.3f}", power,
                  *(_need_text(r["need"][k][0], k, args.max_tasks) if r["planted"] != 0 else "-"
                    for k in grid),
                  "-" if r["formula"] is None else f"{r['formula']:,.0f}")
    console.print(t)
    for r in rows:
        if r["planted"] == 0:
            continue
        n, _ = r["need"][grid[0]]
        if n is not None:
            console.print(escape(f"{r['a']} vs {r['b']}, {abs(r['planted']) * 100:.1f} points: "
                                 f"{n * grid[0]:,} task-trials ({n:,} tasks × {grid[0]}) for "
                                 f"{args.power:.0%} power"), highlight=False)

