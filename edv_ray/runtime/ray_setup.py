"""Starting or joining Ray (one place)."""

from __future__ import annotations

import os

from edv_ray.config import RuntimeConfig


def init_ray(rt: RuntimeConfig) -> None:
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    kwargs: dict = dict(include_dashboard=False, ignore_reinit_error=True,
                        logging_level="WARNING", log_to_driver=True)
    address = rt.ray_address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, **kwargs)
    else:  # a private local Ray on loopback (never silently joins another cluster)
        ray.init(address="local", num_cpus=rt.num_cpus or max(2, os.cpu_count() or 2),
                 _node_ip_address="127.0.0.1", **kwargs)
