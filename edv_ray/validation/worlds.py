"""The planted worlds of the validation suite: run configs read from
``experiments/validation/worlds/*.yaml`` at a size (``fast`` for CI, ``full`` for the
figures), and the tasks each size selects.

A world file is a run config (``extends:`` works as for ``edv run``) plus a
``validation:`` section the suite reads and removes: ``sizes`` (per size: training and
test tasks per domain, trials), ``exclude`` (per domain, tasks the engine cannot fail —
they would pass whatever was planted) and, for the coverage world, ``agents`` (how many
identical agents, each a repetition; a size's own ``agents`` overrides it).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edv_ray.config import ConfigError, RunConfig, load_config_dict
from edv_ray.config_files import deep_merge, read_yaml

WORLDS_DIR = Path(__file__).resolve().parents[2] / "experiments" / "validation" / "worlds"
SIZES = ("fast", "full")


@dataclass
class World:
    """One planted world at one size: its run config (a dict, ready for
    :func:`edv_ray.config.load_config_dict`) and what the suite reads from it."""

    name: str
    size: str
    config: dict[str, Any]
    meta: dict[str, Any]

    @property
    def run_id(self) -> str:
        return self.config["run_id"]

    @property
    def profile(self) -> dict[str, Any]:
        """The planted profile (the ``simulation:`` section of model ``sim``)."""
        return self.config["models"]["sim"]["simulation"]

    def run_config(self) -> RunConfig:
        return load_config_dict(copy.deepcopy(self.config), source=f"validation world {self.name}")

    def design(self) -> Design:
        """The world's design from its config alone: the tasks of each domain's training
        and test selections (what the run should select) and the trials. A synthetic
        Mind2Web world's "domains" are its task types (the release's website domains)."""
        b = self.config["benchmark"]
        if b["name"] == "mind2web":
            sz = self.meta["sizes"][self.size]
            from edv_ray.simulation.mind2web_release import SPLIT_PREFIX

            train = release_ids(sz["train"], SPLIT_PREFIX["train"])
            test = release_ids(sz["test"], SPLIT_PREFIX["test_task"])
            return Design(list(sz["test"]), dict(sz["train"]), dict(sz["test"]),
                          int(self.config["runtime"]["trials"]), train, test)
        exclude = self.meta.get("exclude", {})
        ds = list(b["domains"])
        train = selected(b["train_task_ids"], ds, b.get("train_split", "train"), exclude)
        test = selected(b["task_ids"], ds, b.get("split", "test"), exclude)
        return Design(ds, {d: len(v) for d, v in train.items()},
                      {d: len(v) for d, v in test.items()}, int(self.config["runtime"]["trials"]),
                      train, test)


@dataclass(frozen=True)
class Design:
    """What a world's config asks for — the planted values' only input besides the
    profile: its domains (one planted task type each, unless the profile maps tasks to
    sub-types: the relevance world), training and test tasks per domain (and their ids),
    trials per test task."""

    domains: list[str]
    n_train: dict[str, int]
    n_test: dict[str, int]
    trials: int
    train_ids: dict[str, list[str]] = field(default_factory=dict)  # per domain
    test_ids: dict[str, list[str]] = field(default_factory=dict)


def declare_identities(cfg: dict[str, Any]) -> None:
    """Every agent its model's profile lists gets, as its planted ``identity``, what its
    run-config entry says its requests carry (prompt strategy, temperature, top_p): the
    engine refuses an acting request naming the agent that differs, so a framework that
    hands one agent another's prompt or sampling errs instead of passing quietly. The
    prompt strategy is declared on τ²-bench only: Mind2Web's multi-choice rounds send no
    tools whatever the strategy."""
    from edv_ray.config import AgentConfig

    tools = cfg.get("benchmark", {}).get("name", "tau2") == "tau2"
    for entry in cfg.get("agents", []):
        a = AgentConfig.model_validate(entry)
        sim = (cfg.get("models", {}).get(a.model) or {}).get("simulation") or {}
        listed = sim.get("agents") or {}
        if a.name in listed:
            listed[a.name] = {**listed[a.name], "identity": {
                "prompt_strategy": a.prompt_strategy if tools else None, "temperature": a.sampling.temperature,
                "top_p": a.sampling.top_p}}


def _split_ids(domain: str, split: str) -> list[str]:
    from edv_ray.config_benchmarks import Tau2Benchmark
    from edv_ray.envs.protocol import get_env

    bench = Tau2Benchmark(domains=[domain])
    return [t.id for t in get_env("tau2").select_tasks(bench, split, None, None)[domain]]


def task_ids(counts: dict[str, int], split: str, exclude: dict[str, list[str]]) -> list[str]:
    """Ids selecting the first ``counts[d]`` tasks of each domain's split (without the
    excluded ones). τ²-bench ids are numbers shared by domains and ``task_ids`` is one
    list, so a domain may also get another domain's id when its split holds it: the
    selection is then a little larger, never different in kind."""
    out: list[str] = []
    for domain, n in counts.items():
        ids = [i for i in _split_ids(domain, split) if i not in set(exclude.get(domain, []))]
        if n > len(ids):
            raise ConfigError(f"validation: {domain}/{split} has {len(ids)} usable tasks, {n} asked")
        out += [i for i in ids[:n] if i not in out]
    return out


def selected(ids: list[str], domains: list[str], split: str,
             exclude: dict[str, list[str]]) -> dict[str, list[str]]:
    """What ``ids`` select per domain (the check that no excluded task slipped in)."""
    got = {d: [i for i in _split_ids(d, split) if i in set(ids)] for d in domains}
    bad = {d: sorted(set(v) & set(exclude.get(d, []))) for d, v in got.items()}
    bad = {d: v for d, v in bad.items() if v}
    if bad:
        raise ConfigError(f"validation: the task ids select excluded tasks {bad}; change the sizes")
    return got


def release_order(counts: dict[str, int]) -> list[str]:
    """A synthetic Mind2Web split's task types in order: round robin over the types while
    each has tasks left (so a stream over the split meets every type throughout)."""
    left, out = dict(counts), []
    while any(left.values()):
        for t in counts:
            if left[t]:
                out.append(t)
                left[t] -= 1
    return out


def release_ids(counts: dict[str, int], prefix: str) -> dict[str, list[str]]:
    """Each type's task ids in a synthetic release written from ``counts``."""
    out: dict[str, list[str]] = {t: [] for t in counts}
    for i, t in enumerate(release_order(counts)):
        out[t].append(f"{prefix}-{i}")
    return out


def _mind2web_release(cfg: dict[str, Any], size: dict[str, Any]) -> dict[str, Any]:
    """A synthetic Mind2Web world's benchmark section: the release its size asks for
    (training and test tasks per type, :mod:`edv_ray.simulation.mind2web_release`), written
    under the output folder unless the same one is there, every task of both splits."""
    import json

    from edv_ray.results.parquet_io import write_text_atomic
    from edv_ray.simulation.mind2web_release import write_release

    spec = {"train": release_order(size["train"]), "test": release_order(size["test"])}
    root = Path(cfg.get("output_dir", "runs")) / "releases" / cfg["run_id"]
    mark = root / "release.json"
    if not mark.is_file() or json.loads(mark.read_text()) != spec:
        write_release(root, spec["train"], spec["test"])
        write_text_atomic(mark, json.dumps(spec))
    bench = {k: v for k, v in cfg["benchmark"].items() if k != "domains"}  # base.yaml's τ²-bench domains
    return {**bench, "data_dir": str(root.resolve()), "split": "test_task",
            "train_split": "train", "task_ids": None, "num_tasks": None,
            "train_task_ids": None, "num_train_tasks": None}


def load_world(name: str, size: str, output_dir: str | Path | None = None,
               worlds_dir: Path = WORLDS_DIR, seed: int | None = None) -> World:
    """World ``name`` at ``size``: its run config with the size's selections, trials and
    run id ``<run_id>-<size>`` under ``output_dir``. ``seed``: another draw of the same
    world (the run's and the engine's seed; run id ``…-s<seed>``). A world on Mind2Web
    (``benchmark: {name: mind2web}``) plays a synthetic release written for its size."""
    if size not in SIZES:
        raise ConfigError(f"validation size {size!r}: one of {', '.join(SIZES)}")
    raw = read_yaml(worlds_dir / f"{name}.yaml")
    meta = raw.pop("validation", {}) or {}
    sizes = meta.get("sizes", {})
    if size not in sizes:
        raise ConfigError(f"validation world {name}: no {size!r} size")
    sz = sizes[size]
    cfg = deep_merge(raw, {
        "run_id": f"{raw['run_id']}-{size}" + (f"-s{seed}" if seed is not None else ""),
        "runtime": {"trials": int(sz.get("trials", 1))},
    })
    if output_dir is not None:
        cfg["output_dir"] = str(output_dir)
    if raw["benchmark"]["name"] == "mind2web":
        cfg["benchmark"] = _mind2web_release(cfg, sz)
    else:
        exclude = meta.get("exclude", {})
        domains = list(sz["test"])  # the size's domains are the run's
        splits = raw["benchmark"].get("train_split", "train"), raw["benchmark"].get("split", "test")
        train = task_ids({d: sz["train"][d] for d in domains}, splits[0], exclude)
        test = task_ids({d: sz["test"][d] for d in domains}, splits[1], exclude)
        selected(train, domains, splits[0], exclude)
        selected(test, domains, splits[1], exclude)
        cfg["benchmark"] = {**cfg["benchmark"], "domains": domains, "task_ids": test, "num_tasks": None,
                            "train_task_ids": train, "num_train_tasks": None}
    if "agents" in meta:  # the coverage world: identical agents a000, a001, … (a size may say how many)
        names = [f"a{i:03d}" for i in range(int(sz.get("agents", meta["agents"])))]
        cfg["agents"] = [{"name": n, "model": "sim", "prompt_strategy": "native_tools"} for n in names]
        cfg["roles"] = {**cfg.get("roles", {}), "executors": names}
    declare_identities(cfg)
    if seed is not None:
        cfg["seed"] = seed
        cfg["models"]["sim"]["simulation"]["seed"] = seed
    world = World(name, size, cfg, meta)
    if (n := world.run_config().runtime.construction_rollouts) != 1:
        raise ConfigError(f"validation world {name}: construction runs {n} rollouts per executor "
                          "and task; the planted values model one (runtime.construction_trials: 1)")
    return world
