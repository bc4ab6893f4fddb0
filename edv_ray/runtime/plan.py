"""Build episode specs from the config, and skip what a resumed run already finished.

Seeds: an episode's seed and its agent's sampling seed depend on (trial, agent) and, for
construction stages only, on the epoch (a later construction epoch is a new sample). A
test-time (inference-phase) episode's seeds depend on its trial and agent alone (the run's
seed and the agent's own; the same on every task) — never on the method, stage or epoch —
so every method's test episodes of one (task, trial, agent) share their seeds (No-Memory
and Judge test at epoch 0, EDV, Router and ReasoningBank at their last epoch: seed-paired
all the same). Their episodes still differ by stage and memory.
"""

from __future__ import annotations

from pathlib import Path

from edv_ray.config import RunConfig, Sampling
from edv_ray.runtime.servers import ServedPool
from edv_ray.runtime.spec import EpisodeSpec, MemoryRequest, episode_id


def make_spec(cfg: RunConfig, run_id: str, pool: ServedPool, env, *, stage: str, method: str,
              domain: str, task, trial: int, agent: str, task_type: str, epoch: int = 0,
              memory: MemoryRequest | None = None) -> EpisodeSpec:
    a = cfg.agent(agent)
    seed_epoch = 0 if is_test_stage(method, stage) else epoch  # test seeds: no epoch
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
        sampling=agent_sampling(a.sampling, seed_epoch, trial),
        agent_endpoint=pool.agent_endpoint(cfg, agent, eid),
        user_model=None if solo or us is None else us.model, user_endpoint=user_ep,
        user_sampling=None if us is None else us.sampling, solo=solo,
        seed=episode_seed(cfg.seed, seed_epoch, trial), max_steps=cfg.benchmark.max_steps,
        max_errors=cfg.benchmark.max_errors, timeout_s=cfg.runtime.episode_timeout_s,
        memory=memory,
    )


def is_test_stage(method: str, stage: str) -> bool:
    """Whether ``stage`` is one of ``method``'s inference (test-time) stages, by the
    method's declared ``phases`` (an unlisted stage is inference, as the registry reads
    it; an unregistered method's stages are not: their seeds keep the epoch)."""
    from edv_ray.plugins import INFERENCE, get_method

    try:
        phases = get_method(method).phases
    except KeyError:
        return False
    return phases.get(stage, INFERENCE) == INFERENCE


def episode_seed(run_seed: int, epoch: int, trial: int) -> int:
    """The episode's own seed (the benchmark's randomness, e.g. τ²-bench's orchestrator):
    distinct per trial and construction epoch, so a later epoch is a new sample, not a
    replay (``make_spec`` passes epoch 0 for a test stage)."""
    return run_seed * 1000 + trial + EPOCH_SEED_STRIDE * epoch


def agent_sampling(sampling: Sampling, epoch: int, trial: int) -> Sampling:
    """The sampling an agent's requests carry in one (epoch, trial) (``make_spec`` passes
    epoch 0 for a test stage). An agent's own ``seed`` is sent as is in epoch 0, trial 0
    and offset after (later epochs and trials are new samples, never replays);
    benchmarks must not override it (τ²-bench's
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
    does not open each one). Only the stage's own files are read, as the ``episodes``
    view reads them (not every view of the run: that cost ~2.4 s a call at 10⁴
    episodes)."""
    import duckdb

    from edv_ray.results.schema import EPISODE_SCHEMA
    from edv_ray.results.store import compact_stage
    from edv_ray.results.views import check_hive_safe, register_table
    from edv_ray.runtime.batch import COMPACT_EVERY
    from edv_ray.runtime.compaction import off_driver

    check_hive_safe(run_dir)
    compact_stage(run_dir, stage, min_files=COMPACT_EVERY, merge=off_driver)
    con = duckdb.connect()
    try:
        register_table(con, "attempts", Path(run_dir) / "episodes" / f"stage={stage}",
                       EPISODE_SCHEMA, [])
        rows = con.execute("""
            SELECT episode_id, attempt, status FROM attempts
            QUALIFY row_number() OVER (PARTITION BY episode_id ORDER BY attempt DESC) = 1
        """).fetchall()
    finally:
        con.close()
    return {eid: (att, status) for eid, att, status in rows}


def pending_specs(specs: list[EpisodeSpec], run_dir: str | Path) -> list[EpisodeSpec]:
    """Drop finished episodes; errored ones come back as the next attempt. The run folder
    is read once per stage (not once per spec: that cost ~50 ms an episode). A run whose
    finished test episodes were seeded by the earlier rule (their epoch in the seed) is
    refused (:func:`check_seed_rule`): resuming it would mix two seed rules."""
    by_stage = {stage: finished_attempts(run_dir, stage) for stage in {s.stage for s in specs}}
    check_seed_rule(specs, run_dir, by_stage)
    out = []
    for s in specs:
        prev = by_stage[s.stage].get(s.episode_id)
        if prev is None:
            out.append(s)
        elif prev[1] != "ok":
            out.append(s.model_copy(update={"attempt": prev[0] + 1}))
    return out


def check_seed_rule(specs: list[EpisodeSpec], run_dir: str | Path,
                    finished: dict[str, dict] | None = None) -> None:
    """Refuse (ConfigError, one line) when a finished episode of a test stage at epoch > 0
    carries the seed the earlier rule gave it (``episode_seed`` with its epoch): that run
    started before test seeds were keyed on (task, trial, agent) only, and going on would
    seed its remaining test episodes — and pair its methods — by another rule. Read only
    for such stages (a test stage at epoch 0 is seeded alike by both rules), and only when
    one of their episodes has finished (``finished``: :func:`finished_attempts` per stage,
    read already by the caller) — a fresh stage opens no DuckDB connection."""
    from edv_ray.config import ConfigError
    from edv_ray.results.views import connect

    if finished is None:
        finished = {st: finished_attempts(run_dir, st) for st in {s.stage for s in specs}}
    later = [s for s in specs if s.epoch > 0 and s.seed is not None
             and s.episode_id in finished.get(s.stage, {}) and is_test_stage(s.method, s.stage)]
    if not later:
        return
    con = connect(run_dir)
    try:
        seeds = {}
        for stage in {s.stage for s in later}:
            seeds.update(con.execute("SELECT episode_id, seed FROM episodes WHERE stage = ?",
                                     [stage]).fetchall())
    finally:
        con.close()
    old = [s.episode_id for s in later
           if seeds.get(s.episode_id) == s.seed + EPOCH_SEED_STRIDE * s.epoch]
    if old:
        raise ConfigError(
            f"{run_dir}: {len(old)} finished test episode(s) (e.g. {old[0]}) were seeded by the "
            "earlier rule (the epoch in a test episode's seed); this version seeds every "
            "method's test episodes by (task, trial, agent) only, so resuming would mix two "
            "seed rules — finish the run with the version that started it, or start a new run")
