"""Ray actors: threaded episode runners (server actors: serving.vllm_server.SupervisedServer).

Episodes wait on HTTP, not CPU: a runner is one process (τ²-bench and litellm imported
once) running many episodes in threads (``max_concurrency``), not a process per episode.
Actors reserve no CPUs (``num_cpus=0``): on a 2-core laptop the model servers use the
cores, and Ray's CPU accounting would otherwise cap concurrency at 2.
"""

from __future__ import annotations

import ray


@ray.remote(num_cpus=0)
class SecretHolder:
    """API keys held in memory for the run's workers (see EpisodeRunner)."""

    def __init__(self, env: dict[str, str]) -> None:
        self._env = dict(env)

    def get(self) -> dict[str, str]:
        return dict(self._env)


@ray.remote(num_cpus=0, max_restarts=-1)
class EpisodeWorker:
    def __init__(self, run_dir: str, timeout_s: float, max_retries: int,
                 secrets=None) -> None:
        import os

        from edv_ray.envs.tau2.episode import quiet_tau2_logs
        from edv_ray.llm.client import LLMClient
        from edv_ray.results.store import RunStore

        if secrets is not None:  # the SecretHolder's name — see EpisodeRunner
            os.environ.update(ray.get(ray.get_actor(secrets).get.remote()))
        quiet_tau2_logs()
        self._client = LLMClient(timeout_s=timeout_s, max_retries=max_retries)
        self._store = RunStore(run_dir)

    def ready(self) -> bool:
        return True

    def run(self, spec_json: str) -> dict:
        from edv_ray.runtime.episode import run_episode
        from edv_ray.runtime.spec import EpisodeSpec

        return run_episode(EpisodeSpec.model_validate_json(spec_json), self._client, self._store)

    def run_job(self, handler: str, job_json: str) -> dict:
        """A method's stage job (e.g. distill / verify one task): ``handler`` names the
        method's function as ``module:function`` (``(job_json, client) -> summary``); it
        is resolved by name, so the runtime imports no method."""
        from edv_ray.runtime.episode import resolve_provider

        return resolve_provider(handler)(job_json, self._client)
