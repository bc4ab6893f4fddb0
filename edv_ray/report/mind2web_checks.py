"""Mind2Web's split figures in the validity checks (see :mod:`edv_ray.report.validity`):
which metrics mode the run used (``benchmark.metrics``: official | corrected), the
split's macro / micro EA, AF1, SSR and task SR in that mode per method × agent × epoch,
and where the official scorer's figures differ from the corrected ones."""

from __future__ import annotations

from collections import defaultdict

from edv_ray.report.validity import Check, check

_SHOWN = (("task_sr", "SR"), ("macro_element_acc", "macro EA"), ("macro_action_f1", "AF1"),
          ("macro_step_sr", "SSR"), ("micro_element_acc", "micro EA"),
          ("micro_action_f1", "AF1"), ("micro_step_sr", "SSR"))


def _figure(mode: str, f: dict) -> str:
    shown = ", ".join(f"{label} {f[key]:.3f}" for key, label in _SHOWN)
    return f"{mode}: {shown}; {int(f['n_tasks'])} tasks"


def _detail(mode: str, both: dict[str, dict], modes_stored: set[str]) -> str:
    off, cor = both["official"], both["corrected"]
    if modes_stored - {mode}:
        return f"episodes were scored in modes {sorted(modes_stored)}, the config says {mode}"
    if all(abs(off[k] - cor[k]) < 1e-12 for k, _ in _SHOWN):
        return "official and corrected figures agree on this run"
    other = "corrected" if mode == "official" else "official"
    dropped = off["official_dropped_steps"]
    why = (f"the official scorer leaves out {dropped:g} trailing step(s) without a positive "
           "candidate; " if dropped else "")
    return f"{why}{_figure(other, both[other])}"


@check
def mind2web_metrics(con, run_dir) -> list[Check]:
    """The Mind2Web scores of each method in the run's metrics mode, in split order."""
    import json

    from edv_ray.config import load_config
    from edv_ray.envs.protocol import get_env

    if not (run_dir / "config.yaml").is_file():
        return []
    cfg = load_config(run_dir / "config.yaml")
    if cfg.benchmark.name != "mind2web":
        return []
    mode = cfg.benchmark.metrics
    order = [t for (t,) in con.execute(
        "SELECT task_id FROM selection WHERE selection = 'test'").fetchall()]
    rows = con.execute(
        "SELECT m.method, m.epoch, m.agent, m.trial, m.task_id, "
        "(SELECT any_value(e.reward_json) FROM episodes e WHERE e.episode_id = m.episode_id) "
        "FROM method_results m").fetchall()
    rank = {t: i for i, t in enumerate(order)}
    groups: dict[tuple, dict] = defaultdict(lambda: defaultdict(list))
    modes_stored: dict[tuple, set[str]] = defaultdict(set)
    for method, epoch, agent, trial, task_id, detail in sorted(
            rows, key=lambda r: (rank.get(r[4], len(rank)), r[4])):
        groups[(method, epoch, agent)][trial].append((task_id, detail))
        if detail:
            modes_stored[(method, epoch, agent)].add(json.loads(detail).get("metrics_mode", "?"))
    env = get_env("mind2web")
    out = []
    for (method, epoch, agent), trials in sorted(groups.items(), key=lambda g: str(g[0])):
        both = env.split_figures([trials[t] for t in sorted(trials)])
        stored = modes_stored[(method, epoch, agent)]
        where = f"{agent}" + ("" if epoch is None else f", epoch {epoch}")
        figure = _figure(mode, both[mode]) + (f" × {len(trials)} trials" if len(trials) > 1
                                               else "")
        out.append(Check("mind2web_metrics", not (stored - {mode}), f"{where} — {figure}",
                         _detail(mode, both, stored), method))
    return out
