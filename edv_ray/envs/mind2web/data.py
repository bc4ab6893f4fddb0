"""Read the official Mind2Web release from a folder the user gives.

Layout (as distributed by OSU-NLP-Group/Mind2Web)::

    ROOT/train/train_*.json
    ROOT/test_task/test_task_*.json
    ROOT/test_website/test_website_*.json
    ROOT/test_domain/test_domain_*.json
    ROOT/scores_all_data.pkl      # candidate-ranker output (MindAct stage 1)

Each JSON file is an array of task records, checked field by field (a malformed one
is named by file, record and field, a non-UTF-8 byte by line; an annotation_id seen
twice in a split is refused). The pickle maps ``f"{annotation_id}_{action_uid}"`` to
per-candidate scores and 0-based ranks (read by :mod:`.scores`, which runs nothing
from it). Candidates missing from a step's rank table count as outside every top-k;
a step missing from the table altogether means the pickle belongs to other data and
is an error.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from edv_ray.envs.bounded_load import GiB, brief, check_size, depth_over, parse_json
from edv_ray.envs.errors import BenchmarkDataError
from edv_ray.envs.mind2web.scores import SCORES_FILE, RankerScores, load_scores

__all__ = ["SCORES_FILE", "SPLITS", "Mind2WebData", "RankerScores", "Task", "attach_ranks",
           "load_scores", "load_split", "parse_task"]

SPLITS: tuple[str, ...] = ("train", "test_task", "test_website", "test_domain")
OPS = ("CLICK", "TYPE", "SELECT")
MAX_FILE_BYTES = 4 * GiB  # one split file (the release's are a few hundred MB)


class _Raw(BaseModel):
    """The release's record shapes, for checking types (extra fields are ignored)."""
    model_config = ConfigDict(extra="ignore", strict=True)


class RawCandidate(_Raw):
    backend_node_id: str
    tag: str | None = ""
    attributes: str | dict[str, Any] | None = None
    is_original_target: bool | None = False
    is_top_level_target: bool | None = False


class RawOperation(_Raw):
    op: str
    original_op: str | None = None
    value: str | None = ""


class RawAction(_Raw):
    action_uid: str
    cleaned_html: str | None
    operation: RawOperation
    pos_candidates: list[RawCandidate] | None
    neg_candidates: list[RawCandidate] | None


class RawTask(_Raw):
    annotation_id: str
    website: str
    domain: str
    subdomain: str | None = ""
    confirmed_task: str
    action_reprs: list[str]
    actions: list[RawAction] = Field(min_length=1)


def _first_error(err: ValidationError) -> str:
    e = err.errors()[0]
    loc = ".".join(str(p) for p in e["loc"]) or "record"
    got = "" if e["type"] == "missing" else f" (got {type(e['input']).__name__})"
    more = f" (+{err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"{loc}: {e['msg']}{got}{more}"


@dataclass(frozen=True)
class Candidate:
    backend_node_id: str
    tag: str
    attributes: dict[str, Any]
    is_original_target: bool = False
    is_top_level_target: bool = False
    rank: int | None = None  # 0-based ranker rank over pos + neg; None = unranked
    score: float | None = None


@dataclass(frozen=True)
class Step:
    action_uid: str
    op: str  # CLICK | TYPE | SELECT (HOVER / ENTER already mapped to CLICK)
    original_op: str
    value: str
    cleaned_html: str
    pos_candidates: tuple[Candidate, ...]
    neg_candidates: tuple[Candidate, ...]

    @property
    def gold_action(self) -> str:
        """The action string Mind2Web compares: ``"OP"`` for CLICK, else ``"OP value"``."""
        return self.op if self.op == "CLICK" else f"{self.op} {self.value}".strip()


@dataclass(frozen=True)
class Task:
    annotation_id: str
    website: str
    domain: str
    subdomain: str
    confirmed_task: str
    action_reprs: tuple[str, ...]
    steps: tuple[Step, ...]
    split: str = ""
    source_file: str = field(default="", compare=False)

    @property
    def id(self) -> str:
        """The task id every benchmark exposes (Mind2Web's annotation_id)."""
        return self.annotation_id


def _expected_layout(root: Path) -> str:
    files = ", ".join(f"{s}/{s}_*.json" for s in SPLITS)
    return f"expected under {root}: {files} (JSON arrays of task records) and {SCORES_FILE}"


def _attributes(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str) and raw.strip():
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser
            return {}
        return value if isinstance(value, dict) and not depth_over(value) else {}
    return {}


def _candidate(raw: RawCandidate) -> Candidate:
    return Candidate(
        backend_node_id=raw.backend_node_id,
        tag=raw.tag or "",
        attributes=_attributes(raw.attributes),
        is_original_target=bool(raw.is_original_target),
        is_top_level_target=bool(raw.is_top_level_target),
    )


def _step(raw: RawAction, where: str) -> Step:
    name = raw.operation.op.upper()
    if name not in OPS:
        raise BenchmarkDataError(f"{where}: operation.op is {brief(name)}; expected one of "
                                 f"{OPS}")
    return Step(
        action_uid=raw.action_uid,
        op=name,
        original_op=raw.operation.original_op or name,
        value=raw.operation.value or "",
        cleaned_html=raw.cleaned_html or "",
        pos_candidates=tuple(_candidate(c) for c in raw.pos_candidates or ()),
        neg_candidates=tuple(_candidate(c) for c in raw.neg_candidates or ()),
    )


def parse_task(raw: Any, split: str = "", where: str = "<record>") -> Task:
    """One official task record (a dict from the JSON array) → :class:`Task`."""
    if not isinstance(raw, dict):
        raise BenchmarkDataError(f"{where}: a task record must be a JSON object, "
                                 f"got {type(raw).__name__}")
    if isinstance(raw.get("annotation_id"), str):
        where = f"{where} (annotation_id {brief(raw['annotation_id'])})"
    try:
        rec = RawTask.model_validate(raw)
    except ValidationError as err:
        raise BenchmarkDataError(f"{where}: {_first_error(err)}; expected a Mind2Web task "
                                 "record (annotation_id, website, domain, confirmed_task, "
                                 "action_reprs, actions)") from None
    steps = tuple(_step(a, f"{where} action {i}") for i, a in enumerate(rec.actions))
    uids = [s.action_uid for s in steps]
    if len(set(uids)) != len(uids):
        dup = next(u for u in uids if uids.count(u) > 1)
        raise BenchmarkDataError(f"{where}: action_uid {brief(dup)} appears twice in one task")
    if len(rec.action_reprs) != len(steps):
        raise BenchmarkDataError(f"{where}: {len(rec.action_reprs)} action_reprs for "
                                 f"{len(steps)} actions")
    return Task(
        annotation_id=rec.annotation_id, website=rec.website, domain=rec.domain,
        subdomain=rec.subdomain or "", confirmed_task=rec.confirmed_task,
        action_reprs=tuple(rec.action_reprs), steps=steps, split=split, source_file=where,
    )


def split_files(root: str | Path, split: str) -> list[Path]:
    root = Path(root)
    if split not in SPLITS:
        raise BenchmarkDataError(f"unknown Mind2Web split {split!r}; known: {list(SPLITS)}")
    if not root.is_dir():
        raise BenchmarkDataError(f"Mind2Web data folder {root} does not exist; "
                                 + _expected_layout(root))
    files = sorted((root / split).glob(f"{split}_*.json"))
    if not files:
        raise BenchmarkDataError(f"no {split}/{split}_*.json files in {root}; "
                                 + _expected_layout(root))
    return files


def _read_records(path: Path) -> list:
    check_size(path, MAX_FILE_BYTES, "a Mind2Web split file")
    try:
        data = path.read_bytes()
        text = data.decode("utf-8")
    except OSError as err:
        raise BenchmarkDataError(f"{path} cannot be read ({err.strerror or err})") from None
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise BenchmarkDataError(f"{path} line {line}: not UTF-8 (byte 0x{data[err.start]:02x}); "
                                 "Mind2Web files are UTF-8 JSON") from None
    try:
        records = parse_json(text, str(path), "a JSON array of Mind2Web task records")
    except json.JSONDecodeError as err:
        raise BenchmarkDataError(f"{path} line {err.lineno} column {err.colno}: not valid JSON "
                                 f"({err.msg}); expected a JSON array of Mind2Web task "
                                 "records") from None
    if not isinstance(records, list):
        raise BenchmarkDataError(f"{path} must hold a JSON array of task records, "
                                 f"got {type(records).__name__}")
    return records


def load_split(root: str | Path, split: str) -> list[Task]:
    """All tasks of one split, in file order then record order; an annotation_id seen
    twice is refused (the second would otherwise be scored as the first)."""
    tasks: list[Task] = []
    seen: dict[str, str] = {}
    for path in split_files(root, split):
        for i, raw in enumerate(_read_records(path)):
            task = parse_task(raw, split, f"{path} record {i}")
            if task.annotation_id in seen:
                raise BenchmarkDataError(f"{path} record {i}: annotation_id "
                                         f"{brief(task.annotation_id)} appears twice in split "
                                         f"{split} (first: {seen[task.annotation_id]})")
            seen[task.annotation_id] = f"{path.name} record {i}"
            tasks.append(task)
    return tasks


def step_id(task: Task, step: Step) -> str:
    return f"{task.annotation_id}_{step.action_uid}"


def _ranked(cands: Iterable[Candidate], ranks: dict[str, int],
            vals: dict[str, float]) -> tuple[Candidate, ...]:
    return tuple(replace(c, rank=ranks.get(c.backend_node_id), score=vals.get(c.backend_node_id))
                 for c in cands)


def attach_ranks(task: Task, scores: RankerScores, source: str = SCORES_FILE) -> Task:
    """The task with every candidate's rank and score filled in from the ranker table."""
    steps = []
    for step in task.steps:
        sid = step_id(task, step)
        if sid not in scores.ranks:
            raise BenchmarkDataError(f"{source} has no ranks for step {brief(sid)} of task "
                                     f"{brief(task.annotation_id)}; is it the scores file "
                                     "of this data?")
        ranks, vals = scores.ranks[sid], scores.scores.get(sid, {})
        steps.append(replace(step, pos_candidates=_ranked(step.pos_candidates, ranks, vals),
                             neg_candidates=_ranked(step.neg_candidates, ranks, vals)))
    return replace(task, steps=tuple(steps))


class Mind2WebData:
    """The release folder: tasks by split, with ranker ranks attached (lazily, cached)."""

    def __init__(self, root: str | Path, scores_path: str | Path | None = None):
        self.root = Path(root)
        if not self.root.is_dir():
            raise BenchmarkDataError(f"Mind2Web data folder {self.root} does not exist; "
                                     + _expected_layout(self.root))
        self.scores_path = Path(scores_path) if scores_path else self.root / SCORES_FILE
        self._scores: RankerScores | None = None
        self._splits: dict[str, list[Task]] = {}
        self._by_id: dict[str, dict[str, Task]] = {}
        # a worker's episode threads all ask for the split at once: one loads it, the
        # others wait (without the lock 32 threads each parsed 25,000 tasks: 6 GB a worker)
        self._lock = threading.Lock()

    @property
    def scores(self) -> RankerScores:
        if self._scores is None:
            self._scores = load_scores(self.scores_path)
        return self._scores

    def tasks(self, split: str) -> list[Task]:
        got = self._splits.get(split)
        if got is not None:
            return got
        with self._lock:
            if split not in self._splits:
                raw = load_split(self.root, split)
                self._splits[split] = [attach_ranks(t, self.scores, str(self.scores_path))
                                       for t in raw]
            return self._splits[split]

    def task(self, split: str, annotation_id: str) -> Task:
        """One task by id (an index per split, built once: a run of 10⁵ episodes looks up
        tens of thousands of ids)."""
        index = self._by_id.get(split)
        if index is None:
            tasks = self.tasks(split)
            with self._lock:
                index = self._by_id.setdefault(split, {t.annotation_id: t for t in tasks})
        try:
            return index[annotation_id]
        except KeyError:
            raise KeyError(f"no Mind2Web task {annotation_id!r} in split {split}") from None
