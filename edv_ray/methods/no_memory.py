"""NM: every executor runs every test task with no memory (stage ``eval``); Pass@1 is
reported per model (agent), as in the paper's No-Memory rows."""

from __future__ import annotations

from edv_ray.methods import steps
from edv_ray.methods.sections import NoMemoryConfig
from edv_ray.methods.registry import INFERENCE, PER_AGENT, Method, episode_results, register

NAME = "no_memory"
STAGE = "eval"  # shared: Judge's candidate runs are these episodes


def run_pool_on_tests(ctx, method: str) -> tuple[dict, dict]:
    """Every executor on every test task (the NM runs; Judge's candidates)."""
    test = steps.test_tasks(ctx)
    plan = {(d, t.id): ctx.cfg.executor_names() for d, ts in test.items() for t in ts}
    return test, steps.execute(ctx, stage=STAGE, method=method, epoch=0, plan=plan, tasks=test)


def run(ctx, section: NoMemoryConfig) -> None:
    run_pool_on_tests(ctx, NAME)


register(Method(
    name=NAME, config_cls=NoMemoryConfig, run=run, uses_train=False,
    results_sql=episode_results(NAME, STAGE),
    phases={STAGE: INFERENCE}, scoring=PER_AGENT, baseline=1, report_order=0,
    summary="each pool model alone, no memory"))
