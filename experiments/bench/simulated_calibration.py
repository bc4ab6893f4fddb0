"""Which τ²-bench tasks the simulated engine can make succeed and fail.

Plays every task of the given domains with a planted P(success) of 1 and of 0 (each
failure mode), through the framework's agents, τ²-bench's orchestrator and grading, and
prints per domain how many tasks end as planted — and lists the others (a task the gold
path cannot solve, or one no planted failure can fail). A validation suite uses the
list to know which decisions a run can realise.

    .venv/bin/python experiments/bench/simulated_calibration.py --domains airline retail mock
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

PLANS = {"gold": {"success": {"default": 1.0}},
         "stop_early": {"success": {"default": 0.0}, "failure_modes": {"stop_early": 1.0}},
         "wrong_argument": {"success": {"default": 0.0}, "failure_modes": {"wrong_argument": 1.0}}}


def main() -> None:
    from edv_ray.envs.protocol import quiet_logs
    from edv_ray.testing.helpers import tau2_tasks
    from tests.simulation.sim_helpers import play_tau2, serving

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domains", nargs="+", default=["mock", "airline", "retail"])
    ap.add_argument("--threads", type=int, default=8)
    args = ap.parse_args()
    quiet_logs()
    for domain in args.domains:
        tasks = tau2_tasks(domain)
        off: dict[str, list[str]] = {}
        for plan, agent in PLANS.items():
            with serving({"agents": {"a": agent}}, [{"name": "tau2", "domains": [domain]}]) as (_s, ep):
                def play(task, ep=ep, domain=domain):
                    try:
                        return play_tau2(ep, "a", task, domain=domain).success
                    except Exception as err:  # noqa: BLE001 - τ²-bench grading can raise
                        return f"error: {err}"
                with ThreadPoolExecutor(args.threads) as pool:
                    outs = list(pool.map(play, tasks))
            off[plan] = [t.id if isinstance(o, bool) else f"{t.id} ({o})"
                         for t, o in zip(tasks, outs) if o is not (plan == "gold")]
        print(f"{domain}: {len(tasks)} tasks; gold fails on {len(off['gold'])} {off['gold'][:12]}; "
              f"stop_early succeeds on {len(off['stop_early'])} {off['stop_early'][:12]}; "
              f"wrong_argument succeeds on {len(off['wrong_argument'])} {off['wrong_argument'][:12]}",
              flush=True)


if __name__ == "__main__":
    main()
