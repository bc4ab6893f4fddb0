"""Where a model call goes: :class:`Endpoint` (a served replica or an external endpoint),
live re-routing of a configured URL (:func:`set_api_base_resolver`) and the per-run keys
of self-served engines (:func:`set_served_key`, in memory only). No HTTP client here."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Callable

from edv_ray.llm.calls import LLMCallError

_RESOLVERS: dict[str, Callable[[], str | None]] = {}
_RESOLVERS_LOCK = threading.Lock()


def set_api_base_resolver(api_base: str, resolver: Callable[[], str | None] | None) -> None:
    """Route every call of endpoints configured with ``api_base`` to ``resolver()`` (asked
    once per attempt; ``None`` from it means "use the configured URL"). ``resolver=None``
    removes the route. Process-wide: the episode threads of a worker all see it."""
    with _RESOLVERS_LOCK:
        if resolver is None:
            _RESOLVERS.pop(api_base, None)
        else:
            _RESOLVERS[api_base] = resolver


# ---- keys of self-served engines -------------------------------------------------------
_SERVED_KEYS: dict[str, str] = {}  # first URL of a self-served server → its engine's key


def set_served_key(api_base: str, key: str | None) -> None:
    """The key the self-served engine first at ``api_base`` requires (``None`` removes it).
    Held in this process's memory only: the driver registers it when it starts the
    engines, workers when they fetch it from the run's ``RunState`` actor."""
    with _RESOLVERS_LOCK:
        if key is None:
            _SERVED_KEYS.pop(api_base, None)
        else:
            _SERVED_KEYS[api_base] = key


def served_keys(api_bases) -> dict[str, str]:
    """The registered keys of these first URLs (for handing on to workers)."""
    with _RESOLVERS_LOCK:
        return {u: _SERVED_KEYS[u] for u in api_bases if u in _SERVED_KEYS}


@dataclass(frozen=True)
class Endpoint:
    """How litellm reaches one model (a served replica or an external endpoint)."""

    model_name: str  # the config's model name
    litellm_model: str  # e.g. openai/qwen2.5-coder-0.5b-instruct
    api_base: str | None = None
    api_key_env: str | None = None

    def api_key(self) -> str:
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise LLMCallError(f"environment variable {self.api_key_env} is not set")
            return key
        with _RESOLVERS_LOCK:  # a self-served engine's per-run key (see set_served_key)
            served = _SERVED_KEYS.get(self.api_base or "")
        return served or "sk-edv-local"  # a keyless server still needs some key sent

    def resolve_api_base(self) -> str | None:
        """The URL to use for the next attempt (see :func:`set_api_base_resolver`)."""
        with _RESOLVERS_LOCK:
            fn = _RESOLVERS.get(self.api_base or "")
        live = fn() if fn is not None else None
        return live or self.api_base

