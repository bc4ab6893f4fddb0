"""Tables a person reads — printed and saved as CSV/PNG from the run's Parquet (DuckDB).

Every Pass@1 carries its n, its error count (errors count as failures) and a Wilson
95 % interval. Method-specific tables appear when the run has rows for them.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from edv_ray.report.method_facts import method_order
from edv_ray.results.views import connect

_LEFT = {"agent", "domain", "stage", "method", "role", "model", "task_type", "basis",
         "verifier_type", "phase", "changed"}


def _rich_table(title: str, cols: list[str], rows: list[tuple]) -> Table:
    t = Table(title=title, title_justify="left")
    for c in cols:
        t.add_column(c, justify="left" if c in _LEFT else "right")
    for r in rows:
        t.add_row(*["-" if v is None else (f"{v:.3f}" if isinstance(v, float) else escape(str(v)))
                    for v in r])  # names and ids are text, not markup
    return t


# name → (title, SQL, always shown): the tables of every run (see :func:`queries`)
_GENERIC = {
    "method_pass_at_1": ("Pass@1 by method (test tasks; n, errors as failures, Wilson 95% CI; "
                         "learns_from_reward: where the method learns from the benchmark's "
                         "reward)",
                         "SELECT p.method, epoch, agent, domain, n, errors, successes, pass_at_1, "
                         "ci_low, ci_high, r.learns_from_reward FROM method_pass_at_1 p "
                         "LEFT JOIN method_reward_use r ON r.method = split_part(p.method, '+', 1) "
                         "ORDER BY p.method, epoch, agent, domain", True),
    "pass_at_1": ("Episodes by stage (construction and evaluation)",
                  "SELECT stage, method, epoch, agent, domain, episodes, errors, successes, "
                  "pass_at_1, ci_low, ci_high FROM pass_at_1", True),
    "ability_matrix": ("Ability Matrix each method routed with (its own construction "
                       "executions; score = successes/attempts, 0.5 prior when empty)",
                       "SELECT method, epoch, agent, key AS task_type, attempts, successes, errors, "
                       "coalesce(score, 0.5) AS score FROM routing_matrix r "
                       "WHERE level = 'task_type' AND epoch = (SELECT max(epoch) FROM routing_matrix "
                       "WHERE method = r.method) ORDER BY method, agent, task_type", False),
    "routing_basis": ("Routing decisions by basis (task type / its domain / prior)",
                      "SELECT * FROM routing_basis", False),
    "tokens_by_stage": ("Tokens by stage / role / agent (usage_unknown: calls whose server "
                        "sent no valid token count, not in the sums)",
                        "SELECT stage, role, agent, model, calls, failed_calls, prompt_tokens, "
                        "completion_tokens, usage_unknown FROM tokens_by_stage", True),
    "items_injected": ("Memory items injected per scored episode (one unit for every method)",
                       "SELECT * FROM items_injected", False),
}


def queries() -> dict[str, tuple[str, str, bool]]:
    """name → (title, SQL, always shown): the tables above, then each registered method's
    own (``Method.report_tables``, in report order; a table several methods add — each
    EDV instance — is their union)."""
    from edv_ray.report.method_facts import method_order, methods

    parts: dict[str, tuple[str, str, list[str]]] = {}
    for name in method_order():
        for table, title, sql, order in methods()[name].report_tables:
            parts.setdefault(table, (title, order, []))[2].append(sql)
    out = dict(_GENERIC)
    for table, (title, order, sqls) in parts.items():
        union = " UNION ALL BY NAME ".join(f"SELECT * FROM ({q})" for q in sqls)
        out[table] = (title, f"SELECT * FROM ({union})" + (f" ORDER BY {order}" if order else ""),
                      False)
    return out


def report(run_dir: str | Path, console: Console | None = None, save: bool = True,
           which: tuple[str, ...] | None = None) -> dict:
    """Print the tables from the run's Parquet files (through DuckDB); save CSV + a plot."""
    run_dir = Path(run_dir)
    console = console or Console()
    con = connect(run_dir)
    out_dir = run_dir / "report"
    results = {}
    tables = queries()
    for name in which or tuple(tables):
        title, sql, always = tables[name]
        cur = con.execute(sql)
        cols = [d[0] for d in cur.description]
        rows = cur.fetchall()
        if not rows and not always:
            continue
        results[name] = [dict(zip(cols, r)) for r in rows]
        console.print(_rich_table(title, cols, rows))
        if save:
            out_dir.mkdir(parents=True, exist_ok=True)
            con.sql(sql).write_csv(str(out_dir / f"{name}.csv"), header=True)  # no path in SQL
    if save and results.get("ability_matrix"):
        # the last method in report order (the paper's EDV) gets ability_matrix.png
        order = {m: i for i, m in enumerate(reversed(method_order()))}
        methods = sorted({r["method"] for r in results["ability_matrix"]},
                         key=lambda m: (order.get(m, len(order)), m))
        for i, m in enumerate(methods):
            plot_ability_matrix([r for r in results["ability_matrix"] if r["method"] == m],
                                out_dir / ("ability_matrix.png" if i == 0 else f"ability_matrix_{m}.png"),
                                title=f"Ability Matrix ({m})")
    if which is None:
        results["validity"] = print_validity(run_dir, con, console, out_dir if save else None)
        changed = print_settings_history(run_dir, con, console, out_dir if save else None)
        if changed:
            results["settings_history"] = changed
    return results


def print_settings_history(run_dir: Path, con, console: Console, out_dir: Path | None
                           ) -> list[dict]:
    """Which episodes ran under which settings, when a resume accepted a change (nothing
    printed otherwise; :mod:`edv_ray.results.settings_history`)."""
    import csv

    from edv_ray.results.settings_history import episodes_by_settings

    rows = episodes_by_settings(run_dir, con)
    if not rows:
        return []
    cols = list(rows[0])
    console.print(_rich_table("Settings changed on resume (--accept-changed): which episodes "
                              "ran under which settings", cols, [tuple(r.values()) for r in rows]))
    console.print(f"[yellow]warning: this run's episodes ran under {len(rows)} different "
                  "settings (see settings_history.json)[/]")
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        with (out_dir / "settings_history.csv").open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols)
            w.writeheader()
            w.writerows(rows)
    return rows


def print_validity(run_dir: Path, con, console: Console, out_dir: Path | None) -> list[dict]:
    """The validity checks table (every check with its figure); failures also as warnings."""
    import csv

    from edv_ray.report.validity import failed, run_checks

    # where each method learns from the reward is a fact, not a check: the Pass@1 table's
    # learns_from_reward column shows it
    checks = [c for c in run_checks(run_dir, con) if c.name != "reward_use"]
    rows = [c.row() for c in checks]
    cols = ["name", "method", "ok", "figure", "detail"]
    console.print(_rich_table("Validity checks", cols,
                              [tuple("PASS" if c == "ok" and r[c] else "FAIL" if c == "ok" else r[c]
                                     for c in cols) for r in rows]))
    for c in failed(checks):
        console.print(f"[yellow]warning: validity check {escape(c.name)}"
                      f"{' (' + escape(c.method) + ')' if c.method else ''} failed: "
                      f"{escape(c.detail)} ({escape(c.figure)})[/]")
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        with (out_dir / "validity.csv").open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols)
            w.writeheader()
            w.writerows([{c: r[c] for c in cols} for r in rows])
    return rows


def plot_ability_matrix(rows: list[dict], path: Path, title: str = "Ability Matrix") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agents = sorted({r["agent"] for r in rows})
    types = sorted({r["task_type"] for r in rows})
    grid = [[next((r["score"] for r in rows if r["agent"] == a and r["task_type"] == t), 0.5)
             for t in types] for a in agents]
    fig, ax = plt.subplots(figsize=(1.6 + 1.2 * len(types), 1.0 + 0.5 * len(agents)))
    im = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(types)), types, rotation=30, ha="right")
    ax.set_yticks(range(len(agents)), agents)
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="w" if v < 0.6 else "k")
    fig.colorbar(im, ax=ax, label="score")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
