"""Validity checks: which scoring rules a benchmark's figures follow (``metrics:
official | corrected`` where the benchmark has that switch), that every scored episode
says the same, and the benchmark's own figures where it reports any (reached through
``Environment.scoring_figures``, so no benchmark is named here)."""

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


@check
def benchmark_figures(con, run_dir) -> list[Check]:
    """The benchmark's own figures (``Environment.scoring_figures``: MMTB's nine) per
    method × agent × epoch over its episodes, under the run's scoring rules, with what
    they mean; a group whose episodes were scored under other rules fails."""
    import json
    from collections import defaultdict

    from edv_ray.config import load_config
    from edv_ray.envs.protocol import get_env

    if not (run_dir / "config.yaml").is_file():
        return []
    bench = load_config(run_dir / "config.yaml").benchmark
    env = get_env(bench.name)
    if env.scoring_figures(bench, []) is None:
        return []
    mode = getattr(bench, "metrics", None)
    rows = con.execute(
        "SELECT m.method, m.epoch, m.agent, "
        "(SELECT any_value(e.reward_json) FROM episodes e WHERE e.episode_id = m.episode_id) "
        "FROM method_results m").fetchall()
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for method, epoch, agent, detail in rows:
        if detail:
            groups[(method, epoch, agent)].append(json.loads(detail))
    out = []
    for (method, epoch, agent), details in sorted(groups.items(), key=lambda g: str(g[0])):
        modes = {d.get("metrics_mode", "?") for d in details}
        where = f"{agent}" + ("" if epoch is None else f", epoch {epoch}")
        figures = env.scoring_figures(bench, details)
        detail = (f"episodes were scored in modes {sorted(modes)}, the config says {mode}"
                  if modes - {mode} else figures.meaning)
        out.append(Check(f"{bench.name}_figures", not (modes - {mode}),
                         f"{where} — {figures.line}", detail, method))
    return out
