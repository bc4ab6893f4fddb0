"""Where a run's CPU goes, fan-out by fan-out: the driver's own CPU in each fan-out of
:class:`~edv_ray.runtime.batch.EpisodeRunner` (:class:`DriverCpu`), and every process
group's CPU over each fan-out's span (:func:`stage_table`, read from a
:class:`harness.TreeSampler`). Used by ``scale_simulated.py``."""

from __future__ import annotations

import time

from harness import TreeSampler


class DriverCpu:
    """The driver's CPU seconds (``time.process_time``: every thread of this process)
    spent in each fan-out of :class:`EpisodeRunner` — ``run`` (episodes) and ``run_jobs``
    (stage jobs) — with the count of items each ran: ``[(label, kind, items, cpu_s)]``,
    and each fan-out's wall-clock span (``spans``: ``[(label, kind, items, t0, t1)]``, for
    the stage table: every process group's CPU over that span)."""

    def __init__(self) -> None:
        from edv_ray.runtime.batch import EpisodeRunner

        self.stages: list[tuple[str, str, int, float]] = []
        self.spans: list[tuple[str, str, int, float, float]] = []
        self._cls, self._saved = EpisodeRunner, (EpisodeRunner.run, EpisodeRunner.run_jobs)
        EpisodeRunner.run = self._timed(EpisodeRunner.run, "episodes")
        EpisodeRunner.run_jobs = self._timed(EpisodeRunner.run_jobs, "jobs")

    def _timed(self, fan_out, kind: str):
        def timed(runner, items, *a, **kw):
            c0, t0 = time.process_time(), time.time()
            try:
                return fan_out(runner, items, *a, **kw)
            finally:
                label = kw.get("label", a[0] if a else kind)
                self.stages.append((label, kind, len(items), time.process_time() - c0))
                self.spans.append((label, kind, len(items), t0, time.time()))
        return timed

    def restore(self) -> None:
        self._cls.run, self._cls.run_jobs = self._saved

    def ms_per_item(self, kind: str) -> float:
        n = sum(k for _, w, k, _ in self.stages if w == kind)
        return 1000 * sum(c for _, w, _, c in self.stages if w == kind) / n if n else float("nan")

    def lines(self, driver_cpu_s: float) -> list[str]:
        """Per fan-out, per kind, and the driver's CPU over the whole run (``driver_cpu_s``:
        planning, resume, views, embeddings between the fan-outs too) per item."""
        out = [f"  driver CPU ms per {kind[:-1]}: {label}: {1000 * cpu / max(n, 1):.2f} "
               f"({n:,} {kind}, {cpu:.1f} s)" for label, kind, n, cpu in self.stages]
        items = sum(n for _, _, n, _ in self.stages)
        fan_outs = sum(c for _, _, _, c in self.stages)
        return out + [f"  driver CPU ms per episode (all episode stages): "
                      f"{self.ms_per_item('episodes'):.2f}; per job (all job stages): "
                      f"{self.ms_per_item('jobs'):.2f}",
                      f"  driver CPU ms per episode or job over the whole run: "
                      f"{1000 * driver_cpu_s / max(items, 1):.2f} ({driver_cpu_s:.0f} s, of "
                      f"which fan-outs {fan_outs:.1f} s)"]


def stage_table(spans: list[tuple[str, str, int, float, float]], sampler: TreeSampler,
                t0: float, t1: float) -> list[dict]:
    """Per fan-out (execute per epoch, distill, verify, embed, inference): items, wall
    seconds, items/s and each process group's CPU over its span (``sampler`` samples every
    ``--sample-s``: short spans are coarse); then "between" — what the run spent outside
    the fan-outs (planning, merges and bank indexing on the driver, the report)."""
    rows = []
    for label, kind, n, a, b in spans:
        cpu = sampler.cpu_between(a, b)
        rows.append({"stage": label, "items": f"{n:,} {kind}", "wall": b - a,
                     "rate": n / max(b - a, 1e-9), "cpu": cpu,
                     "ms_per_item": 1000 * sum(cpu.values()) / max(n, 1)})
    whole = sampler.cpu_between(t0, t1)
    inside = {g: sum(r["cpu"].get(g, 0.0) for r in rows) for g in whole}
    rows.append({"stage": "between fan-outs", "items": "", "rate": float("nan"),
                 "wall": (t1 - t0) - sum(r["wall"] for r in rows), "ms_per_item": float("nan"),
                 "cpu": {g: max(0.0, whole[g] - inside[g]) for g in whole}})
    return rows


def print_stage_table(console, rows: list[dict], workers: int) -> None:
    from rich.table import Table

    groups = sorted({g for r in rows for g in r["cpu"]})
    table = Table(title=f"stages, {workers} worker(s): wall and CPU (s) by process group")
    for col in ("stage", "items", "wall s", "items/s", *(f"CPU {g}" for g in groups),
                "CPU ms per item"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["stage"], r["items"], f"{r['wall']:.0f}", f"{r['rate']:.1f}",
                      *(f"{r['cpu'].get(g, 0.0):.0f}" for g in groups),
                      f"{r['ms_per_item']:.1f}")
    console.print(table)
