"""The blinded memory audit (issue 29 item 3) on the two pools a user runs without a
cluster: the simulated engine (a real HTTP server answering the rubric's schema) and the
embedded llama.cpp model (slow). Each scores every sampled item of a run's EDV and
ReasoningBank memory through `edv audit`'s own functions, and the sheet a person gets
stays blind (opaque ids, no method / bank column)."""

from __future__ import annotations

import re

import pytest

from edv_ray.config import Sampling
from edv_ray.llm.client import Endpoint, LLMClient
from edv_ray.report import memory_audit as MA
from edv_ray.results.parquet_io import read_rows
from tests.report.test_audit_blind import make_run
from tests.report.test_memory_audit import read_sheet
from tests.simulation.sim_helpers import serving

OPAQUE = re.compile(r"^m-[0-9a-f]{12}$")


def audited(run, endpoint: Endpoint, per_method: int = 20, **kw) -> list[dict]:
    MA.audit_run(run, endpoint, per_method, 0, client=LLMClient(timeout_s=300, max_retries=1),
                 retries=1, domain="retail", **kw)
    return read_rows(run / "audit" / "memory_audit.parquet")


def assert_blind_sheet(run) -> None:
    sheet = read_sheet(run)
    assert sheet and all(OPAQUE.match(r["item_id"]) for r in sheet)
    assert not {"method", "bank", "owner"} & set(sheet[0])


def test_blind_audit_on_the_simulated_engine(tmp_path):
    run = make_run(tmp_path)
    with serving({"agents": {}}, [{"name": "tau2", "domains": ["retail"]}]) as (_sim, ep):
        rows = audited(run, ep)
    # retail only: 8 EDV items, and RB's servable latest entries (quokka7: r1 epoch 1, r2;
    # ibex42: r1) — every one scored from a schema-valid answer
    assert sorted(r["method"] for r in rows) == ["edv"] * 8 + ["reasoning_bank"] * 4
    assert all(r["parse_ok"] for r in rows), [r["error"] for r in rows if not r["parse_ok"]]
    assert_blind_sheet(run)


@pytest.mark.slow
def test_blind_audit_with_the_embedded_model(tmp_path, ray_session):
    from edv_ray.runtime.servers import llama_server_actor

    run = make_run(tmp_path)
    actor = llama_server_actor("qwen/audit/0", "qwen", "qwen2.5-coder-0.5b-instruct", "qwen",
                               n_ctx=4096, log_dir=str(tmp_path / "logs"))
    info = ray_session.get(actor.start.remote())
    try:
        # two items a method, short answers: the small model on 1-2 CPU threads
        rows = audited(run, Endpoint("qwen", "openai/qwen", info.base_url), per_method=2,
                       sampling=Sampling(temperature=0.0, max_tokens=200), concurrency=1)
    finally:
        ray_session.get(actor.stop.remote())
        ray_session.kill(actor)
    assert sorted(r["method"] for r in rows) == ["edv"] * 2 + ["reasoning_bank"] * 2
    # constrained decoding (the rubric's JSON schema as a grammar): the small model's
    # answers parse; scores are whatever it judged
    assert sum(r["parse_ok"] for r in rows) >= len(rows) // 2, [r["error"] for r in rows]
    assert_blind_sheet(run)
