"""Validity check: which scoring rules a benchmark's figures follow (``metrics:
official | corrected`` where the benchmark has that switch), and that every scored
episode says the same."""

from __future__ import annotations

from edv_ray.report.validity import Check, check


@check
def benchmark_metrics(con, run_dir) -> list[Check]:
    """The run's scoring rules: ``official`` reproduces the reference code's numbers
    (its bugs included), ``corrected`` applies the fixes listed in the benchmark's
    README. Episodes store the rules they were scored with; a mix fails the check."""
    from edv_ray.config import load_config

    if not (run_dir / "config.yaml").is_file():
        return []
    bench = load_config(run_dir / "config.yaml").benchmark
    mode = getattr(bench, "metrics", None)
    if mode is None:
        return []
    stored = [m for (m,) in con.execute(
        "SELECT DISTINCT json_extract_string(reward_json, '$.metrics_mode') FROM episodes "
        "WHERE reward_json IS NOT NULL").fetchall() if m is not None]
    ok = set(stored) <= {mode}
    detail = (f"official = the reference code's figures; corrected = the fixes in "
              f"envs/{bench.name}/README.md" if ok else
              f"episodes were scored with {sorted(stored)}, the config says {mode!r}")
    return [Check("benchmark_metrics", ok, f"{bench.name}: {mode}", detail)]
