"""``compare.md``: the tables of :mod:`edv_ray.report.compare` as Markdown, each saying what
its rows are, what was pooled, its scope and how its intervals were made."""

from __future__ import annotations

from edv_ray.report.compare_tables import pair_sentence
from edv_ray.report.compare_units import ALL, fmt_cell, order_methods
from edv_ray.report.method_facts import per_model_methods
from edv_ray.report.paired import MIN_DIFFERING_TASKS, MIN_PAIRED_TASKS

CURVES = {  # table name → (x axis key, plot title, x label); epoch comes from method_results
    "curve_epoch": (None, "Pass@1 vs epoch (mean of domain scores)", "epoch"),
    "curve_retrieval_k": ("retrieval_k", "Pass@1 vs retrieved experiences (scored epoch)",
                          "retrieval_k (experiences injected per task)"),
    "curve_contamination": ("contamination", "Pass@1 vs memory contamination (scored epoch)",
                            "contamination (share of coherent-wrong memories)"),
}
# heterogeneity columns that are not sweep axes
AXIS_FIXED = {"group", "method", "runs", "n", "successes", "errors", "tasks", "max_per_task",
              "pass_at_1", "ci_lo", "ci_hi", "interval", "n_eff", "domains", "approve_rate",
              "p_approve_given_failed", "pooled_pass_at_1", "pooled_ci_lo", "pooled_ci_hi",
              "pooled_interval", "pooled_n_eff"}


def md_table(cols: list[str], rows: list[list]) -> str:
    def cell(v):
        if v is None:
            return "–"
        if isinstance(v, bool):
            return "yes" if v else "no"
        if isinstance(v, float):
            return f"{v:.3f}"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def _tok(v) -> str:
    return "–" if v is None else f"{v:,.0f}"


def _ratio(v) -> str:
    return "–" if v is None else f"{v:.2f}×"


def _wide(rows: list[dict], fmt, pooled_all: bool = False) -> str:
    """Rows (group, method, agent) × domain columns; ``all`` = mean of domain scores, and
    with ``pooled_all`` the episode-pooled figure in its own column."""
    domains = list(dict.fromkeys(r["domain"] for r in rows))
    keys = list(dict.fromkeys((r["group"], r["method"], r["agent"]) for r in rows))
    cells = {(r["group"], r["method"], r["agent"], r["domain"]): r for r in rows}
    cols = [f"{d} (mean of domains)" if d == ALL else d for d in domains]
    if pooled_all and ALL in domains:
        cols.append("all (episode-pooled)")
    body = []
    for key in keys:
        line = [cells.get(key + (d,)) for d in domains]
        body.append(list(key) + [fmt(c) if c else "–" for c in line]
                    + ([fmt_cell(cells[key + (ALL,)], pooled=True) if key + (ALL,) in cells
                        else "–"] if pooled_all and ALL in domains else []))
    return md_table(["run", "method", "agent"] + cols, body)


def _diff(r: dict) -> str:
    if r["diff"] is None:
        return "–" if not r.get("diff_note") else r["diff_note"]
    ci = (f"[{r['diff_lo']:+.3f}, {r['diff_hi']:+.3f}]" if r["diff_lo"] is not None
          else f"({r['diff_note']})")
    det = f"±{r['detectable']:.3f}" if r["detectable"] is not None else "none"
    return (f"{r['diff']:+.3f} {ci} p={r['diff_p']:.3g}, {r['paired_tasks']} tasks, "
            f"detectable {det}")


def _runs_md(tables: dict, groups, notes: list[str], pool: bool) -> list[str]:
    out = [md_table(["run", "run id", "benchmark", "seed", "test tasks", "axes"],
                    [[r["run"], r["run_id"], r["benchmark"], r["seed"],
                      f"{r['test_tasks']}" + (" (from results)" if r["tasks_from"] == "results"
                                              else ""), r["axes"] or "–"]
                     for r in tables["runs"]]), ""] if tables["runs"] else []
    if pool:
        pooled = [g for g in groups if len(g.runs) > 1]
        out += ["**Pooled (--pool):** " + ("; ".join(f"`{g.label}` = {g.text}" for g in pooled)
                                           if pooled else "nothing to pool (every run differs "
                                           "in its axes)") + ". Runs equal but for their seed "
                "are one row; their episodes of a task are one cluster.", ""]
    else:
        out += ["Each run is its own row (pass `--pool` to pool runs that differ only in "
                "their seed).", ""]
    out += [f"**Note:** {n}" for n in notes] + ([""] if notes else [])
    checks = [v for v in tables["validity"] if v["name"] != REWARD_USE]
    if checks:
        out += ["### Validity checks", "",
                md_table(["run", "check", "method", "ok", "figure", "detail"],
                         [[v["run"], v["name"], v["method"] or "–", v["ok"], v["figure"],
                           v["detail"]] for v in checks]), ""]
    return out


REWARD_USE = "reward_use"  # the validity rows that carry where a method learns from the reward


def _reward_md(tables: dict) -> list[str]:
    """Which rows learn from the benchmark's reward (each run's ``reward_use`` rows)."""
    rows = [v for v in tables.get("validity", []) if v["name"] == REWARD_USE]
    if not rows:
        return []
    rank = {m: i for i, m in enumerate(order_methods({v["method"] for v in rows}))}
    rows.sort(key=lambda v: (v["run"], rank[v["method"]]))
    return ["### Which rows learn from the benchmark's reward", "",
            "Where each method learns from the benchmark's graded outcome, as it declares for "
            "its config section: `distill` / `verify` — EDV's distiller / verifiers are shown "
            "each run's grade; `routing` — an Ability Matrix of graded construction "
            "executions picks the solver; `none` — it learns from no grade (self-judged "
            "labels, a judge's pick, or nothing). A `+poison@S` row learns as its method.", "",
            md_table(["run", "method", "learns from the reward"],
                     [[v["run"], v["method"], v["figure"]] for v in rows]), ""]


def _main_md(tables: dict, pngs: dict, n_boot: int) -> list[str]:
    main = tables["main"]
    out = ["## Pass@1", "",
           "Cell: `Pass@1 [95% CI] n=episodes (tasks), errors` — errored episodes are "
           "failures. The interval is Wilson's when every task has one episode in the cell, "
           "and task-clustered (Wilson at the effective sample size, episodes of one task "
           "correlated) when tasks repeat — shown by `(k tasks)`. `all (mean of domains)` is "
           "the mean of the domain scores (the paper's Avg.); `all (episode-pooled)` pools "
           "every episode.", "", _wide(main, fmt_cell, pooled_all=True), ""] + _reward_md(tables)
    base = next((r["baseline"] for r in main if r["baseline"]), None)
    if base and any(r["method"] != base for r in main):
        out += [f"### Difference to `{base}` (same run, same agent; pooled rows against pooled)",
                "", (f"Cell: `diff [95% CI] p, paired tasks, detectable difference`. Paired "
                     "by task: cluster-robust t interval over tasks (CR2 variance, "
                     "Bell–McCaffrey df, at most 3 per differing task; within domains for "
                     f"`all`), shown from {MIN_PAIRED_TASKS} paired tasks and "
                     f"{MIN_DIFFERING_TASKS} that differ, else `too few tasks`; p: exact "
                     "two-sided sign-flip test (exact McNemar for one episode per task); "
                     "detectable: the smallest difference these tasks find with 80 % power at "
                     "two-sided 5 %."), "",
                _wide([r for r in main if r["method"] != base], _diff), ""]
    pairs = tables["pairs"]
    if pairs:
        out += ["### Paired comparisons (the only verdicts)", ""]
        out += [f"- {pair_sentence(p)}" for p in pairs] + [""]
    phk = tables["pass_hat_k"]
    if phk:
        ks = sorted({r["k"] for r in phk})
        cells = {(r["group"], r["method"], r["agent"], r["domain"], r["k"]): r for r in phk}
        keys = list(dict.fromkeys((r["group"], r["method"], r["agent"], r["domain"]) for r in phk))
        body = [list(key) + [("–" if (c := cells.get(key + (k,))) is None or c["pass_hat_k"] is None
                              else f"{c['pass_hat_k']:.3f} ({c['task_runs']} task-runs)") for k in ks]
                for key in keys]
        out += ["### pass^k over trials (τ²-bench: mean over tasks of C(c,k)/C(n,k))", "",
                "A task-run is one task in one run (per agent for per-model methods).", "",
                md_table(["run", "method", "agent", "domain"] + [f"k={k}" for k in ks], body), ""]
    if "main" in pngs:
        out += [f"![Pass@1 by method and domain]({pngs['main']})", ""]
    return out


def _tokens_md(tables: dict, scope: str) -> list[str]:
    out = ["## Tokens (prompt + completion)", ""]
    summ = tables["tokens"]
    if not summ:
        return out + ["No token_use rows.", ""]
    out += [(f"Scope: the same as Pass@1 ({scope}): inference tokens of the scored epoch, "
             "construction tokens of the memory it was scored with. `per test task` = per "
             "scored test task (× trial): the same unit for every method; `episodes/task` "
             "says how many episodes one test task costs (1 = one routed solve; the pool size "
             "= every agent solves it), `per episode` divides by it. `per solved task` "
             "divides by the solved test tasks (a per-agent method's mean over its agents). "
             "`shared`: tokens of episodes another method also used, charged in full to each. "
             "The user simulator is counted apart."), "",
            md_table(["run", "method", "test tasks", "episodes/task", "solved", "construction",
                      "inference", "shared", "user sim", "constr./test task",
                      "infer./test task", "total/test task", "total/solved task",
                      "infer./episode", "constr. vs RB", "infer. vs RB", "total vs RB",
                      "episodes used (shared)"],
                     [[r["group"], r["method"], r["test_tasks"],
                       "–" if r["episodes_per_task"] is None else f"{r['episodes_per_task']:g}",
                       "–" if r["solved"] is None else f"{r['solved']:g}",
                       _tok(r["construction_tokens"]), _tok(r["inference_tokens"]),
                       _tok(r["shared_tokens"]), _tok(r["user_sim_tokens"]),
                       _tok(r["construction_per_test_task"]), _tok(r["inference_per_test_task"]),
                       _tok(r["total_per_test_task"]), _tok(r["total_per_solved_task"]),
                       _tok(r["inference_per_episode"]), _ratio(r["construction_ratio_to_rb"]),
                       _ratio(r["inference_ratio_to_rb"]), _ratio(r["total_ratio_to_rb"]),
                       "–" if r["episodes_used"] is None
                       else f"{r['episodes_used']:,} ({r['episodes_shared']:,})"]
                      for r in summ]), "",
            "### By phase, stage and role", "",
            md_table(["run", "method", "phase", "stage", "role", "shared", "calls", "prompt",
                      "completion", "tokens", "per test task"],
                     [[r["group"], r["method"], r["phase"], r["stage"],
                       r["role"] + (" (user sim)" if r["user_sim"] else ""), r["shared"],
                       r["calls"], r["prompt_tokens"], r["completion_tokens"], r["tokens"],
                       _tok(r["per_test_task"])] for r in tables["tokens_by_role"]]), ""]
    if tables["tokens_per_item"]:
        out += ["### Construction tokens per admitted experience", "",
                md_table(["run", "method", "bank", "items", "construction tokens", "tokens / item"],
                         [[r["group"], r["method"], r["bank"], r["items"],
                           _tok(r["construction_tokens"]), _tok(r["tokens_per_item"])]
                          for r in tables["tokens_per_item"]]), ""]
    return out


def _axes_md(tables: dict, pngs: dict) -> list[str]:
    out = []
    het = tables["heterogeneity"]
    if het:
        axes = [k for k in het[0] if k not in AXIS_FIXED]
        out += ["## Pass@1 against the sweep's axes (mean of domain scores)", "",
                "EDV rows also give the verifiers' approve rate and P(approve | every "
                "supporting run failed) — the self-confirmation trap — per variant.", "",
                md_table(axes + ["run", "method", "runs", "Pass@1", "approve",
                                 "P(approve given failed)"],
                         [[r[a] for a in axes] + [r["group"], r["method"], r["runs"], fmt_cell(r),
                                                  r.get("approve_rate"),
                                                  r.get("p_approve_given_failed")] for r in het]),
                ""]
        for name in [n for n in pngs if n.startswith("heterogeneity_")]:
            out += [f"![Pass@1 vs {name.removeprefix('heterogeneity_')}]({pngs[name]})", ""]
    for name, (axis, title, xlabel) in CURVES.items():
        rows = tables[name]
        if not rows:
            continue
        out += [f"## {title}", "", md_table(["line", "run", xlabel.split(" (")[0], "Pass@1"],
                                            [[r["line"], r["group"], r["x"], fmt_cell(r)]
                                             for r in rows]), ""]
        if name in pngs:
            out += [f"![{title}]({pngs[name]})", ""]
    return out


def markdown(tables: dict, pngs: dict, groups, notes: list[str], epoch, n_boot: int,
             per_model, pool: bool) -> str:
    scope = {"last": "each (run, method) at its last epoch", None: "every epoch"}.get(
        epoch, f"epoch {epoch}")
    head = ["# edv compare", "",
            f"{len(tables['runs']) or len(groups)} run(s), {len(groups)} row group(s). Scope "
            f"of every table: {scope}. Pass@1 = solved / scored episodes; errored episodes "
            "count as failures. For per-model methods (" + ", ".join(
                per_model_methods() if per_model is None else per_model) + ") agent "
            "`all` pools their agents (episodes of one task are one cluster).", ""]
    return "\n".join(head + _runs_md(tables, groups, notes, pool) + _main_md(tables, pngs, n_boot)
                     + _tokens_md(tables, scope) + _axes_md(tables, pngs)) + "\n"

