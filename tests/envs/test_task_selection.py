"""One task-selection rule for every benchmark (envs/selection.py): an explicit task id
that the selected split does not hold is an error naming it — never skipped — in every
benchmark, for the test and the training selection alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from edv_ray.config import ConfigError
from edv_ray.config_benchmarks import Mind2WebBenchmark, MMTBBenchmark, Tau2Benchmark
from edv_ray.envs.protocol import get_env
from edv_ray.envs.selection import pick_tasks

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def _ids(sel: dict[str, list], id_of=lambda t: t) -> dict[str, list]:
    return {d: [id_of(t) for t in ts] for d, ts in sel.items()}


def test_the_rule_itself():
    tasks = {"a": ["a1", "a2", "a3"], "b": ["b1", "b2"]}
    assert pick_tasks(tasks, str, None, 2, "split 'x'") == {"a": ["a1", "a2"], "b": ["b1", "b2"]}
    # listed ids keep split order; the cap applies per domain after them
    assert pick_tasks(tasks, str, ["a3", "b2", "a1"], 1, "split 'x'") == {"a": ["a1"], "b": ["b2"]}
    # one missing id among found ones is refused, named (never silently skipped)
    with pytest.raises(ConfigError, match=r"task_ids not found in split 'x' \(a, b\): \['zz'\]"):
        pick_tasks(tasks, str, ["a1", "b1", "zz"], None, "split 'x'")
    # an id the cap leaves out is not "not found"
    assert pick_tasks(tasks, str, ["a1", "a2", "b1"], 1, "s") == {"a": ["a1"], "b": ["b1"]}
    # a selected domain left without a task is an error naming the domain
    with pytest.raises(ConfigError, match="no tasks selected in s for b: none of task_ids"):
        pick_tasks(tasks, str, ["a1"], None, "s")
    with pytest.raises(ConfigError, match="for b: the split is empty"):
        pick_tasks({"a": ["a1"], "b": []}, str, None, None, "s")
    many = [f"n{i}" for i in range(25)]
    with pytest.raises(ConfigError, match=r"'n19'\] and 5 more"):
        pick_tasks(tasks, str, many, None, "s")


def _benchmarks():
    tau2 = Tau2Benchmark(domains=["airline", "retail"], split="test", train_split="train")
    yield "tau2", tau2, tau2.split, tau2.train_split
    m2w = Mind2WebBenchmark(name="mind2web", data_dir=str(FIX / "mind2web"))
    yield "mind2web", m2w, m2w.split, m2w.train_split
    mmtb = MMTBBenchmark(name="mmtb", data_dir=str(FIX / "mmtb"))
    yield "mmtb", mmtb, mmtb.split, mmtb.train_split


@pytest.mark.parametrize("name,bench,test_split,train_split", list(_benchmarks()),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_a_missing_id_is_refused_by_name_in_every_benchmark(name, bench, test_split, train_split):
    env = get_env(name)
    for split in (test_split, train_split):
        every = env.select_tasks(bench, split, None, None)
        domain, tasks = next((d, ts) for d, ts in every.items() if ts)
        real = env.select_tasks(bench, split, None, 1)[domain][0]
        real_id = next(i for i in (getattr(real, a, None) for a in ("id", "annotation_id")) if i)
        # alone, or beside an id that exists: refused, and the message names it
        for ids in (["no-such-task-9"], [real_id, "no-such-task-9"]):
            with pytest.raises(ConfigError, match="task_ids not found.*no-such-task-9"):
                env.select_tasks(bench, split, ids, None)
        if len(every) == 1:  # one domain: the real id alone is selected
            got = env.select_tasks(bench, split, [real_id], None)
            assert [getattr(t, "id", None) or t.annotation_id for t in got[domain]] == [real_id]
