"""The units of ``edv compare``: task-level counts in one epoch scope, each run its own row
group (or runs pooled on request), and the cell every table prints.

A cell is (group, method, agent, domain). Its Pass@1 is solved / scored episodes (an
errored episode is a failure) with :func:`edv_ray.report.stats.clustered_rate` — Wilson
when each task has one episode, task-clustered when a task has several (trials, agents,
epochs, pooled runs). Domain ``all`` is the mean of the domain scores (the paper's Avg.),
with the episode-pooled figure beside it.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction

from edv_ray.config import ConfigError
from edv_ray.report.method_facts import method_order, per_model_methods
from edv_ray.report.stats import clustered_rate

ALL = "all"  # a pooled domain / agent
POOL_IGNORES = ("seed",)  # axes that --pool pools over (runs equal but for these)
_GROUP_COLS = ("run_id", "method", "agent", "epoch", "domain", "task_id")

_BASE = ("SELECT *, (status = 'ok' AND coalesce(success, false)) AS solved, "
         "coalesce(status = 'error', false) AS errored FROM method_results")


def scored_sql(epoch="last") -> tuple[str, list]:
    """(SQL, parameters): method_results with ``solved`` / ``errored`` flags in the epoch
    scope — ``"last"`` (each (run, method)'s last epoch: the memory as it ended), an int,
    or None (every epoch)."""
    if epoch is None:
        return _BASE, []
    if epoch == "last":
        return (f"SELECT r.* FROM ({_BASE}) r JOIN (SELECT run_id, method, max(epoch) AS last_epoch "
                "FROM method_results GROUP BY run_id, method) l "
                "ON r.run_id IS NOT DISTINCT FROM l.run_id AND r.method = l.method "
                "WHERE r.epoch IS NOT DISTINCT FROM l.last_epoch"), []
    return f"{_BASE} WHERE epoch = ?", [int(epoch)]


def counts(con, by: tuple[str, ...], epoch="last") -> list[dict]:
    """Episodes / successes / errors grouped by columns of method_results."""
    bad = [c for c in by if c not in _GROUP_COLS]
    if bad:
        raise ValueError(f"cannot group by {bad}")
    cols = ", ".join(by)
    sql, params = scored_sql(epoch)
    cur = con.execute(f"SELECT {cols}, count(*) AS n, count(*) FILTER (WHERE solved) AS successes, "
                      f"count(*) FILTER (WHERE errored) AS errors FROM ({sql}) s "
                      f"GROUP BY {cols} ORDER BY {cols}", params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def order_methods(methods) -> list[str]:
    """Methods in report order (``Method.report_order``); labels no method registered
    (a contaminated condition's ``method+condition``) after them, by name."""
    methods = set(methods)
    known = [m for m in method_order() if m in methods]
    return known + sorted(methods - set(known))


def check_epoch(con, epoch) -> None:
    """``--epoch N`` that no method has is an error, not an empty table."""
    if epoch in ("last", None):
        return
    have = sorted({e for (e,) in con.execute(
        "SELECT DISTINCT epoch FROM method_results WHERE epoch IS NOT NULL").fetchall()})
    if int(epoch) not in have:
        raise ConfigError(f"--epoch {epoch}: no method has epoch {epoch} in these runs "
                          f"(epochs present: {', '.join(map(str, have)) or 'none'})")


@dataclass(frozen=True)
class Group:
    """A row group: one run, or (``--pool``) runs equal but for :data:`POOL_IGNORES`."""

    label: str
    runs: tuple[str, ...]
    axes: dict
    text: str  # how the table names it, with what was pooled


def run_axes(con) -> dict[str, dict]:
    """run label → its sweep axes ({} when absent or unparsable)."""
    out = {}
    for run_id, axes_json in con.execute("SELECT run_id, axes_json FROM run_info").fetchall():
        try:
            axes = json.loads(axes_json) if axes_json else {}
        except (TypeError, ValueError):
            axes = {}
        out[run_id] = axes if isinstance(axes, dict) else {}
    return out


def make_groups(con, pool: bool) -> list[Group]:
    axes = run_axes(con)
    runs = [r for (r,) in con.execute("SELECT run_id FROM run_info ORDER BY run_id").fetchall()]
    runs += sorted({r for (r,) in con.execute("SELECT DISTINCT run_id FROM method_results")
                    .fetchall()} - set(runs))

    def describe(label, a):
        return f"{label} ({', '.join(f'{k}={v}' for k, v in a.items())})" if a else label

    if not pool:
        return [Group(r, (r,), axes.get(r, {}), describe(r, axes.get(r, {}))) for r in runs]
    keyed: dict[str, list[str]] = {}
    for r in runs:
        kept = {k: v for k, v in axes.get(r, {}).items() if k not in POOL_IGNORES}
        keyed.setdefault(json.dumps(kept, sort_keys=True), []).append(r)
    out = []
    for key, members in keyed.items():
        kept = json.loads(key)
        if len(members) == 1:
            out.append(Group(members[0], tuple(members), kept, describe(members[0], kept)))
            continue
        label = "+".join(members) if len(members) <= 3 else f"{members[0]}+{len(members) - 1} more"
        text = describe(f"pooled {len(members)} runs: {', '.join(members)}", kept)
        out.append(Group(label, tuple(members), kept, text))
    return out


class Scored:
    """The task-level units of one epoch scope — (run, method, agent, domain, task) →
    n, successes, errors — and the cells over them."""

    def __init__(self, con, epoch="last", per_model=None, pool: bool = False):
        check_epoch(con, epoch)
        self.epoch = epoch
        self.per_model = tuple(per_model_methods() if per_model is None else per_model)
        self.groups = make_groups(con, pool)
        group_of = {r: g.label for g in self.groups for r in g.runs}
        self.units = counts(con, ("run_id", "method", "agent", "domain", "task_id"), epoch)
        for u in self.units:
            u["group"] = group_of[u["run_id"]]
            u["agent"] = str(u["agent"])
        self.methods = order_methods({u["method"] for u in self.units})
        # methods these runs hold that this epoch scope leaves out (no row at epoch N)
        self.left_out = order_methods({m for (m,) in con.execute(
            "SELECT DISTINCT method FROM method_results").fetchall()} - set(self.methods))
        self.domains = sorted({u["domain"] for u in self.units})
        # the columns a table prints: each domain, and ``all`` when there are several
        self.columns = self.domains + ([ALL] if len(self.domains) > 1 else [])
        self._index = defaultdict(list)
        for u in self.units:
            self._index[(u["group"], u["method"])].append(u)

    def group_methods(self, group: str) -> list[str]:
        return [m for m in self.methods if self._index.get((group, m))]

    def agent_names(self, group: str, method: str) -> list[str]:
        return sorted({u["agent"] for u in self._index.get((group, method), [])})

    def agents(self, group: str, method: str) -> list[str]:
        """The agent rows a method gets: ``all`` always, and each agent for a per-model
        method run by several agents."""
        agents = self.agent_names(group, method)
        return [ALL] + agents if method in self.per_model and len(agents) > 1 else [ALL]

    def select(self, group, method, agent=ALL, domain=ALL) -> list[dict]:
        return [u for u in self._index.get((group, method), [])
                if (agent == ALL or u["agent"] == agent) and (domain == ALL or u["domain"] == domain)]

    def task_counts(self, group, method, agent=ALL, domain=ALL) -> dict:
        """(domain, task_id) → [successes, episodes, errors] over the cell's episodes."""
        acc = defaultdict(lambda: [0, 0, 0])
        for u in self.select(group, method, agent, domain):
            a = acc[(u["domain"], u["task_id"])]
            a[0] += u["successes"]
            a[1] += u["n"]
            a[2] += u["errors"]
        return dict(acc)

    def task_scores(self, group, method, agent=ALL, domain=ALL) -> dict:
        """(domain, task_id) → the task's score: its mean success over the cell's episodes."""
        return {k: Fraction(c, n) for k, (c, n, _) in self.task_counts(group, method, agent,
                                                                        domain).items()}

    def cell(self, group, method, agent=ALL, domain=ALL) -> dict:
        """n, successes, errors, tasks, Pass@1 and its interval; for domain ``all`` the
        mean of domain scores (``pass_at_1``) and the episode-pooled figure (``pooled_*``)."""
        tc = self.task_counts(group, method, agent, domain)
        keys = sorted(tc)
        s = [tc[k][0] for k in keys]
        n = [tc[k][1] for k in keys]
        pooled = clustered_rate(s, n)
        out = {"n": pooled.n, "successes": pooled.successes, "errors": sum(v[2] for v in tc.values()),
               "tasks": len(keys), "max_per_task": max(n, default=0)}
        if domain != ALL:
            return {**out, **_rate_fields(pooled)}
        per_domain = defaultdict(int)
        for (d, _), (_, m, _) in tc.items():
            per_domain[d] += m
        w = [1.0 / (len(per_domain) * per_domain[d]) for d, _ in keys]
        macro = clustered_rate(s, n, weights=w) if keys else pooled
        return {**out, **_rate_fields(macro), "domains": len(per_domain),
                **{f"pooled_{k}": v for k, v in _rate_fields(pooled).items()}}


def _rate_fields(r) -> dict:
    return {"pass_at_1": r.rate, "ci_lo": r.lo, "ci_hi": r.hi, "interval": r.method,
            "n_eff": r.n_eff}


def fmt_rate(p, lo, hi, n, errors=None, tasks=None) -> str:
    """``0.850 [0.640, 0.948] n=20`` (+ ``(12 tasks)`` when tasks repeat, + ``, 1 err``) —
    how every Pass@1 is printed."""
    if p is None:
        return f"– n={n}"
    t = f" ({tasks} tasks)" if tasks is not None and tasks != n else ""
    err = f", {errors} err" if errors is not None else ""
    return f"{p:.3f} [{lo:.3f}, {hi:.3f}] n={n}{t}{err}"


def fmt_cell(c: dict, pooled: bool = False) -> str:
    pre = "pooled_" if pooled else ""
    return fmt_rate(c[f"{pre}pass_at_1"], c[f"{pre}ci_lo"], c[f"{pre}ci_hi"], c["n"],
                    c["errors"], c["tasks"])
