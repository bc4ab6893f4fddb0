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


_MMTB_SHOWN = (("overall", "all"), ("single", "单"), ("multi", "多"), ("chat", "拒"),
               ("clarify", "反"), ("parallel", "A^P"), ("serial", "A^S"),
               ("serial_parallel", "A^{S+P}"), ("optimal_path", "optimal path"))


def mmtb_figure_line(mode: str, f: dict) -> str:
    """The nine MMTB figures in one line ("-" for a figure over no mission)."""
    shown = ", ".join(f"{label} {'-' if f[k] is None else format(f[k], '.3f')}"
                      for k, label in _MMTB_SHOWN)
    return f"{mode}: {shown}; {int(f['n_overall'])} missions, {int(f['n_dropped'])} dropped"


def mmtb_departures(mode: str) -> str:
    """What the figures mean in this mode: the official definitions, or per figure how
    ``corrected`` departs from them."""
    from edv_ray.envs.mmtb.metrics import DEPARTURES, STAGE1_DEPARTURE

    if mode == "official":
        return ("the official analysis: A^P / A^S / A^{S+P} over every mission of that "
                "answer structure, whatever its type; optimal path = correct and optimal / "
                "every parallel and serial+parallel mission; missions after an official crash "
                "left out; stage 1 'error' where the argument check raised")
    return "corrected departs: " + "; ".join(
        f"{label}: {DEPARTURES[k]}" for k, label in _MMTB_SHOWN) + f"; {STAGE1_DEPARTURE}"


@check
def mmtb_figures(con, run_dir) -> list[Check]:
    """MMTB's nine figures per method × agent × epoch over every mission of its episodes
    (micro, as the official analysis), in the run's metrics mode, with what they mean."""
    import json
    from collections import defaultdict

    from edv_ray.config import load_config
    from edv_ray.envs.mmtb.metrics import MissionResult, breakdown

    if not (run_dir / "config.yaml").is_file():
        return []
    cfg = load_config(run_dir / "config.yaml")
    if cfg.benchmark.name != "mmtb":
        return []
    mode = cfg.benchmark.metrics
    rows = con.execute(
        "SELECT m.method, m.epoch, m.agent, "
        "(SELECT any_value(e.reward_json) FROM episodes e WHERE e.episode_id = m.episode_id) "
        "FROM method_results m").fetchall()
    groups: dict[tuple, list[MissionResult]] = defaultdict(list)
    stored: dict[tuple, set[str]] = defaultdict(set)
    for method, epoch, agent, detail in rows:
        if not detail:
            continue
        d = json.loads(detail)
        stored[(method, epoch, agent)].add(d.get("metrics_mode", "?"))
        groups[(method, epoch, agent)] += [
            MissionResult(m["kind"], m["structure"], m["correct"], m["optimal"],
                          m.get("recorded", True)) for m in d.get("missions", [])]
    out = []
    for (method, epoch, agent), results in sorted(groups.items(), key=lambda g: str(g[0])):
        modes = stored[(method, epoch, agent)]
        where = f"{agent}" + ("" if epoch is None else f", epoch {epoch}")
        detail = (f"episodes were scored in modes {sorted(modes)}, the config says {mode}"
                  if modes - {mode} else mmtb_departures(mode))
        out.append(Check("mmtb_figures", not (modes - {mode}),
                         f"{where} — {mmtb_figure_line(mode, breakdown(results))}", detail,
                         method))
    return out
