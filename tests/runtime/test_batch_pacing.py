"""The batch layer's admission: threads per worker add up to ``concurrency`` (queued
episodes do not run early), and a stage's first episodes start ``start_interval_s`` apart
— measured from the episodes' own start times and the calls the server received."""

from __future__ import annotations

import pytest
from rich.console import Console

from edv_ray import pipeline
from edv_ray.config import load_config_dict
from edv_ray.envs.tau2 import episode as tau2_episode
from edv_ray.envs.tau2.env import ENV as TAU2
from edv_ray.envs.tau2.tasks import has_ticket
from edv_ray.results.views import connect
from edv_ray.runtime.batch import shares
from edv_ray.testing.helpers import scripted_config, tau2_tasks


def test_shares_split_concurrency_exactly():
    assert shares(128, 2) == [64, 64]
    assert shares(5, 2) == [3, 2]
    assert shares(3, 4) == [1, 1, 1]  # no worker without a thread
    assert sum(shares(1000, 7)) == 1000


def _max_overlap(intervals) -> int:
    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    best = cur = 0
    for _, step in events:
        cur += step
        best = max(best, cur)
    return best


@pytest.mark.slow
def test_episodes_stay_within_concurrency_and_the_first_fill_is_paced(server, tmp_path):
    server.delay_s = 0.3
    tasks = [t.id for t in tau2_tasks("mock") if has_ticket(t)]
    cfg = load_config_dict(scripted_config(
        server.base_url, tmp_path,
        agents=[{"name": "gold", "model": "scripted", "prompt_strategy": "native_tools"}],
        roles={}, benchmark={"domains": ["mock"], "split": "all", "task_ids": tasks,
                             "num_tasks": None, "solo": "always"},
        runtime={"concurrency": 3, "workers": 2, "trials": 2, "start_interval_s": 0.5}))
    cfg, run_id, run_dir = pipeline.prepare_from(cfg)
    pipeline.execute(cfg, run_id, run_dir, console=Console(quiet=True), show_progress=False)
    con = connect(run_dir)
    eps = con.execute("SELECT started_at, started_at + wall_s, status FROM episodes "
                      "ORDER BY started_at").fetchall()
    assert len(eps) == 2 * len(tasks) >= 8 and {s for *_, s in eps} == {"ok"}
    first = [a for a, _b, _s in eps[:3]]
    # paced 0.5 s apart (unpaced they start within ~50 ms; slack for a loaded machine)
    assert first[1] - first[0] >= 0.2 and first[2] - first[1] >= 0.2
    assert first[2] - first[0] >= 0.7
    # 3 threads in all (2 + 1), whatever is queued on the workers beyond them
    assert _max_overlap([(a, b) for a, b, _s in eps]) <= 3
    calls = con.execute("SELECT started_at, started_at + latency_s FROM llm_calls").fetchall()
    assert 3 >= _max_overlap(calls) >= 2


def test_tau2_warm_up_builds_each_domains_shared_tools():
    TAU2.warm_up(None, "telecom")  # has a solo mode and user tools
    TAU2.warm_up(None, "airline")  # no solo mode: no error, no solo tools
    assert {("telecom", False), ("telecom", True), ("airline", False)} <= set(tau2_episode._TOOLS)
    assert ("airline", True) not in tau2_episode._TOOLS
    assert {("telecom", "agent"), ("telecom", "user"), ("airline", "agent")} <= set(
        tau2_episode._SCHEMAS)
