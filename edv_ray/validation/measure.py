"""What the framework measured in a run, read the way a user reads it: ``edv compare``'s
own loading, cells and paired comparisons (:mod:`edv_ray.report.compare_load`,
:mod:`edv_ray.report.compare_units`, :mod:`edv_ray.report.compare_tables`,
:mod:`edv_ray.report.stats`) and the run's own views (``edv report``). Nothing here
knows what was planted."""

from __future__ import annotations

from pathlib import Path

from edv_ray.report.compare_load import attach
from edv_ray.report.compare_tables import compare_cells
from edv_ray.report.compare_units import ALL, Scored
from edv_ray.report.paired import PairedDiff, paired_comparison
from edv_ray.report.stats import Rate, clustered_rate
from edv_ray.results.views import connect

N_BOOT = 10_000


class Run:
    """One finished run: its views (``con``) and ``edv compare``'s connection (``cmp``,
    validity checks kept — a failed check is reported by the suite, not hidden)."""

    def __init__(self, run_dir: str | Path) -> None:
        self.dir = Path(run_dir)
        self.con = connect(self.dir)
        comparison = attach([self.dir], allow_invalid=True)
        self.cmp = comparison.con
        self.info = comparison.runs[0]
        self.group = self.info.label
        self._scored: dict = {}

    def rows(self, sql: str, *params) -> list[tuple]:
        return self.con.execute(sql, list(params)).fetchall()

    def scored(self, epoch="last") -> Scored:
        if epoch not in self._scored:
            self._scored[epoch] = Scored(self.cmp, epoch)
        return self._scored[epoch]

    def cell(self, method: str, domain: str, agent: str = ALL, epoch="last",
             confidence: float = 0.95) -> Rate:
        """A compare cell of one domain: its Pass@1 and task-clustered interval — at 95 %
        compare's own cell (:meth:`Scored.cell`, what ``compare.md`` prints), at another
        ``confidence`` compare's counts through :func:`clustered_rate`."""
        if domain == ALL:
            raise ValueError("per-domain cells only (the mean of domain scores is compare's)")
        s = self.scored(epoch)
        if confidence == 0.95:
            c = s.cell(self.group, method, agent, domain)
            return Rate(c["successes"], c["n"], c["pass_at_1"], c["ci_lo"], c["ci_hi"], c["tasks"],
                        c["n_eff"], c["interval"])
        tc = s.task_counts(self.group, method, agent, domain)
        keys = sorted(tc)
        return clustered_rate([tc[k][0] for k in keys], [tc[k][1] for k in keys],
                              confidence=confidence)

    def cell_fn(self, method: str, domain: str, agent: str = ALL, epoch="last"):
        return lambda conf: self.cell(method, domain, agent, epoch, conf)

    def paired(self, a: str, b: str, domain: str = ALL, epoch="last",
               confidence: float = 0.95) -> PairedDiff:
        """``edv compare``'s paired comparison a − b (methods of this run); at 95 % it is
        compare's own :func:`compare_cells`, at another level the same call of
        :func:`paired_comparison` with that confidence."""
        s = self.scored(epoch)
        if confidence == 0.95:
            return compare_cells(s, (self.group, a, ALL), (self.group, b, ALL), domain, N_BOOT, 0)
        ta = s.task_scores(self.group, a, ALL, domain)
        tb = s.task_scores(self.group, b, ALL, domain)
        strata = {k: k[0] for k in set(ta) | set(tb)} if domain == ALL else None
        return paired_comparison(ta, tb, strata=strata, n_boot=N_BOOT, seed=0, confidence=confidence)

    def paired_fn(self, a: str, b: str, domain: str = ALL, epoch="last"):
        return lambda conf: self.paired(a, b, domain, epoch, conf)

    def task_scores(self, method: str, epoch="last") -> dict:
        return self.scored(epoch).task_scores(self.group, method)

    def methods(self, epoch="last") -> list[str]:
        return self.scored(epoch).group_methods(self.group)

    def failed_validity(self) -> list[str]:
        return [f"{c.name}: {c.figure}" for c in self.info.checks if not c.ok]

    def shared_items(self, epoch: int, domain: str) -> list[tuple[str, str]]:
        """(rule, source task) of EDV's shared items frozen after ``epoch``."""
        from edv_ray.memory import MemoryBank

        bank = MemoryBank.load(self.dir / "memory_snapshots" / f"epoch={epoch}", dedup_threshold=1.0)
        return [(i.rule, (i.source_task_ids or [""])[0]) for i in bank
                if i.bank == "shared" and i.domain == domain]

    def bank_ids(self, epoch: int) -> set[str]:
        """Ids of every item of EDV's bank frozen after ``epoch``."""
        from edv_ray.memory import MemoryBank

        return {i.item_id for i in MemoryBank.load(self.dir / "memory_snapshots" / f"epoch={epoch}",
                                                   dedup_threshold=1.0)}

    def request_seeds(self) -> list[tuple[str, list]]:
        """(agent, the sampling seeds its No-Memory requests carried)."""
        return self.rows("SELECT agent, list(DISTINCT seed ORDER BY seed) FROM llm_calls "
                         "WHERE role = 'agent' AND stage = 'eval' GROUP BY 1 ORDER BY 1")


def paired_scores(a: dict, b: dict, confidence: float = 0.95) -> PairedDiff:
    """paired.paired_comparison over (domain, task) keys, the mean of domain scores."""
    return paired_comparison(a, b, strata={k: k[0] for k in set(a) | set(b)}, n_boot=N_BOOT,
                             seed=0, confidence=confidence)


def clustered_fn(rows):
    rows = list(rows)
    return lambda conf: clustered(rows, conf)


def clustered(rows, confidence: float = 0.95) -> Rate:
    """A rate from rows (cluster key, successes, trials) grouped by cluster."""
    acc: dict = {}
    for key, s, n in rows:
        got = acc.setdefault(key, [0, 0])
        got[0] += int(s)
        got[1] += int(n)
    keys = sorted(acc, key=repr)
    return clustered_rate([acc[k][0] for k in keys], [acc[k][1] for k in keys], confidence=confidence)
