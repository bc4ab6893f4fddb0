"""Build episode specs from the config, and skip what a resumed run already finished."""

from __future__ import annotations

from pathlib import Path

from edv_ray.config import RunConfig, Sampling
from edv_ray.runtime.servers import ServedPool
from edv_ray.runtime.spec import EpisodeSpec, MemoryRequest, episode_id


def make_spec(cfg: RunConfig, run_id: str, pool: ServedPool, env, *, stage: str, method: str,
              domain: str, task, trial: int, agent: str, task_type: str, epoch: int = 0,
              memory: MemoryRequest | None = None) -> EpisodeSpec:
    a = cfg.agent(agent)
    solo = not env.needs_user_simulator(cfg.benchmark, task)
    eid = episode_id(stage, epoch, domain, task.id, trial, agent,
                     None if memory is None else memory.key())
    us = cfg.roles.user_simulator
    user_ep = None if (solo or us is None) else pool.endpoint(us.model, "user", eid)
    return EpisodeSpec(
        run_id=run_id, stage=stage, method=method, epoch=epoch,
        benchmark=cfg.benchmark.model_dump(mode="json"), task_split=getattr(task, "split", None),
        domain=domain, task_id=task.id, task_type=task_type,
        trial=trial, agent=agent, model=a.model, prompt_strategy=a.prompt_strategy,
        sampling=agent_sampling(a.sampling, epoch, trial), agent_endpoint=pool.agent_endpoint(cfg, agent, eid),
        user_model=None if solo or us is None else us.model, user_endpoint=user_ep,
        user_sampling=None if us is None else us.sampling, solo=solo,
        seed=episode_seed(cfg.seed, epoch, trial), max_steps=cfg.benchmark.max_steps,
        max_errors=cfg.benchmark.max_errors, timeout_s=cfg.runtime.episode_timeout_s,
        memory=memory,
    )


def episode_seed(run_seed: int, epoch: int, trial: int) -> int:
    """The episode's own seed (the benchmark's randomness, e.g. τ²-bench's orchestrator):
    distinct per epoch and trial, so a later epoch is a new sample, not a replay."""
    return run_seed * 1000 + trial + EPOCH_SEED_STRIDE * epoch


def agent_sampling(sampling: Sampling, epoch: int, trial: int) -> Sampling:
    """The sampling an agent's requests carry in one (epoch, trial). An agent's own
    ``seed`` is sent as is in epoch 0, trial 0 and offset after (later epochs and trials
    are new samples, never replays); benchmarks must not override it (τ²-bench's
    orchestrator seeds every agent with the episode seed: our agents keep their own)."""
    if sampling.seed is None or (trial == 0 and epoch == 0):
        return sampling
    return sampling.model_copy(update={
        "seed": sampling.seed + TRIAL_SEED_STRIDE * trial + EPOCH_SEED_STRIDE * epoch})


TRIAL_SEED_STRIDE = 1_000_003
EPOCH_SEED_STRIDE = 7_000_003


def finished_attempts(run_dir: str | Path, stage: str) -> dict[str, tuple[int, str]]:
    """episode_id → (latest attempt, status) for episodes already on disk (a run that
    stopped with thousands of per-episode files left has them merged first, so the view
    does not open each one)."""
    from edv_ray.results.store import compact_stage
    from edv_ray.results.views import connect
    from edv_ray.runtime.batch import COMPACT_EVERY

    compact_stage(run_dir, stage, min_files=COMPACT_EVERY)
    con = connect(run_dir)
    try:
        rows = con.execute(
            "SELECT episode_id, attempt, status FROM episodes WHERE stage = ?", [stage]
        ).fetchall()
    finally:
        con.close()
    return {eid: (att, status) for eid, att, status in rows}


def pending_specs(specs: list[EpisodeSpec], run_dir: str | Path) -> list[EpisodeSpec]:
    """Drop finished episodes; errored ones come back as the next attempt. The run folder
    is read once per stage (not once per spec: that cost ~50 ms an episode)."""
    by_stage = {stage: finished_attempts(run_dir, stage) for stage in {s.stage for s in specs}}
    out = []
    for s in specs:
        prev = by_stage[s.stage].get(s.episode_id)
        if prev is None:
            out.append(s)
        elif prev[1] != "ok":
            out.append(s.model_copy(update={"attempt": prev[0] + 1}))
    return out
