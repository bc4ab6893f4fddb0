"""Real-model smoke tests against the embedded llama.cpp server (slow; CI runs them)."""

from __future__ import annotations

import json

import pytest
import yaml

from edv_ray.cli import main
from edv_ray.config import Sampling
from edv_ray.llm.client import CallContext, CallLedger, Endpoint, LLMClient
from edv_ray.results.views import connect

pytestmark = pytest.mark.slow


def regrade(domain: str, task_id: str, termination: str, messages_json: str, solo: bool) -> float:
    """Grade a stored episode again with τ²-bench's own evaluator (offline, EvaluationType.ALL)."""
    from tau2.data_model.simulation import SimulationRun
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    from edv_ray.envs.tau2.tasks import task_by_id

    sim = SimulationRun(id="regrade", task_id=task_id, timestamp="", start_time="", end_time="",
                        duration=0.0, termination_reason=termination,
                        messages=json.loads(messages_json))
    return evaluate_simulation(simulation=sim, task=task_by_id(domain, task_id),
                               evaluation_type=EvaluationType.ALL, solo_mode=solo,
                               domain=domain).reward


@pytest.fixture(scope="module")
def qwen_server(ray_session, tmp_path_factory):
    from edv_ray.runtime.servers import llama_server_actor

    actor = llama_server_actor("qwen/test/0", "qwen", "qwen2.5-coder-0.5b-instruct", "qwen",
                               n_ctx=4096, log_dir=str(tmp_path_factory.mktemp("logs")))
    info = ray_session.get(actor.start.remote())
    yield actor, info
    ray_session.get(actor.stop.remote())
    ray_session.kill(actor)


def test_real_call_through_the_one_client(qwen_server, ray_session):
    actor, info = qwen_server
    assert info.base_url.startswith("http://127.0.0.1:") and ray_session.get(actor.healthy.remote())
    ledger = CallLedger()
    out = LLMClient(timeout_s=120).complete(
        Endpoint("qwen", "openai/qwen", info.base_url),
        [{"role": "user", "content": "Reply with the single word: yes"}],
        ctx=CallContext(run_id="smoke", stage="test", role="agent", agent="qwen"),
        ledger=ledger, sampling=Sampling(max_tokens=8))
    assert out.content and out.prompt_tokens > 5 and out.completion_tokens >= 1
    (rec,) = ledger.records
    assert rec.ok and rec.prompt_tokens == out.prompt_tokens and rec.latency_s > 0


def test_server_stops_cleanly(ray_session):
    from edv_ray.runtime.servers import llama_server_actor

    actor = llama_server_actor("smol/test/0", "smol", "smollm2-135m-instruct", "smol", n_ctx=2048)
    info = ray_session.get(actor.start.remote())
    import os

    ray_session.get(actor.stop.remote())
    with pytest.raises(ProcessLookupError):
        os.kill(info.pid, 0)


def test_edv_run_on_the_embedded_pool(tmp_path, ray_session):
    """One real mock-domain episode per agent, graded by τ²-bench, through `edv run`."""
    cfg = {
        "run_id": "smoke", "output_dir": str(tmp_path), "method": "no_memory",
        "models": {"qwen": {"engine": "llama_cpp", "weights": "qwen2.5-coder-0.5b-instruct",
                            "n_ctx": 4096}},
        "agents": [{"name": "qwen-text", "model": "qwen", "prompt_strategy": "text_tools",
                    "sampling": {"max_tokens": 160}}],
        "benchmark": {"domains": ["mock"], "split": "all", "num_tasks": 1, "solo": "always",
                      "max_steps": 6},
        "runtime": {"concurrency": 1, "episode_timeout_s": 400},
        "wandb": {"mode": "disabled"},
    }
    path = tmp_path / "smoke.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["run", str(path), "--no-progress"]) == 0
    con = connect(tmp_path / "smoke")
    status, reward, success, calls, pt, domain, task_id, term, msgs, solo = con.execute(
        "SELECT status, reward, success, llm_calls, agent_prompt_tokens, domain, task_id, "
        "termination, messages_json, solo FROM episodes").fetchone()
    assert status == "ok" and calls >= 1 and pt > 100
    # the stored reward is what τ²-bench's evaluator gives the stored conversation
    assert reward == pytest.approx(regrade(domain, task_id, term, msgs, solo))
    assert success == (reward >= 1.0 - 1e-6)
    assert (tmp_path / "smoke" / "report" / "pass_at_1.csv").exists()
    assert main(["report", str(tmp_path / "smoke")]) == 0
