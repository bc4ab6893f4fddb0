"""Shared fixtures: one Ray per test session, a scripted OpenAI-compatible server."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import pytest

from edv_ray.testing.helpers import tau2_tasks


@pytest.fixture(scope="session")
def ray_session():
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
                 logging_level="WARNING")
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def scripted(ray_session):
    """A gold-replaying server over airline, retail and mock tasks (reset per test)."""
    from edv_ray.testing.scripted_server import ScriptedServer

    tasks = {(d, t.id): t for d in ("airline", "retail", "mock") for t in tau2_tasks(d)}
    server = ScriptedServer(tasks).start()
    yield server
    server.stop()


@pytest.fixture
def server(scripted):
    scripted.reset()
    return scripted
