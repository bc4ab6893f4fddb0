"""The tables of ``edv compare``, computed over one DuckDB connection (contract: compare.py).

Every function returns plain row lists (dicts). A Pass@1 is always successes / episodes with
errored episodes counted as failures, and comes with n, the error count and a Wilson interval.
"""

from __future__ import annotations

import json
from collections import defaultdict
from itertools import combinations

from edv_ray.report.stats import intervals_overlap, paired_bootstrap, pass_hat_k, wilson

PER_MODEL_METHODS = ("no_memory", "reasoning_bank")
METHOD_ORDER = ("no_memory", "reasoning_bank", "judge", "router", "edv")
BASELINES = ("reasoning_bank", "no_memory")
RB_METHOD = "reasoning_bank"
USER_SIM_ROLES = ("user_sim",)
ALL = "all"  # the label of a pooled domain / agent
PHASES = ("construction", "inference")
_GROUP_COLS = ("run_id", "method", "agent", "epoch", "domain", "task_id")


def _q(v: str) -> str:
    return "'" + str(v).replace("'", "''") + "'"


def scored_sql(epoch="last") -> str:
    """method_results with ``solved`` / ``errored`` flags, in the epoch scope: ``"last"`` (each
    (run, method)'s last epoch — the memory as it ended), an int, or None (every epoch)."""
    base = ("SELECT *, (status = 'ok' AND coalesce(success, false)) AS solved, "
            "coalesce(status = 'error', false) AS errored FROM method_results")
    if epoch is None:
        return base
    if epoch == "last":
        return (f"SELECT r.* FROM ({base}) r JOIN (SELECT run_id, method, max(epoch) AS last_epoch "
                "FROM method_results GROUP BY run_id, method) l "
                "ON r.run_id IS NOT DISTINCT FROM l.run_id AND r.method = l.method "
                "WHERE r.epoch IS NOT DISTINCT FROM l.last_epoch")
    return f"{base} WHERE epoch = {int(epoch)}"


def counts(con, by: tuple[str, ...], epoch="last") -> list[dict]:
    """Episodes / successes / errors grouped by columns of method_results."""
    bad = [c for c in by if c not in _GROUP_COLS]
    if bad:
        raise ValueError(f"cannot group by {bad}")
    cols = ", ".join(by)
    cur = con.execute(f"SELECT {cols}, count(*) AS n, count(*) FILTER (WHERE solved) AS successes, "
                      f"count(*) FILTER (WHERE errored) AS errors FROM ({scored_sql(epoch)}) s "
                      f"GROUP BY {cols} ORDER BY {cols}")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def order_methods(methods) -> list[str]:
    methods = set(methods)
    known = [m for m in METHOD_ORDER if m in methods]
    return known + sorted(methods - set(known))


def pick_baseline(methods, baseline: str | None = None) -> str | None:
    if baseline is not None:
        return baseline if baseline in methods else None
    return next((b for b in BASELINES if b in methods), None)


def rate_fields(n: int, successes: int, errors: int) -> dict:
    r = wilson(successes, n)
    return {"n": n, "successes": successes, "errors": errors, "pass_at_1": r.rate,
            "ci_lo": r.lo, "ci_hi": r.hi}


class Scored:
    """The task-level units of one epoch scope: (run, method, agent, domain, task) → n, c, e."""

    def __init__(self, con, epoch="last", per_model=PER_MODEL_METHODS):
        self.units = counts(con, ("run_id", "method", "agent", "domain", "task_id"), epoch)
        self.per_model = tuple(per_model)
        self.methods = order_methods({u["method"] for u in self.units})
        self.domains = sorted({u["domain"] for u in self.units})

    def agents(self, method: str) -> list[str]:
        """The agent rows a method gets: ``all`` always, each agent for per-model methods."""
        if method not in self.per_model:
            return [ALL]
        return [ALL] + sorted({str(u["agent"]) for u in self.units if u["method"] == method})

    def select(self, method, agent=ALL, domain=ALL) -> list[dict]:
        return [u for u in self.units if u["method"] == method
                and (agent == ALL or str(u["agent"]) == agent)
                and (domain == ALL or u["domain"] == domain)]

    def rate(self, method, agent=ALL, domain=ALL) -> dict:
        us = self.select(method, agent, domain)
        return rate_fields(sum(u["n"] for u in us), sum(u["successes"] for u in us),
                           sum(u["errors"] for u in us))

    def task_scores(self, method, agent=ALL, domain=ALL) -> dict:
        """(domain, task_id) → mean success over every scored episode of that task."""
        acc = defaultdict(lambda: [0, 0])
        for u in self.select(method, agent, domain):
            acc[(u["domain"], u["task_id"])][0] += u["successes"]
            acc[(u["domain"], u["task_id"])][1] += u["n"]
        return {k: c / n for k, (c, n) in acc.items()}

    def trial_units(self, method, agent=ALL, domain=ALL) -> list[tuple[int, int]]:
        """(trials, successes) per task within a run — per agent for per-model methods, else
        over whichever agent solved each trial (a judge may pick a different one each time)."""
        acc = defaultdict(lambda: [0, 0])
        for u in self.select(method, agent, domain):
            key = (u["run_id"], u["domain"], u["task_id"],
                   u["agent"] if method in self.per_model else None)
            acc[key][0] += u["n"]
            acc[key][1] += u["successes"]
        return [tuple(v) for v in acc.values()]


def main_table(con, epoch="last", baseline: str | None = None, per_model=PER_MODEL_METHODS,
               n_boot: int = 10_000, seed: int = 0, scored: Scored | None = None) -> list[dict]:
    """methods (× agents for per-model methods) × domains (+ ``all``): Pass@1 with n, errors,
    Wilson 95 % CI; pass^k at the largest trial count when tasks have several trials; the
    paired-bootstrap difference to the baseline and whether the two intervals overlap."""
    s = scored or Scored(con, epoch, per_model)
    base = pick_baseline(s.methods, baseline)
    rows = []
    for domain in s.domains + [ALL]:
        base_rate = s.rate(base, ALL, domain) if base else None
        base_tasks = s.task_scores(base, ALL, domain) if base else None
        for method in s.methods:
            for agent in s.agents(method):
                r = s.rate(method, agent, domain)
                if r["n"] == 0:
                    continue
                units = s.trial_units(method, agent, domain)
                k = max(n for n, _ in units)
                phk, phk_tasks = pass_hat_k(units, k) if k > 1 else (None, 0)
                row = {"method": method, "agent": agent, "domain": domain, **r,
                       "tasks": len({(u["domain"], u["task_id"])
                                     for u in s.select(method, agent, domain)}),
                       "max_trials": k, "k": k if k > 1 else None, "pass_hat_k": phk,
                       "pass_hat_k_task_runs": phk_tasks if k > 1 else None, "baseline": base,
                       "diff_vs_baseline": None, "diff_lo": None, "diff_hi": None,
                       "diff_p": None, "paired_tasks": None, "overlaps_baseline": None}
                if base and base_rate["n"] and method != base:
                    d = paired_bootstrap(s.task_scores(method, agent, domain), base_tasks,
                                         n_boot=n_boot, seed=seed)
                    row.update(diff_vs_baseline=d.diff, diff_lo=d.lo, diff_hi=d.hi, diff_p=d.p,
                               paired_tasks=d.tasks, overlaps_baseline=intervals_overlap(
                                   (r["ci_lo"], r["ci_hi"]), (base_rate["ci_lo"], base_rate["ci_hi"])))
                rows.append(row)
    return rows


def pass_hat_k_table(con, epoch="last", per_model=PER_MODEL_METHODS,
                     scored: Scored | None = None) -> list[dict]:
    """pass^k for k = 1 .. the largest trial count, per method (and agent) and domain; only
    where some task has more than one trial. ``task_runs``: the (run, task[, agent]) units with
    at least k trials that the mean runs over."""
    s = scored or Scored(con, epoch, per_model)
    rows = []
    for method in s.methods:
        for agent in s.agents(method):
            for domain in s.domains + [ALL]:
                units = s.trial_units(method, agent, domain)
                if not units or max(n for n, _ in units) < 2:
                    continue
                for k in range(1, max(n for n, _ in units) + 1):
                    v, tasks = pass_hat_k(units, k)
                    rows.append({"method": method, "agent": agent, "domain": domain, "k": k,
                                 "pass_hat_k": v, "task_runs": tasks})
    return rows


def overlap_sentence(r: dict) -> str:
    a = f"{r['method']} {fmt_rate(r['pass_at_1'], r['ci_lo'], r['ci_hi'], r['n'])}"
    b = f"{r['other']} {fmt_rate(r['other_pass_at_1'], r['other_ci_lo'], r['other_ci_hi'], r['other_n'])}"
    verdict = ("intervals overlap: not distinguishable at this n" if r["overlap"]
               else "intervals do not overlap")
    boot = ""
    if r["diff"] is not None:
        boot = (f"; paired bootstrap {r['diff']:+.3f} [{r['diff_lo']:+.3f}, {r['diff_hi']:+.3f}] "
                f"over {r['paired_tasks']} tasks")
    return f"{r['domain']}: {a} vs {b} — {verdict}{boot}."


def pairs_table(con, epoch="last", per_model=PER_MODEL_METHODS, n_boot: int = 10_000,
                seed: int = 0, scored: Scored | None = None) -> list[dict]:
    """Every pair of methods (method-level rows) in every domain column: do the Wilson
    intervals overlap, and the paired-bootstrap difference (later method − earlier)."""
    s = scored or Scored(con, epoch, per_model)
    rows = []
    for domain in s.domains + [ALL]:
        rates = {m: s.rate(m, ALL, domain) for m in s.methods}
        present = [m for m in s.methods if rates[m]["n"]]
        for other, method in combinations(present, 2):
            a, b = rates[method], rates[other]
            d = paired_bootstrap(s.task_scores(method, ALL, domain),
                                 s.task_scores(other, ALL, domain), n_boot=n_boot, seed=seed)
            row = {"domain": domain, "method": method, "other": other,
                   "pass_at_1": a["pass_at_1"], "ci_lo": a["ci_lo"], "ci_hi": a["ci_hi"],
                   "n": a["n"], "other_pass_at_1": b["pass_at_1"], "other_ci_lo": b["ci_lo"],
                   "other_ci_hi": b["ci_hi"], "other_n": b["n"],
                   "overlap": intervals_overlap((a["ci_lo"], a["ci_hi"]), (b["ci_lo"], b["ci_hi"])),
                   "diff": d.diff, "diff_lo": d.lo, "diff_hi": d.hi, "diff_p": d.p,
                   "paired_tasks": d.tasks}
            row["sentence"] = overlap_sentence(row)
            rows.append(row)
    return rows


def fmt_rate(p, lo, hi, n, errors=None) -> str:
    """``0.850 [0.640, 0.948] n=20`` (+ ``, 1 err``) — how every Pass@1 is printed."""
    if p is None:
        return f"– n={n}"
    err = f", {errors} err" if errors is not None else ""
    return f"{p:.3f} [{lo:.3f}, {hi:.3f}] n={n}{err}"


# ---------------------------------------------------------------- axes (run_info)

def run_axes(con) -> dict[str, dict]:
    """run_id → its sweep axes (parsed axes_json; {} when absent or unparsable)."""
    out = {}
    for run_id, sweep_id, axes_json in con.execute(
            "SELECT run_id, sweep_id, axes_json FROM run_info").fetchall():
        try:
            axes = json.loads(axes_json) if axes_json else {}
        except (TypeError, ValueError):
            axes = {}
        out[run_id] = axes if isinstance(axes, dict) else {}
    return out


def _axis_value(v):
    return json.dumps(v, sort_keys=True) if isinstance(v, (list, dict)) else v


def _sort_key(v):
    return (0, v, "") if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, 0, str(v))


def heterogeneity_table(con, epoch="last") -> list[dict]:
    """Pass@1 (all domains pooled) per method against the sweep's axes: runs with the same
    axis values are pooled; one column per axes_json key."""
    axes = run_axes(con)
    keys = list(dict.fromkeys(k for a in axes.values() for k in a))
    acc = {}
    for c in counts(con, ("run_id", "method"), epoch):
        values = tuple(_axis_value(axes.get(c["run_id"], {}).get(k)) for k in keys)
        a = acc.setdefault((values, c["method"]), {"runs": set(), "n": 0, "successes": 0,
                                                   "errors": 0})
        a["runs"].add(c["run_id"])
        for f in ("n", "successes", "errors"):
            a[f] += c[f]
    order = {m: i for i, m in enumerate(order_methods({m for _, m in acc}))}
    votes = _votes(con)
    rows = []
    for (values, method), a in sorted(acc.items(), key=lambda kv: (
            [_sort_key(v) for v in kv[0][0]], order[kv[0][1]])):
        v = [sum(votes.get(r, (0, 0, 0, 0))[i] for r in a["runs"]) for i in range(4)]
        rows.append({**dict(zip(keys, values)), "method": method, "runs": len(a["runs"]),
                     **rate_fields(a["n"], a["successes"], a["errors"]),
                     # EDV's verification: approve rate, and P(approve | all supporting failed)
                     "approve_rate": _div(v[1], v[0]) if method == "edv" else None,
                     "p_approve_given_failed": _div(v[3], v[2]) if method == "edv" else None})
    return rows


def _votes(con) -> dict[str, tuple[int, int, int, int]]:
    """run_id → (votes, approvals, votes whose supporting runs all failed, their approvals)."""
    try:
        rows = con.execute("SELECT run_id, votes, approvals, votes_all_failed, "
                           "approvals_all_failed FROM verification").fetchall()
    except Exception:  # noqa: BLE001 - a connection without the view (hand-made tables)
        return {}
    return {r[0]: tuple(int(x or 0) for x in r[1:]) for r in rows}


def curve_epoch(con) -> list[dict]:
    """Pass@1 per method and epoch (every epoch, all runs and domains pooled)."""
    rows = [{"method": c["method"], "x": c["epoch"],
             **rate_fields(c["n"], c["successes"], c["errors"])}
            for c in counts(con, ("method", "epoch"), epoch=None)]
    order = {m: i for i, m in enumerate(order_methods({r["method"] for r in rows}))}
    return sorted(rows, key=lambda r: (order[r["method"]], _sort_key(r["x"])))


def curve_axis(con, axis: str, epoch="last") -> list[dict]:
    """Pass@1 per method against one sweep axis (runs that set it; domains pooled)."""
    axes = run_axes(con)
    acc = {}
    for c in counts(con, ("run_id", "method"), epoch):
        x = axes.get(c["run_id"], {}).get(axis)
        if x is None:
            continue
        a = acc.setdefault((c["method"], _axis_value(x)), [0, 0, 0, set()])
        a[0] += c["n"]; a[1] += c["successes"]; a[2] += c["errors"]; a[3].add(c["run_id"])
    order = {m: i for i, m in enumerate(order_methods({m for m, _ in acc}))}
    return [{"method": m, "x": x, "runs": len(a[3]), **rate_fields(a[0], a[1], a[2])}
            for (m, x), a in sorted(acc.items(), key=lambda kv: (order[kv[0][0]], _sort_key(kv[0][1])))]


# ---------------------------------------------------------------- tokens

def _div(a, b):
    return float(a) / float(b) if a is not None and b else None


def token_tables(con) -> dict[str, list[dict]]:
    """Tokens (prompt + completion) per method: ``tokens`` (construction / inference, the user
    simulator apart, per scored test episode and per solved one, ratio to ReasoningBank),
    ``tokens_by_role`` (phase × stage × role) and ``tokens_per_item`` (construction tokens per
    admitted experience, per bank). Denominators: every scored episode of the method (all
    epochs — token_use has no epoch), errored ones included."""
    episodes = {c["method"]: c for c in counts(con, ("method",), epoch=None)}
    sims = ", ".join(_q(r) for r in USER_SIM_ROLES)
    cur = con.execute(f"""
        SELECT method, phase, stage, role, role IN ({sims}) AS user_sim,
               coalesce(sum(calls), 0) AS calls,
               coalesce(sum(prompt_tokens), 0) AS prompt_tokens,
               coalesce(sum(completion_tokens), 0) AS completion_tokens
        FROM token_use GROUP BY ALL ORDER BY method, phase, stage, role""")
    names = [d[0] for d in cur.description]
    by_role = [dict(zip(names, r)) for r in cur.fetchall()]
    for r in by_role:
        r["tokens"] = r["prompt_tokens"] + r["completion_tokens"]
        r["per_test_task"] = _div(r["tokens"], episodes.get(r["method"], {}).get("n"))
    methods = order_methods({r["method"] for r in by_role})  # no token rows: no token claims
    order = {m: i for i, m in enumerate(methods)}
    by_role.sort(key=lambda r: (order[r["method"]], r["phase"] != "construction",
                                str(r["stage"]), str(r["role"])))

    def total(method, phase=None, user_sim=False):
        return sum(r["tokens"] for r in by_role if r["method"] == method and r["user_sim"] == user_sim
                   and (phase is None or r["phase"] == phase))

    summary = []
    for m in methods:
        ep = episodes.get(m, {"n": 0, "successes": 0, "errors": 0})
        row = {"method": m, "episodes": ep["n"], "solved": ep["successes"], "errors": ep["errors"],
               "construction_tokens": total(m, "construction"),
               "inference_tokens": total(m, "inference"), "user_sim_tokens": total(m, None, True)}
        for p in PHASES:
            row[f"{p}_per_test_task"] = _div(row[f"{p}_tokens"], ep["n"])
            row[f"{p}_per_solved_task"] = _div(row[f"{p}_tokens"], ep["successes"])
        row["total_per_test_task"] = _div(row["construction_tokens"] + row["inference_tokens"], ep["n"])
        summary.append(row)
    rb = next((r for r in summary if r["method"] == RB_METHOD), None)
    for r in summary:
        for f in ("construction_per_test_task", "inference_per_test_task", "total_per_test_task"):
            r[f.replace("_per_test_task", "_ratio_to_rb")] = _div(r[f], rb[f]) if rb else None

    cur = con.execute("SELECT method, bank, coalesce(sum(items), 0) AS items FROM admitted "
                      "GROUP BY ALL ORDER BY method, bank")
    per_item = []
    admitted = cur.fetchall()
    for m in methods:
        banks = [(b, i) for mm, b, i in admitted if mm == m]
        if not banks:
            continue
        ctok = total(m, "construction")
        for bank, items in banks + ([(ALL, sum(i for _, i in banks))] if len(banks) > 1 else []):
            per_item.append({"method": m, "bank": bank, "items": items,
                             "construction_tokens": ctok, "tokens_per_item": _div(ctok, items)})
    return {"tokens": summary, "tokens_by_role": by_role, "tokens_per_item": per_item}
