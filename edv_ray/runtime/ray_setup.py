"""Starting or joining Ray (one place)."""

from __future__ import annotations

import logging
import os

from edv_ray.config import ConfigError, RuntimeConfig


def check_reachable(address: str, timeout_s: float = 3.0) -> None:
    """A ``host:port`` / ``ray://host:port`` address must accept a TCP connection within
    seconds (Ray itself retries for ~35 s before failing); ``auto`` is left to Ray."""
    import socket

    if address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"ray_address {address!r}: expected auto, HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as err:
        raise ConfigError(f"ray_address {address}: nothing answers there ({err})") from None


def cluster_address(rt: RuntimeConfig) -> str | None:
    """The Ray cluster a run joins (``runtime.ray_address`` or RAY_ADDRESS); None: the run
    starts a private local Ray."""
    return rt.ray_address or os.environ.get("RAY_ADDRESS") or None


def init_ray(rt: RuntimeConfig) -> None:
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    kwargs: dict = dict(include_dashboard=False, ignore_reinit_error=True,
                        logging_level="WARNING", log_to_driver=True)
    address = cluster_address(rt)
    if address:
        check_reachable(address)
        try:
            ray.init(address=address, **kwargs)
        except (ConnectionError, RuntimeError) as err:
            raise ConfigError(f"cannot join the Ray cluster at {address}: {err}") from None
    else:  # a private local Ray (never silently joins another cluster)
        quiet_token_notice()
        ray.init(address="local", num_cpus=rt.num_cpus or max(2, os.cpu_count() or 2),
                 _node_ip_address="127.0.0.1", **kwargs)


class _NotTheTokenNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(
            "Token authentication is enabled for this Ray cluster")


def quiet_token_notice() -> None:
    """Ray 2.60 enables token authentication for a new local Ray and says so on every
    start; the run keeps the protection and drops the notice (the warning that a cluster
    runs *without* authentication stays)."""
    logging.getLogger("ray._private.authentication.authentication_token_setup").addFilter(
        _NotTheTokenNotice())
