"""PNG plots of ``edv compare``: Pass@1 with 95 % error bars (the cells' intervals), n in
every label."""

from __future__ import annotations

from pathlib import Path

YLABEL = "Pass@1 (bars: 95% CI, task-clustered where tasks repeat)"


def _pyplot():
    import warnings

    import matplotlib

    # a run label in a script the font lacks (CJK, control characters): a box, not a warning
    warnings.filterwarnings("ignore", message="Glyph .* missing from font", category=UserWarning)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _n_label(ns: list[int]) -> str:
    lo, hi = min(ns), max(ns)
    return f"n={lo}" if lo == hi else f"n={lo}–{hi}"


def _numeric(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _ylim(ax, rows):
    lo = min(r["ci_lo"] for r in rows)
    hi = max(r["ci_hi"] for r in rows)
    pad = max(0.03, 0.08 * (hi - lo))
    ax.set_ylim(max(0.0, lo - pad), min(1.0, hi + pad) + (0.12 * (hi - lo + pad)))


def plot_curve(rows: list[dict], path: str | Path, title: str, xlabel: str,
               min_points: int = 2) -> bool:
    """One line per ``line`` label (a method, with the other axes' values) with at least
    ``min_points`` x values (rows: line, x, pass_at_1, ci_lo, ci_hi, n). Returns False (and
    writes nothing) when no line has enough points."""
    rows = [r for r in rows if r["pass_at_1"] is not None and r["x"] is not None]
    methods = list(dict.fromkeys(r["line"] for r in rows))
    lines = {m: [r for r in rows if r["line"] == m] for m in methods}
    lines = {m: rs for m, rs in lines.items() if len({r["x"] for r in rs}) >= min_points}
    if not lines:
        return False
    plt = _pyplot()
    xs_all = sorted({r["x"] for rs in lines.values() for r in rs},
                    key=lambda v: (not _numeric(v), v if _numeric(v) else str(v)))
    numeric = all(_numeric(x) for x in xs_all)
    pos = (lambda x: float(x)) if numeric else (lambda x: float(xs_all.index(x)))
    span = (pos(xs_all[-1]) - pos(xs_all[0])) or 1.0
    step = 0.018 * span if len(lines) > 1 else 0.0
    fig, ax = plt.subplots(figsize=(7.2, 4.4))
    for i, (m, rs) in enumerate(lines.items()):
        off = (i - (len(lines) - 1) / 2) * step
        x = [pos(r["x"]) + off for r in rs]
        y = [r["pass_at_1"] for r in rs]
        err = [[r["pass_at_1"] - r["ci_lo"] for r in rs], [r["ci_hi"] - r["pass_at_1"] for r in rs]]
        ax.errorbar(x, y, yerr=err, marker="o", capsize=4, linewidth=1.6,
                    label=f"{m} ({_n_label([r['n'] for r in rs])} per point)")
    ax.set_xticks([pos(x) for x in xs_all], [str(x) for x in xs_all])
    _ylim(ax, [r for rs in lines.values() for r in rs])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(YLABEL)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=9, ncol=2 if len(lines) > 3 else 1, framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return True


def plot_main(rows: list[dict], path: str | Path, title: str = "Pass@1 by method and domain") -> bool:
    """Grouped bars: one group per domain (``all`` = mean of domains, last), one bar per
    method-level row of the main table (``method @ run`` when there are several runs), 95 %
    error bars, n under each group's bars in the legend."""
    rows = [r for r in rows if r["agent"] == "all" and r["pass_at_1"] is not None]
    if not rows:
        return False
    plt = _pyplot()
    several = len({r["group"] for r in rows}) > 1
    rows = [{**r, "bar": f"{r['method']} @ {r['group']}" if several else r["method"]} for r in rows]
    domains = list(dict.fromkeys(r["domain"] for r in rows))
    methods = list(dict.fromkeys(r["bar"] for r in rows))
    width = 0.8 / len(methods)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(domains) * max(1, len(methods) / 2.5)), 4.6))
    for i, m in enumerate(methods):
        cells = {r["domain"]: r for r in rows if r["bar"] == m}
        xs = [j + (i - (len(methods) - 1) / 2) * width for j, d in enumerate(domains) if d in cells]
        rs = [cells[d] for d in domains if d in cells]
        ax.bar(xs, [r["pass_at_1"] for r in rs], width * 0.92,
               yerr=[[r["pass_at_1"] - r["ci_lo"] for r in rs], [r["ci_hi"] - r["pass_at_1"] for r in rs]],
               capsize=3, label=f"{m} ({_n_label([r['n'] for r in rs])})")
    ax.set_xticks(range(len(domains)),
                  [f"{d}\n(mean of domains)" if d == "all" else d for d in domains])
    ax.set_ylim(0, 1.12)
    ax.set_ylabel(YLABEL)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper left", fontsize=8, ncol=min(len(methods), 3), framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return True
