"""Record layer: run one episode spec, turn any crash into an error row, write Parquet.

An *error row* (status=error) is an infrastructure failure — server 5xx or garbage
after retries, a timeout, a crash — and is distinct from an agent failure (status=ok,
success=false). Error rows are kept; a retry writes attempt N+1 beside them.

The benchmark is reached through :func:`edv_ray.envs.protocol.get_env`; memory through
the provider named in the spec (``module:function``), resolved here by name so the
runtime never imports a method.
"""

from __future__ import annotations

import functools
import importlib
import json
import time
import traceback
from typing import Any, Callable

from edv_ray.agents.binding import ModelBinding
from edv_ray.llm.client import CallContext, CallLedger, LLMClient
from edv_ray.results.store import RunStore
from edv_ray.runtime.spec import EpisodeSpec, Retrieval


def base_row(spec: EpisodeSpec) -> dict[str, Any]:
    return dict(
        run_id=spec.run_id, method=spec.method, epoch=spec.epoch, domain=spec.domain,
        task_id=spec.task_id, task_type=spec.task_type, trial=spec.trial,
        attempt=spec.attempt, episode_id=spec.episode_id, agent=spec.agent,
        model=spec.model, prompt_strategy=spec.prompt_strategy, user_model=spec.user_model,
        solo=spec.solo, seed=spec.seed, observed_text=None, experiences=[],
        retrieved_item_ids=[], retrieved_banks=[],
        status="error", reward=None, success=None, termination=None, error=None,
        num_messages=0, agent_prompt_tokens=0, agent_completion_tokens=0,
        user_prompt_tokens=0, user_completion_tokens=0, llm_calls=0, wall_s=0.0,
        started_at=time.time(), messages_json=None, reward_json=None,
    )


def error_row(spec: EpisodeSpec, error: str, wall_s: float = 0.0) -> dict[str, Any]:
    row = base_row(spec)
    row.update(error=error[:4000], wall_s=wall_s)
    return row


@functools.lru_cache(maxsize=None)
def resolve_provider(name: str) -> Callable[[str, dict], Retrieval]:
    module, _, func = name.partition(":")
    return getattr(importlib.import_module(module), func)


def _experience_fn(spec: EpisodeSpec, row: dict[str, Any]):
    """The callback the environment calls with the observed text; records what it got."""
    if spec.memory is None:
        return None
    provider = resolve_provider(spec.memory.provider)

    def fetch(observed: str) -> list[str]:
        got = provider(observed, spec.memory.params)
        row.update(experiences=got.texts, retrieved_item_ids=got.item_ids,
                   retrieved_banks=got.banks)
        return got.texts
    return fetch


def run_episode(spec: EpisodeSpec, client: LLMClient, store: RunStore) -> dict[str, Any]:
    """Run, grade and persist one episode; never raises for episode-level failures."""
    from edv_ray.config import parse_benchmark
    from edv_ray.envs.protocol import get_env

    ledger = CallLedger()
    t0 = time.monotonic()
    deadline = t0 + spec.timeout_s
    row = base_row(spec)

    def bind(role: str, endpoint, sampling):
        ctx = CallContext(run_id=spec.run_id, stage=spec.stage, role=role, agent=spec.agent,
                          domain=spec.domain, task_id=spec.task_id, trial=spec.trial,
                          episode_id=spec.episode_id, epoch=spec.epoch)
        return ModelBinding(client, endpoint, sampling, ctx, ledger, deadline)

    try:
        bench = parse_benchmark(spec.benchmark)
        env = get_env(bench.name)
        task = env.task_by_id(bench, spec.domain, spec.task_id, spec.task_split)
        user = (bind("user_sim", spec.user_endpoint, spec.user_sampling)
                if spec.user_endpoint is not None and not spec.solo else None)
        out = env.run_episode(bench, spec, task, bind("agent", spec.agent_endpoint, spec.sampling),
                              user, _experience_fn(spec, row))
        row.update(
            status="ok", reward=out.reward, success=out.success, termination=out.termination,
            num_messages=len(out.messages), observed_text=out.observed_text,
            messages_json=json.dumps(out.messages), reward_json=json.dumps(out.reward_detail),
        )
    except Exception as err:  # noqa: BLE001 - every failure becomes an error row
        tb = traceback.format_exc(limit=6)
        row.update(error=f"{type(err).__name__}: {err}\n{tb}"[:4000])
    row["wall_s"] = time.monotonic() - t0
    row["agent_prompt_tokens"], row["agent_completion_tokens"] = ledger.tokens("agent")
    row["user_prompt_tokens"], row["user_completion_tokens"] = ledger.tokens("user_sim")
    row["llm_calls"] = len(ledger.records)
    calls = ledger.rows()
    for c in calls:
        c.pop("stage", None)
    store.write_episode(spec.stage, row, calls)
    return summary(row)


def summary(row: dict[str, Any]) -> dict[str, Any]:
    """What the driver needs for progress (the trajectory stays on disk)."""
    keys = ("episode_id", "status", "success", "reward", "agent", "domain", "task_id",
            "attempt", "error", "agent_prompt_tokens", "agent_completion_tokens",
            "user_prompt_tokens", "user_completion_tokens", "wall_s", "epoch", "trial")
    return {k: row.get(k) for k in keys}
