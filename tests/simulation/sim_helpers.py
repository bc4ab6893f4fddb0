"""Shared by the simulated-engine tests: a Simulator behind real HTTP, the framework's own
client, and τ²-bench / stage calls made exactly as the framework makes them."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from edv_ray.agents.binding import ModelBinding
from edv_ray.config import Sampling, Tau2Benchmark
from edv_ray.llm.client import CallContext, CallLedger, Endpoint, LLMClient
from edv_ray.methods.jobkit import RoleBinding, json_caller
from edv_ray.runtime.spec import EpisodeSpec, episode_id
from edv_ray.simulation.server import Simulator, http_server

CLIENT = LLMClient(timeout_s=20, max_retries=0, transport="openai_sdk")


@contextlib.contextmanager
def serving(profile: dict, benchmarks: list[dict] | None = None):
    """(simulator, endpoint) of a simulated server on a free port, stopped afterwards."""
    sim = Simulator(profile, benchmarks or [{"name": "tau2", "domains": ["mock"]}])
    httpd = http_server(sim, "sim")
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield sim, Endpoint("sim", "openai/sim", f"http://127.0.0.1:{httpd.server_address[1]}/v1")
    finally:
        httpd.shutdown()
        httpd.server_close()


def ctx(role: str, agent: str, domain: str = "mock", task_id: str = "t", stage: str = "execute",
        epoch: int = 0, trial: int = 0, eid: str | None = None) -> CallContext:
    return CallContext(run_id="test", stage=stage, role=role, agent=agent, domain=domain,
                       task_id=task_id, trial=trial, epoch=epoch,
                       episode_id=eid or episode_id(stage, epoch, domain, task_id, trial, agent))


def caller(endpoint: Endpoint, call_ctx: CallContext, seed: int | None = None):
    """A strict-JSON caller bound like a stage job's (jobkit.json_caller, schema mode)."""
    binding = RoleBinding(endpoint=endpoint, sampling=Sampling(seed=seed), json_mode="schema")
    return json_caller(CLIENT, binding, call_ctx, CallLedger())


def play_tau2(endpoint: Endpoint, agent: str, task, *, domain: str = "mock", stage: str = "execute",
              epoch: int = 0, trial: int = 0, experiences: list[str] | None = None,
              strategy: str = "native_tools", solo: bool | None = None, seed: int | None = None):
    """One real τ²-bench episode (our agents, τ²-bench's orchestrator and grading)."""
    from edv_ray.envs.tau2.env import ENV
    from edv_ray.envs.tau2.tasks import has_ticket

    solo = has_ticket(task) if solo is None else solo
    spec = EpisodeSpec(run_id="test", stage=stage, method="m", benchmark={}, epoch=epoch,
                       domain=domain, task_id=task.id, task_type=domain, trial=trial,
                       agent=agent, model="sim", prompt_strategy=strategy,
                       sampling=Sampling(seed=seed), agent_endpoint=endpoint, solo=solo,
                       max_steps=100, max_errors=5)

    def bind(role: str) -> ModelBinding:
        return ModelBinding(CLIENT, endpoint, Sampling(seed=seed),
                            ctx(role, agent, domain, task.id, stage, epoch, trial, spec.episode_id),
                            CallLedger(), None)

    exps = list(experiences or [])
    return ENV.run_episode(Tau2Benchmark(domains=[domain]), spec, task, bind("agent"),
                           None if solo else bind("user_sim"),
                           (lambda observed: exps) if exps else None)


def within(k: int, n: int, planted: float) -> bool:
    """The planted rate lies inside the 99.7 % Wilson interval of k successes in n."""
    from edv_ray.report.stats import wilson

    rate = wilson(k, n, confidence=0.997)
    return rate.lo <= planted <= rate.hi


def profile(**kw: Any) -> dict:
    base = {"agents": {a: {"success": {"default": 0.5}} for a in ("a", "b", "c")}}
    base.update(kw)
    return base


def play_file(endpoint: Endpoint, bench: dict, task, agent: str = "a", trial: int = 0,
              experiences: list[str] | None = None):
    """One real Mind2Web / MMTB episode (the benchmark's own play and metrics)."""
    from edv_ray.config import parse_benchmark
    from edv_ray.envs.protocol import get_env

    b = parse_benchmark(bench)
    domain = b.domains[0]
    spec = EpisodeSpec(run_id="test", stage="execute", method="m", benchmark=bench, domain=domain,
                       task_id=task.id, task_type=domain, trial=trial, agent=agent, model="sim",
                       prompt_strategy="text_tools", sampling=Sampling(), agent_endpoint=endpoint,
                       solo=True)
    binding = ModelBinding(CLIENT, endpoint, Sampling(),
                           ctx("agent", agent, domain, task.id, trial=trial, eid=spec.episode_id),
                           CallLedger(), None)
    exps = list(experiences or [])
    return get_env(b.name).run_episode(b, spec, task, binding, None,
                                       (lambda observed: exps) if exps else None)
