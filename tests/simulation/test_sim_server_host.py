"""The simulated engine takes a host like the other engines: on a cluster its supervisor
gives it the node's address (``host=None`` → ``node_address()``), it listens there and
advertises that address, so episode workers on other nodes reach it — with the run's key."""

from __future__ import annotations

import socket

import httpx
import pytest

from edv_ray.serving.vllm_server import SupervisedServer, node_address
from edv_ray.simulation.server import SimulatedServer

KEY = "k-" + "h" * 40


def node_ip() -> str:
    import ray

    return ray.util.get_node_ip_address()  # what node_address() gives on a cluster


def simulated_kwargs(tmp_path, host: str | None) -> dict:
    return {"server_id": "sim/*/0", "model_name": "sim", "served_name": "sim", "profile": {},
            "benchmarks": [], "log_dir": str(tmp_path), "host": host, "api_key": KEY}


def test_on_a_node_address_the_engine_listens_and_advertises_there(tmp_path):
    host = node_ip()
    if host.startswith("127."):
        pytest.skip("this machine has no non-loopback address")
    sup = SupervisedServer(SimulatedServer, simulated_kwargs(tmp_path, host), interval_s=3600)
    try:
        info = sup.info()
        assert info.base_url.startswith(f"http://{host}:") and info.engine == "simulated"
        models = info.base_url + "/models"
        assert httpx.get(models, headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
        assert httpx.get(models).status_code == 401  # the run's key, on any address
        assert sup.server.probe() == "ok"
        with pytest.raises(OSError):  # bound to the node's address, not to every interface
            socket.create_connection(("127.0.0.1", sup.server.port), timeout=2).close()
        assert KEY.encode() not in sup.server.log_path.with_suffix(".spec.json").read_bytes()
    finally:
        sup.stop()


def test_an_unset_host_is_the_supervisors_node_address(tmp_path):
    """``host=None`` (a cluster run): the node's address in Ray, loopback outside it."""
    sup = SupervisedServer(SimulatedServer, simulated_kwargs(tmp_path, None), interval_s=3600)
    try:
        assert sup.info().base_url.startswith(f"http://{node_address()}:")
        assert sup.healthy()
    finally:
        sup.stop()
