"""A model with two replicas, one lost: the run's RunState sends the lost one's calls to
the other replica, the driver's watch says so once (and that the model goes on with one
of two), and stopping the pool does not wait for the dead server. Real supervised server
actors running the vLLM command line, with the CPU stand-in engine."""

from __future__ import annotations

import time

from edv_ray.runtime.actors import RunState
from edv_ray.runtime.cluster_view import ServerWatch
from edv_ray.runtime.servers import ServedPool
from edv_ray.serving.replicas import StickyReplicaPicker
from edv_ray.serving.vllm_server import vllm_server_actor
from edv_ray.testing.vllm_standin import launcher


def test_a_lost_replica_fails_over_and_is_announced(ray_session, tmp_path):
    ray = ray_session
    engine = str(launcher(tmp_path))
    actors = [vllm_server_actor(f"m/*/{i}", "m", "some/model", served_name="m",
                                log_dir=str(tmp_path), python=engine, num_gpus=0,
                                ready_timeout_s=120)
              for i in range(2)]
    infos = ray.get([a.start.remote() for a in actors])
    pool = ServedPool(pickers={("m", "*"): StickyReplicaPicker.from_infos(infos)}, served={"m": "m"},
                      infos=list(infos), actors=list(actors),
                      actor_by_url={i.base_url: a for i, a in zip(infos, actors)})
    url0, url1 = (i.base_url for i in infos)
    assert pool.fallbacks() == {url0: [url1], url1: [url0]}
    state = RunState.remote({}, pool.actor_by_url, pool.fallbacks())
    said: list[str] = []
    watch = ServerWatch(pool, tmp_path, said.append)
    try:
        assert ray.get(state.current_url.remote(url0)) == url0
        watch.check()
        assert said == []
        ray.kill(actors[0], no_restart=True)  # its node is gone, say
        assert ray.get(state.current_url.remote(url0)) == url1  # calls go to the other
        assert ray.get(state.current_url.remote(url1)) == url1
        watch.check()
        watch.check()  # said once, not on every check
        assert len(said) == 1 and "server m/*/0 is unreachable" in said[0]
        assert "m goes on with 1 of 2 replica(s)" in said[0]
        t0 = time.monotonic()
    finally:
        pool.stop()
        ray.kill(state)
    assert time.monotonic() - t0 < 30  # the dead server was not waited for
