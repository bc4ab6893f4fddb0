"""Read the official Mind2Web release from a folder the user gives.

Layout (as distributed by OSU-NLP-Group/Mind2Web)::

    ROOT/train/train_*.json
    ROOT/test_task/test_task_*.json
    ROOT/test_website/test_website_*.json
    ROOT/test_domain/test_domain_*.json
    ROOT/scores_all_data.pkl      # candidate-ranker output (MindAct stage 1)

Each JSON file is an array of task records; the pickle maps
``f"{annotation_id}_{action_uid}"`` to per-candidate scores and 0-based ranks.
Candidates missing from a step's rank table count as outside every top-k; a
step missing from the table altogether means the pickle belongs to other data
and is an error. The pickle is the user's own file: it is unpickled as-is.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from edv_ray.envs.errors import BenchmarkDataError

SPLITS: tuple[str, ...] = ("train", "test_task", "test_website", "test_domain")
SCORES_FILE = "scores_all_data.pkl"
OPS = ("CLICK", "TYPE", "SELECT")
_TASK_FIELDS = ("annotation_id", "website", "domain", "confirmed_task", "action_reprs", "actions")
_STEP_FIELDS = ("action_uid", "cleaned_html", "operation", "pos_candidates", "neg_candidates")


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
        except json.JSONDecodeError:
            return {}
        return value if isinstance(value, dict) else {}
    return {}


def _candidate(raw: dict[str, Any]) -> Candidate:
    return Candidate(
        backend_node_id=str(raw["backend_node_id"]),
        tag=str(raw.get("tag", "")),
        attributes=_attributes(raw.get("attributes")),
        is_original_target=bool(raw.get("is_original_target", False)),
        is_top_level_target=bool(raw.get("is_top_level_target", False)),
    )


def _step(raw: dict[str, Any], where: str) -> Step:
    missing = [f for f in _STEP_FIELDS if f not in raw]
    if missing:
        raise BenchmarkDataError(f"{where}: action record lacks fields {missing}; "
                                 f"expected {list(_STEP_FIELDS)}")
    op = raw["operation"] or {}
    name = str(op.get("op", "")).upper()
    if name not in OPS:
        raise BenchmarkDataError(f"{where}: operation.op is {name!r}; expected one of {OPS}")
    return Step(
        action_uid=str(raw["action_uid"]),
        op=name,
        original_op=str(op.get("original_op", name)),
        value=str(op.get("value", "") or ""),
        cleaned_html=str(raw["cleaned_html"] or ""),
        pos_candidates=tuple(_candidate(c) for c in raw["pos_candidates"] or ()),
        neg_candidates=tuple(_candidate(c) for c in raw["neg_candidates"] or ()),
    )


def parse_task(raw: Any, split: str = "", where: str = "<record>") -> Task:
    """One official task record (a dict from the JSON array) → :class:`Task`."""
    if not isinstance(raw, dict):
        raise BenchmarkDataError(f"{where}: a task record must be a JSON object")
    missing = [f for f in _TASK_FIELDS if f not in raw]
    if missing:
        raise BenchmarkDataError(f"{where}: task record lacks fields {missing}; "
                                 f"expected {list(_TASK_FIELDS)}")
    try:
        steps = tuple(_step(a, f"{where} action {i}") for i, a in enumerate(raw["actions"]))
    except (KeyError, TypeError, AttributeError) as err:
        raise BenchmarkDataError(f"{where}: malformed action or candidate ({err!r}); expected "
                                 "candidates with backend_node_id, tag, attributes") from None
    reprs = tuple(str(r) for r in raw["action_reprs"])
    if len(reprs) != len(steps):
        raise BenchmarkDataError(f"{where}: {len(reprs)} action_reprs for {len(steps)} actions")
    return Task(
        annotation_id=str(raw["annotation_id"]), website=str(raw["website"]),
        domain=str(raw["domain"]), subdomain=str(raw.get("subdomain", "")),
        confirmed_task=str(raw["confirmed_task"]), action_reprs=reprs, steps=steps,
        split=split, source_file=where,
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


def load_split(root: str | Path, split: str) -> list[Task]:
    """All tasks of one split, in file order then record order."""
    tasks: list[Task] = []
    for path in split_files(root, split):
        try:
            records = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise BenchmarkDataError(f"{path} is not readable JSON ({err}); expected a JSON "
                                     "array of Mind2Web task records") from None
        if not isinstance(records, list):
            raise BenchmarkDataError(f"{path} must hold a JSON array of task records")
        tasks += [parse_task(r, split, f"{path}[{i}]") for i, r in enumerate(records)]
    return tasks


@dataclass(frozen=True)
class RankerScores:
    scores: dict[str, dict[str, float]]
    ranks: dict[str, dict[str, int]]


def load_scores(path: str | Path) -> RankerScores:
    path = Path(path)
    if not path.is_file():
        raise BenchmarkDataError(
            f"candidate-ranker scores file {path} not found; expected {SCORES_FILE} = "
            '{"scores": {sid: {backend_node_id: float}}, "ranks": {sid: {backend_node_id: int}}}')
    try:
        with path.open("rb") as fh:
            data = pickle.load(fh)
    except Exception as err:  # noqa: BLE001 - any unpickling failure is a data error
        raise BenchmarkDataError(f"{path} is not a readable pickle ({err!r}); expected "
                                 f"{SCORES_FILE} from the Mind2Web release") from None
    if not (isinstance(data, dict) and isinstance(data.get("ranks"), dict)
            and isinstance(data.get("scores", {}), dict)):
        raise BenchmarkDataError(f"{path} must be a dict with keys 'scores' and 'ranks' "
                                 "({sid: {backend_node_id: value}})")
    ranks = {str(s): {str(k): int(v) for k, v in m.items()} for s, m in data["ranks"].items()}
    scores = {str(s): {str(k): float(v) for k, v in m.items()}
              for s, m in data.get("scores", {}).items()}
    return RankerScores(scores=scores, ranks=ranks)


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
            raise BenchmarkDataError(f"{source} has no ranks for step {sid!r} of task "
                                     f"{task.annotation_id}; is it the scores file of this data?")
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

    @property
    def scores(self) -> RankerScores:
        if self._scores is None:
            self._scores = load_scores(self.scores_path)
        return self._scores

    def tasks(self, split: str) -> list[Task]:
        if split not in self._splits:
            raw = load_split(self.root, split)
            self._splits[split] = [attach_ranks(t, self.scores, str(self.scores_path))
                                   for t in raw]
        return self._splits[split]

    def task(self, split: str, annotation_id: str) -> Task:
        for t in self.tasks(split):
            if t.annotation_id == annotation_id:
                return t
        raise KeyError(f"no Mind2Web task {annotation_id!r} in split {split}")
