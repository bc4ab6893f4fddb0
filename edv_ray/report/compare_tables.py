"""The score tables of ``edv compare`` (contract: compare.py), as plain row lists (dicts).

Every Pass@1 is solved / scored episodes (errors are failures) with n, the error count and
its interval (:mod:`edv_ray.report.compare_units`). The only verdict printed is the paired
comparison: the difference over the tasks both sides scored, its cluster-robust t interval (or
"too few tasks"), the exact sign-flip / McNemar p and the difference detectable at 80 %
power (:func:`edv_ray.report.paired.paired_comparison`).
"""

from __future__ import annotations

from collections import defaultdict

from edv_ray.config import ConfigError
from edv_ray.report.compare_units import ALL, Scored, fmt_rate, order_methods
from edv_ray.report.method_facts import baselines
from edv_ray.report.paired import PairedDiff, paired_comparison
from edv_ray.report.stats import pass_hat_k

ALPHA = 0.05


def pick_baseline(methods, baseline: str | None = None) -> str | None:
    """``baseline`` (must be one of the methods), else the preferred declared baseline
    present (``Method.baseline``: ReasoningBank, then No-Memory)."""
    if baseline is not None:
        if baseline not in methods:
            raise ConfigError(f"--baseline {baseline}: no such method in these runs "
                              f"(methods: {', '.join(methods) or 'none'})")
        return baseline
    return next((b for b in baselines() if b in methods), None)


def baseline_agent(s: Scored, group: str, method: str, agent: str, base: str) -> str | None:
    """The baseline row a row is compared with: the SAME agent's row (a per-agent row of a
    per-model method against the baseline's row for that agent), pooled against pooled.
    None when the baseline has no such row."""
    if agent == ALL:
        return ALL
    return agent if agent in s.agent_names(group, base) and base in s.per_model else None


def compare_cells(s: Scored, a: tuple, b: tuple, domain: str, n_boot: int, seed: int) -> PairedDiff:
    """(group, method, agent) a − b, paired by task in ``domain`` (``all``: the mean of
    domain scores, tasks resampled within their domain)."""
    ta = s.task_scores(*a, domain)
    tb = s.task_scores(*b, domain)
    strata = {k: k[0] for k in set(ta) | set(tb)} if domain == ALL else None
    return paired_comparison(ta, tb, strata=strata, n_boot=n_boot, seed=seed)


def diff_fields(d: PairedDiff | None) -> dict:
    if d is None:
        return {k: None for k in ("diff", "diff_lo", "diff_hi", "diff_p", "diff_p_method",
                                  "detectable", "paired_tasks", "differing_tasks", "diff_note")}
    return {"diff": d.diff, "diff_lo": d.lo, "diff_hi": d.hi, "diff_p": d.p,
            "diff_p_method": d.p_method, "detectable": d.detectable, "paired_tasks": d.tasks,
            "differing_tasks": d.differing, "diff_note": d.why}


def trial_units(s: Scored, group, method, agent=ALL, domain=ALL) -> list[tuple[int, int]]:
    """(trials, successes) per task within a run — per agent for per-model methods, else over
    whichever agent solved each trial (a judge may pick a different one each time)."""
    acc = defaultdict(lambda: [0, 0])
    for u in s.select(group, method, agent, domain):
        key = (u["run_id"], u["domain"], u["task_id"],
               u["agent"] if method in s.per_model else None)
        acc[key][0] += u["n"]
        acc[key][1] += u["successes"]
    return [tuple(v) for v in acc.values()]


def main_table(s: Scored, baseline: str | None = None, n_boot: int = 10_000,
               seed: int = 0) -> list[dict]:
    """One row per (group, method, agent, domain) — a group is a run unless runs were
    pooled — with Pass@1, n, errors and its interval; for ``all`` the mean of domain scores
    and the episode-pooled figure; pass^k at the largest trial count; and the paired
    comparison with the same group's baseline row for the same agent."""
    base = pick_baseline(s.methods, baseline)
    rows = []
    for g in s.groups:
        for method in s.group_methods(g.label):
            for agent in s.agents(g.label, method):
                for domain in s.columns:
                    c = s.cell(g.label, method, agent, domain)
                    if c["n"] == 0:
                        continue
                    units = trial_units(s, g.label, method, agent, domain)
                    k = max(n for n, _ in units)
                    phk, phk_tasks = pass_hat_k(units, k) if k > 1 else (None, 0)
                    row = {"group": g.label, "runs": len(g.runs), "label": g.text, **g.axes,
                           "method": method, "agent": agent, "domain": domain, **c,
                           "k": k if k > 1 else None, "pass_hat_k": phk,
                           "pass_hat_k_task_runs": phk_tasks if k > 1 else None,
                           "baseline": base, "baseline_agent": None, **diff_fields(None)}
                    b_agent = (baseline_agent(s, g.label, method, agent, base)
                               if base and base in s.group_methods(g.label) and method != base
                               else None)
                    if b_agent is not None and s.cell(g.label, base, b_agent, domain)["n"]:
                        d = compare_cells(s, (g.label, method, agent), (g.label, base, b_agent),
                                          domain, n_boot, seed)
                        row.update(baseline_agent=b_agent, **diff_fields(d))
                    elif base and method != base:
                        row["diff_note"] = f"no {base} row for agent {agent}"
                    rows.append(row)
    return rows


def pass_hat_k_table(s: Scored) -> list[dict]:
    """pass^k for k = 1 .. the largest trial count, per group, method (and agent) and
    domain; only where some task has more than one trial. ``task_runs``: the (run, task
    [, agent]) units with at least k trials that the mean runs over."""
    rows = []
    for g in s.groups:
        for method in s.group_methods(g.label):
            for agent in s.agents(g.label, method):
                for domain in s.columns:
                    units = trial_units(s, g.label, method, agent, domain)
                    if not units or max(n for n, _ in units) < 2:
                        continue
                    for k in range(1, max(n for n, _ in units) + 1):
                        v, tasks = pass_hat_k(units, k)
                        rows.append({"group": g.label, "method": method, "agent": agent,
                                     "domain": domain, "k": k, "pass_hat_k": v, "task_runs": tasks})
    return rows


def verdict(r: dict) -> str:
    """The one verdict a comparison gets: from the exact test, with what the n could see."""
    if r["diff"] is None:
        return "no task scored by both"
    mde = (f"; differences smaller than ±{r['detectable']:.3f} would likely be missed "
           "(80 % power)" if r["detectable"] is not None else
           "; no difference is detectable at 80 % power with these tasks")
    if r["diff_p"] < ALPHA:
        return f"{r['a'] if r['diff'] > 0 else r['b']} higher (p = {r['diff_p']:.3g})"
    return f"no difference shown (p = {r['diff_p']:.3g}){mde}"


def pair_sentence(r: dict) -> str:
    ci = (f"[{r['diff_lo']:+.3f}, {r['diff_hi']:+.3f}]" if r["diff_lo"] is not None
          else f"({r['diff_note']})")
    where = f"{r['group']}, {r['domain']}" if r.get("name_run") else r["domain"]
    head = f"{where}: {r['a']} − {r['b']}"
    if r["diff"] is None:
        return f"{head}: {verdict(r)}."
    det = (f"±{r['detectable']:.3f}" if r["detectable"] is not None else "none")
    return (f"{head} = {r['diff']:+.3f} {ci} over {r['paired_tasks']} paired tasks "
            f"({r['differing_tasks']} differ); exact two-sided p = {r['diff_p']:.3g}; "
            f"detectable at 80 % power: {det} — {verdict(r)}.")


def pairs_table(s: Scored, n_boot: int = 10_000, seed: int = 0) -> list[dict]:
    """Paired comparisons of method-level (agent ``all``) rows in every domain column:
    every pair of methods within a group (later − earlier), and each method's group
    against the first group holding that method (configs or seeds side by side)."""
    pairs = []
    for g in s.groups:
        ms = s.group_methods(g.label)
        pairs += [((g.label, m), (g.label, o)) for i, o in enumerate(ms) for m in ms[i + 1:]]
    for method in s.methods:
        held = [g.label for g in s.groups if method in s.group_methods(g.label)]
        pairs += [((g, method), (held[0], method)) for g in held[1:]]
    rows = []
    for (ga, ma), (gb, mb) in pairs:
        for domain in s.columns:
            ca, cb = s.cell(ga, ma, ALL, domain), s.cell(gb, mb, ALL, domain)
            if not (ca["n"] and cb["n"]):
                continue
            d = compare_cells(s, (ga, ma, ALL), (gb, mb, ALL), domain, n_boot, seed)
            name = (lambda g, m: m if ga == gb else f"{m} @ {g}")
            row = {"domain": domain, "group": ga, "method": ma, "other_group": gb, "other": mb,
                   "name_run": len(s.groups) > 1 and ga == gb,  # the sentence names the run
                   "a": name(ga, ma), "b": name(gb, mb),
                   "a_rate": fmt_rate(ca["pass_at_1"], ca["ci_lo"], ca["ci_hi"], ca["n"]),
                   "b_rate": fmt_rate(cb["pass_at_1"], cb["ci_lo"], cb["ci_hi"], cb["n"]),
                   **diff_fields(d)}
            row["sentence"] = pair_sentence(row)
            rows.append(row)
    return rows


# ---------------------------------------------------------------- axes and curves

def _sort_key(v):
    return (0, v, "") if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, 0, str(v))


def _axis_value(v):
    import json

    return json.dumps(v, sort_keys=True) if isinstance(v, (list, dict)) else v


def heterogeneity_table(s: Scored, votes: dict) -> list[dict]:
    """Pass@1 (mean of domain scores) per group and method against the sweep's axes, with
    the approve rate and P(approve | every supporting run failed) of each method with votes
    (``votes``: :func:`votes_by_run`)."""
    keys = list(dict.fromkeys(k for g in s.groups for k in g.axes))
    if not keys:
        return []
    rows = []
    for g in sorted(s.groups, key=lambda g: [_sort_key(_axis_value(g.axes.get(k))) for k in keys]):
        for method in s.group_methods(g.label):
            c = s.cell(g.label, method)
            mine = [votes[(r, method)] for r in g.runs if (r, method) in votes]
            v = [sum(x[i] for x in mine) for i in range(4)]
            rows.append({**{k: _axis_value(g.axes.get(k)) for k in keys}, "group": g.label,
                         "method": method, "runs": len(g.runs), **c,
                         "approve_rate": _div(v[1], v[0]) if mine else None,
                         "p_approve_given_failed": _div(v[3], v[2]) if mine else None})
    return rows


def votes_by_run(con) -> dict[tuple[str, str], tuple[int, int, int, int]]:
    """(run, method with votes) → (votes, approvals, votes whose supporting runs all
    failed, their approvals), from the ``verification`` view (one row per run × method)."""
    if "verification" not in {r[0] for r in con.execute("SHOW TABLES").fetchall()}:
        return {}
    rows = con.execute("SELECT run_id, method, votes, approvals, votes_all_failed, "
                       "approvals_all_failed FROM verification").fetchall()
    return {(r[0], r[1]): tuple(int(x or 0) for x in r[2:]) for r in rows}


def _curve_row(g, method, x, c, other_axes: dict) -> dict:
    extra = ", ".join(f"{k}={v}" for k, v in other_axes.items())
    return {"line": f"{method} ({extra})" if extra else method, "method": method,
            "group": g.label, "x": x, **c}


def curve_epoch(con, pool: bool, per_model=None) -> list[dict]:
    """Pass@1 (mean of domain scores) per group, method and epoch (every epoch)."""
    epochs = sorted(e for (e,) in con.execute(
        "SELECT DISTINCT epoch FROM method_results WHERE epoch IS NOT NULL").fetchall())
    rows = []
    for e in epochs:
        s = Scored(con, e, per_model, pool)
        several = len(s.groups) > 1
        for g in s.groups:
            for m in s.group_methods(g.label):
                rows.append(_curve_row(g, m, e, s.cell(g.label, m),
                                       {"run": g.label} if several else {}))
    order = {m: i for i, m in enumerate(order_methods({r["method"] for r in rows}))}
    return sorted(rows, key=lambda r: (order[r["method"]], r["line"], _sort_key(r["x"])))


def curve_axis(s: Scored, axis: str) -> list[dict]:
    """Pass@1 (mean of domain scores) per method against one sweep axis; one line per
    method and values of the other axes (groups that set the axis)."""
    groups = [g for g in s.groups if axis in g.axes]
    # another axis splits the lines only where it varies at a fixed x (a grid, not co-varying)
    split = {k for g in groups for h in groups for k in g.axes
             if k != axis and _axis_value(g.axes[axis]) == _axis_value(h.axes[axis])
             and _axis_value(g.axes.get(k)) != _axis_value(h.axes.get(k))}
    rows = []
    for g in groups:
        other = {k: v for k, v in g.axes.items() if k in split}
        for m in s.group_methods(g.label):
            rows.append(_curve_row(g, m, _axis_value(g.axes[axis]), s.cell(g.label, m), other))
    order = {m: i for i, m in enumerate(order_methods({r["method"] for r in rows}))}
    return sorted(rows, key=lambda r: (order[r["method"]], r["line"], _sort_key(r["x"])))


def _div(a, b):
    return float(a) / float(b) if a is not None and b else None
