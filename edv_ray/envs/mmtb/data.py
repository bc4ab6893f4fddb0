"""Read Multi-Mission Tool Bench (``Multi-Mission-Tool-Bench.jsonl``) into typed records.

One JSONL line = one dialogue of several missions. Fields read (``english_*`` for
language "en", the plain ones for "zh"): ``id``, ``task`` (one string per mission),
``answer_list`` (per mission, the gold nodes ``{idx, action{name, arguments},
observation, dependency_list, user_input?}``), ``messages`` (flat role/content list,
missions separated by a bare string containing "====="), ``tools`` (OpenAI function
schemas), ``task_ids`` (index of the mission's task message inside its segment),
``env_info`` (time string; the part before "星期" is kept), ``type`` (per mission:
单 single, 多 multi, 拒 chat, 反 clarification), ``turn_type``, ``turn_subtypes``.

MMTB ships no train/test split; :func:`select` offers ``all`` and a deterministic
hash split (``train`` / ``test``) so experience learning has disjoint task sets.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edv_ray.envs.errors import BenchmarkDataError

DATA_FILE = "Multi-Mission-Tool-Bench.jsonl"
SEPARATOR = "====="
KINDS = {"单": "single", "多": "multi", "拒": "chat", "反": "clarify"}
PREPARE = "prepare_to_answer"
ASK = "ask_user_for_required_parameters"
SPECIAL = (PREPARE, ASK)
SPLITS = ("all", "train", "test")
_FIELDS = ("id", "task", "answer_list", "messages", "tools", "task_ids", "type")
_ROLE_PREFIXES_EN = ("ai", "ai agent", "user", "ai agent assistant")
_ROLE_PREFIXES_ZH = ("用户", "AI Agent助手", "AI Agent")


@dataclass(frozen=True)
class GoldNode:
    idx: int
    name: str
    arguments: dict[str, Any]
    observation: Any
    dependency_list: tuple[int, ...]
    user_input: str | None = None


@dataclass(frozen=True)
class Mission:
    index: int
    task: str
    type: str  # the benchmark's label: 单 多 拒 反
    kind: str  # single | multi | chat | clarify | unknown
    task_id: int
    nodes: tuple[GoldNode, ...]
    segment: tuple[dict[str, str], ...]  # this mission's gold messages (role prefix removed)
    env_info: str


@dataclass(frozen=True)
class Dialogue:
    id: str
    missions: tuple[Mission, ...]
    tools: list[dict[str, Any]] = field(compare=False)
    turn_type: tuple[bool, ...] = ()
    turn_subtypes: tuple[Any, ...] = ()
    language: str = "en"


def strip_role(content: str, english: bool) -> str:
    """Drop a leading speaker label ("User:", "AI Agent:", "用户：") as the pipeline does."""
    colon = content.find(":" if english else "：")
    if colon != -1:
        head = content[:colon]
        if (head.lower() in _ROLE_PREFIXES_EN) if english else (head in _ROLE_PREFIXES_ZH):
            return content[colon + 1:].strip()
    return content


def split_segments(messages: list[Any]) -> list[list[dict[str, Any]]]:
    segments: list[list[dict[str, Any]]] = [[]]
    for m in messages:
        if isinstance(m, str) and SEPARATOR in m:
            segments.append([])
        else:
            segments[-1].append(m)
    return [s for s in segments if s]


def _node(raw: dict[str, Any], where: str) -> GoldNode:
    try:
        action = raw["action"]
        args = action.get("arguments") or {}
        if isinstance(args, str):
            args = json.loads(args or "{}")
        return GoldNode(idx=int(raw["idx"]), name=str(action["name"]), arguments=dict(args),
                        observation=raw.get("observation"),
                        dependency_list=tuple(int(d) for d in raw.get("dependency_list") or ()),
                        user_input=raw.get("user_input"))
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise BenchmarkDataError(f"{where}: gold node malformed ({err!r}); expected "
                                 "{idx, action{name, arguments}, observation, dependency_list}") from None


def _env_info(raw: Any, n: int, where: str) -> list[str]:
    items = [raw] * n if isinstance(raw, str) else list(raw or [""] * n)
    if len(items) != n:
        raise BenchmarkDataError(f"{where}: env_info has {len(items)} entries for {n} missions")
    return [s[:s.find("星期")].strip() if "星期" in s else str(s).strip() for s in items]


def parse_entry(raw: Any, language: str = "en", where: str = "<entry>") -> Dialogue:
    if not isinstance(raw, dict):
        raise BenchmarkDataError(f"{where}: each line must be a JSON object")
    english = language == "en"
    key = (lambda f: f"english_{f}" if english and f in ("task", "answer_list", "messages",
                                                          "tools") else f)
    missing = [key(f) for f in _FIELDS if key(f) not in raw]
    if missing:
        raise BenchmarkDataError(f"{where}: entry lacks fields {missing}; expected "
                                 f"{[key(f) for f in _FIELDS]} and env_info")
    tasks, answers = raw[key("task")], raw[key("answer_list")]
    segments = split_segments(raw[key("messages")])
    types = list(raw["type"]) if isinstance(raw["type"], (str, list)) else []
    n = len(tasks)
    if not (len(answers) == n == len(segments) == len(raw["task_ids"]) == len(types)):
        raise BenchmarkDataError(
            f"{where}: per-mission lists disagree: {n} tasks, {len(answers)} answer lists, "
            f"{len(segments)} message segments ('{SEPARATOR}'), {len(raw['task_ids'])} task_ids, "
            f"{len(types)} types")
    env = _env_info(raw.get("env_info"), n, where)
    missions = []
    for i in range(n):
        seg = tuple({"role": str(m["role"]), "content": strip_role(str(m.get("content") or ""),
                                                                    english)}
                    for m in segments[i])
        task_id = int(raw["task_ids"][i])
        if not 0 <= task_id < len(seg) or seg[task_id]["role"] != "user":
            raise BenchmarkDataError(f"{where}: mission {i}: task_ids[{i}]={task_id} is not a "
                                     "user message of its segment")
        nodes = tuple(_node(a, f"{where} mission {i}") for a in answers[i])
        missions.append(Mission(index=i, task=str(tasks[i]), type=str(types[i]),
                                kind=KINDS.get(str(types[i]), "unknown"), task_id=task_id,
                                nodes=nodes, segment=seg, env_info=env[i]))
    ident = raw["id"] if isinstance(raw["id"], str) else "".join(map(str, raw["id"]))
    turn_type = tuple(t if isinstance(t, bool) else t == "真" for t in raw.get("turn_type") or ())
    return Dialogue(id=ident, missions=tuple(missions), tools=list(raw[key("tools")]),
                    turn_type=turn_type, turn_subtypes=tuple(raw.get("turn_subtypes") or ()),
                    language=language)


def data_file(path: str | Path) -> Path:
    path = Path(path)
    if path.is_dir():
        path = path / DATA_FILE
    if not path.is_file():
        raise BenchmarkDataError(f"MMTB data file {path} not found; expected {DATA_FILE} "
                                 "(one JSON dialogue per line) in the folder given")
    return path


def load_dialogues(path: str | Path, language: str = "en") -> list[Dialogue]:
    """Every dialogue of the JSONL file (``path`` = the file or its folder)."""
    if language not in ("en", "zh"):
        raise BenchmarkDataError(f"MMTB language must be 'en' or 'zh', not {language!r}")
    file = data_file(path)
    out = []
    with file.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as err:
                raise BenchmarkDataError(f"{file}:{n} is not JSON ({err})") from None
            out.append(parse_entry(raw, language, f"{file}:{n}"))
    if not out:
        raise BenchmarkDataError(f"{file} holds no dialogues; expected one JSON entry per line")
    return out


def in_train(dialogue_id: str, train_fraction: float) -> bool:
    digest = hashlib.sha256(dialogue_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < train_fraction


def select(dialogues: list[Dialogue], split: str, train_fraction: float = 0.5) -> list[Dialogue]:
    """``all``, or the deterministic ``train`` / ``test`` halves (by a hash of the id)."""
    if split not in SPLITS:
        raise BenchmarkDataError(f"unknown MMTB split {split!r}; known: {list(SPLITS)}")
    if split == "all":
        return list(dialogues)
    want = split == "train"
    return [d for d in dialogues if in_train(d.id, train_fraction) == want]
