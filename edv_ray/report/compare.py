"""``edv compare``: statistics and tables over many runs attached to ONE DuckDB connection.

Contract — the views the connection must have (every run unioned; the loader builds them):

  method_results(run_id VARCHAR, method VARCHAR, agent VARCHAR, epoch INT, domain VARCHAR,
                 task_id VARCHAR, trial INT, status VARCHAR /* ok|error */,
                 success BOOLEAN /* NULL on error */, reward DOUBLE)
      one row per (run, method, agent, epoch, test task, trial): what the method scored.
      ``agent`` is the solver (EDV / Router: the routed agent; Judge: the picked agent;
      No-Memory and ReasoningBank: each pool model separately — these per-model methods get
      a row per agent AND a pooled ``all`` row, the mean over agents when each ran the same
      tasks). Errored episodes count as FAILURES in every Pass@1 denominator, and the error
      count is printed beside every Pass@1.
  token_use(run_id, method, phase VARCHAR /* construction|inference */, stage,
            role VARCHAR /* agent|user_sim|distiller|verifier|judge|extractor|... */,
            agent, model, calls BIGINT, prompt_tokens BIGINT, completion_tokens BIGINT)
  admitted(run_id, method, bank VARCHAR /* shared|private|rb */, items BIGINT)
      experiences admitted to memory.
  run_info(run_id, sweep_id VARCHAR NULL, axes_json VARCHAR /* {"pool": "qwen+smol",
           "retrieval_k": 3, ...} */)

Scope: Pass@1 tables take each (run, method) at its LAST epoch (the memory as it ended; pass
``epoch=`` an int, or None for every epoch); the epoch curve takes every epoch. Domain ``all``
pools every domain's episodes (a micro average). Intervals: Wilson 95 %; differences: paired
bootstrap over tasks (trials averaged within a task first). Every Pass@1 printed carries n and
its interval.
"""

from __future__ import annotations

import csv
from pathlib import Path

from edv_ray.report import compare_plots as plots
from edv_ray.report import compare_tables as t

CURVES = {  # table name → (x axis key, plot title, x label); epoch comes from method_results
    "curve_epoch": (None, "Pass@1 vs epoch (all domains pooled)", "epoch"),
    "curve_retrieval_k": ("retrieval_k", "Pass@1 vs retrieved experiences (last epoch)",
                          "retrieval_k (experiences injected per task)"),
    "curve_contamination": ("contamination", "Pass@1 vs memory contamination (last epoch)",
                            "contamination (share of coherent-wrong memories)"),
}


AXIS_FIXED = {"method", "runs", "n", "successes", "errors", "pass_at_1", "ci_lo", "ci_hi",
              "approve_rate", "p_approve_given_failed"}  # heterogeneity columns that are not axes


def compare_tables(con, epoch="last", baseline: str | None = None,
                   per_model=t.PER_MODEL_METHODS, n_boot: int = 10_000, seed: int = 0) -> dict:
    """Every table of the comparison, as name → list of row dicts."""
    s = t.Scored(con, epoch, per_model)
    tables = {
        "main": t.main_table(con, epoch, baseline, per_model, n_boot, seed, scored=s),
        "pass_hat_k": t.pass_hat_k_table(con, epoch, per_model, scored=s),
        "pairs": t.pairs_table(con, epoch, per_model, n_boot, seed, scored=s),
        **t.token_tables(con),
        "heterogeneity": t.heterogeneity_table(con, epoch),
        "curve_epoch": t.curve_epoch(con),
    }
    for name, (axis, _, _) in CURVES.items():
        if axis:
            tables[name] = t.curve_axis(con, axis, epoch)
    return tables


def write_csv(rows: list[dict], path: Path) -> None:
    cols = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow({k: "" if r.get(k) is None else r[k] for k in cols})


def write_report(con, out_dir: str | Path, epoch="last", baseline: str | None = None,
                 per_model=t.PER_MODEL_METHODS, n_boot: int = 10_000, seed: int = 0) -> dict:
    """Write ``compare.md``, one CSV per non-empty table and the PNG plots into ``out_dir``;
    return the tables (name → rows)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tables = compare_tables(con, epoch, baseline, per_model, n_boot, seed)
    for name, rows in tables.items():
        if rows:
            write_csv(rows, out / f"{name}.csv")
    pngs = {}
    if plots.plot_main(tables["main"], out / "pass_at_1.png"):
        pngs["main"] = "pass_at_1.png"
    for name, (_, title, xlabel) in CURVES.items():
        if plots.plot_curve(tables[name], out / f"{name}.png", title, xlabel):
            pngs[name] = f"{name}.png"
    for axis in sorted({k for r in tables["heterogeneity"] for k in r} - AXIS_FIXED):
        rows = [{**r, "x": r.get(axis)} for r in tables["heterogeneity"]]
        name = f"heterogeneity_{axis}"
        if plots.plot_curve(rows, out / f"{name}.png", f"Pass@1 vs {axis} (sweep axis)", axis):
            pngs[name] = f"{name}.png"
    runs = [r[0] for r in con.execute(
        "SELECT DISTINCT run_id FROM method_results ORDER BY run_id").fetchall()]
    (out / "compare.md").write_text(markdown(tables, pngs, runs, epoch, n_boot, per_model))
    return tables


# ---------------------------------------------------------------- Markdown

def _md_table(cols: list[str], rows: list[list]) -> str:
    def cell(v):
        if v is None:
            return "–"
        if isinstance(v, bool):
            return "yes" if v else "no"
        if isinstance(v, float):
            return f"{v:.3f}"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def _rate(r: dict) -> str:
    return t.fmt_rate(r["pass_at_1"], r["ci_lo"], r["ci_hi"], r["n"], r["errors"])


def _tok(v) -> str:
    return "–" if v is None else f"{v:,.0f}"


def _ratio(v) -> str:
    return "–" if v is None else f"{v:.2f}×"


def _wide(rows: list[dict], fmt) -> str:
    domains = list(dict.fromkeys(r["domain"] for r in rows))
    keys = list(dict.fromkeys((r["method"], r["agent"]) for r in rows))
    cells = {(r["method"], r["agent"], r["domain"]): r for r in rows}
    body = [[m, a] + [fmt(cells[(m, a, d)]) if (m, a, d) in cells else "–" for d in domains]
            for m, a in keys]
    return _md_table(["method", "agent"] + [f"{d} (pooled)" if d == t.ALL else d
                                            for d in domains], body)


def _diff(r: dict) -> str:
    if r["diff_vs_baseline"] is None:
        return "–"
    flag = " ≈" if r["overlaps_baseline"] else ""
    return (f"{r['diff_vs_baseline']:+.3f} [{r['diff_lo']:+.3f}, {r['diff_hi']:+.3f}] "
            f"({r['paired_tasks']} tasks){flag}")


def _main_md(tables: dict, pngs: dict, n_boot: int) -> list[str]:
    main = tables["main"]
    out = ["## Pass@1", "",
           "Cell: `Pass@1 [Wilson 95% CI] n=episodes, errors` — errored episodes are failures.",
           "", _wide(main, _rate), ""]
    base = next((r["baseline"] for r in main if r["baseline"]), None)
    if base:
        out += [f"### Difference to `{base}` (paired bootstrap over tasks, {n_boot:,} resamples)",
                "", ("Cell: `diff [95% CI] (paired tasks)`; ≈ marks Wilson intervals that overlap "
                     "the baseline's (not distinguishable at this n) — a conservative check; the "
                     "paired bootstrap is the sharper one."), "",
                _wide([r for r in main if r["method"] != base], _diff), ""]
    pairs = tables["pairs"]
    if pairs:
        same = [p["sentence"] for p in pairs if p["overlap"]]
        apart = [p["sentence"] for p in pairs if not p["overlap"]]
        out += ["### Which methods can be told apart", ""]
        if same:
            out += ["Not distinguishable at this n (Wilson intervals overlap):", ""]
            out += [f"- {s}" for s in same] + [""]
        if apart:
            out += ["Intervals do not overlap:", ""] + [f"- {s}" for s in apart] + [""]
    phk = tables["pass_hat_k"]
    if phk:
        ks = sorted({r["k"] for r in phk})
        cells = {(r["method"], r["agent"], r["domain"], r["k"]): r for r in phk}
        keys = list(dict.fromkeys((r["method"], r["agent"], r["domain"]) for r in phk))
        body = [list(key) + [("–" if (c := cells.get(key + (k,))) is None or c["pass_hat_k"] is None
                              else f"{c['pass_hat_k']:.3f} ({c['task_runs']} task-runs)") for k in ks]
                for key in keys]
        out += ["### pass^k over trials (τ²-bench: mean over tasks of C(c,k)/C(n,k))", "",
                "A task-run is one task in one run (per agent for per-model methods).", "",
                _md_table(["method", "agent", "domain"] + [f"k={k}" for k in ks], body), ""]
    if "main" in pngs:
        out += [f"![Pass@1 by method and domain]({pngs['main']})", ""]
    return out


def _tokens_md(tables: dict) -> list[str]:
    out = ["## Tokens (prompt + completion)", ""]
    summ = tables["tokens"]
    if not summ:
        return out + ["No token_use rows.", ""]
    out += [("Per test task = per scored test episode (all epochs, errors included); the user "
             "simulator is counted apart and left out of every other column."), "",
            _md_table(["method", "episodes", "solved", "construction", "inference", "user sim",
                       "constr./test task", "infer./test task", "infer./solved task",
                       "constr./solved task", "constr. vs RB", "infer. vs RB", "total vs RB"],
                      [[r["method"], r["episodes"], r["solved"], _tok(r["construction_tokens"]),
                        _tok(r["inference_tokens"]), _tok(r["user_sim_tokens"]),
                        _tok(r["construction_per_test_task"]), _tok(r["inference_per_test_task"]),
                        _tok(r["inference_per_solved_task"]), _tok(r["construction_per_solved_task"]),
                        _ratio(r["construction_ratio_to_rb"]), _ratio(r["inference_ratio_to_rb"]),
                        _ratio(r["total_ratio_to_rb"])] for r in summ]), "",
            "### By phase, stage and role", "",
            _md_table(["method", "phase", "stage", "role", "calls", "prompt", "completion",
                       "tokens", "per test task"],
                      [[r["method"], r["phase"], r["stage"],
                        r["role"] + (" (user sim)" if r["user_sim"] else ""), r["calls"],
                        r["prompt_tokens"], r["completion_tokens"], r["tokens"],
                        _tok(r["per_test_task"])] for r in tables["tokens_by_role"]]), ""]
    if tables["tokens_per_item"]:
        out += ["### Construction tokens per admitted experience", "",
                _md_table(["method", "bank", "items", "construction tokens", "tokens / item"],
                          [[r["method"], r["bank"], r["items"], _tok(r["construction_tokens"]),
                            _tok(r["tokens_per_item"])] for r in tables["tokens_per_item"]]), ""]
    return out


def _axes_md(tables: dict, pngs: dict) -> list[str]:
    out = []
    het = tables["heterogeneity"]
    if het:
        axes = [k for k in het[0] if k not in AXIS_FIXED]
        out += ["## Pass@1 against the sweep's axes (all domains pooled)", "",
                "EDV rows also give the verifiers' approve rate and P(approve | every "
                "supporting run failed) — the self-confirmation trap — per variant.", "",
                _md_table(axes + ["method", "runs", "Pass@1", "approve", "P(approve given failed)"],
                          [[r[a] for a in axes] + [r["method"], r["runs"], _rate(r),
                                                   r.get("approve_rate"),
                                                   r.get("p_approve_given_failed")] for r in het]),
                ""]
        for name in [n for n in pngs if n.startswith("heterogeneity_")]:
            out += [f"![Pass@1 vs {name.removeprefix('heterogeneity_')}]({pngs[name]})", ""]
    for name, (axis, title, xlabel) in CURVES.items():
        rows = tables[name]
        if not rows:
            continue
        out += [f"## {title}", "", _md_table(["method", xlabel.split(" (")[0], "Pass@1"],
                                             [[r["method"], r["x"], _rate(r)] for r in rows]), ""]
        if name in pngs:
            out += [f"![{title}]({pngs[name]})", ""]
    return out


def markdown(tables: dict, pngs: dict, runs: list[str], epoch, n_boot: int,
             per_model=t.PER_MODEL_METHODS) -> str:
    scope = {"last": "each (run, method) at its last epoch", None: "every epoch"}.get(
        epoch, f"epoch {epoch}")
    head = ["# edv compare", "",
            f"{len(runs)} run(s): " + ", ".join(f"`{r}`" for r in runs) + ".", "",
            f"Scope of the Pass@1 tables: {scope}. Pass@1 = solved / scored episodes; errored "
            "episodes count as failures; intervals are Wilson 95 %. `all (pooled)` pools every "
            "domain's episodes; for per-model methods (" + ", ".join(per_model) +
            ") agent `all` pools their agents (the mean over agents when each ran the same "
            "tasks).", ""]
    return "\n".join(head + _main_md(tables, pngs, n_boot) + _tokens_md(tables)
                     + _axes_md(tables, pngs)) + "\n"
