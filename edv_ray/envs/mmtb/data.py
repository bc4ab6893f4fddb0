"""Read Multi-Mission Tool Bench (``Multi-Mission-Tool-Bench.jsonl``) into typed records.

One JSONL line = one dialogue of several missions. Fields read (``english_*`` for
language "en", the plain ones for "zh"): ``id`` (a string, or a list of strings joined),
``task`` (one string per mission), ``answer_list`` (per mission, the gold nodes ``{idx,
action{name, arguments}, observation, dependency_list, user_input?}``), ``messages``
(flat role/content list, missions separated by a bare string containing "====="),
``tools`` (OpenAI function schemas), ``task_ids`` (index of the mission's task message
inside its segment), ``env_info`` (time string with "星期"; the part before it is kept),
``type`` (per mission: 单 single, 多 multi, 拒 chat, 反 clarification), ``turn_type``,
``turn_subtypes``.

Every record is checked before use (types, per-mission list lengths, node ``idx`` = its
position, dependencies that exist and form no cycle, unique dialogue ids, UTF-8):
a bad one raises :class:`BenchmarkDataError` naming the file, the line and the field,
in one line. The official reader would drop or misread such records without a word
(e.g. a mission whose env_info lacks "星期" is silently skipped).

MMTB ships no train/test split; :func:`select` offers ``all`` and a deterministic
hash split (``train`` / ``test``) so experience learning has disjoint task sets.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr, ValidationError

from edv_ray.envs.bounded_load import GiB, brief, check_size, depth_over, parse_json
from edv_ray.envs.errors import BenchmarkDataError

DATA_FILE = "Multi-Mission-Tool-Bench.jsonl"
SEPARATOR = "====="
KINDS = {"单": "single", "多": "multi", "拒": "chat", "反": "clarify"}
PREPARE = "prepare_to_answer"
ASK = "ask_user_for_required_parameters"
SPECIAL = (PREPARE, ASK)
SPLITS = ("all", "train", "test")
MAX_FILE_BYTES = 1 * GiB  # the release's file is a few MB
_LOCALIZED = ("task", "answer_list", "messages", "tools")
_UNION_TAG = re.compile(r"^(_[A-Za-z]+|str|int|bool|none|(list|dict)\[.*\])$")  # pydantic loc parts
_REQUIRED = ("id", "task", "answer_list", "messages", "tools", "task_ids", "type", "env_info")
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


# ---- the raw record, as the official code reads it ------------------------------------
class _Raw(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


class _Action(_Raw):
    name: StrictStr
    arguments: Union[dict[str, Any], StrictStr]


class _Node(_Raw):
    idx: StrictInt
    action: _Action
    observation: Any
    dependency_list: list[StrictInt]
    user_input: Any = None


class _Message(_Raw):
    role: StrictStr
    content: StrictStr


class _Parameters(_Raw):
    properties: dict[str, Any] = {}
    required: list[StrictStr] = []


class _Function(_Raw):
    name: StrictStr
    parameters: Union[_Parameters, None] = None


class _Tool(_Raw):
    function: _Function


class _Entry(_Raw):
    id: Union[StrictStr, list[StrictStr]]
    task: list[StrictStr]
    answer_list: list[list[_Node]]
    messages: list[Union[_Message, StrictStr]]
    tools: list[_Tool]
    task_ids: list[StrictInt]
    type: Union[StrictStr, list[StrictStr]]
    env_info: Union[StrictStr, list[StrictStr]]
    turn_type: list[Union[StrictBool, StrictStr]] = []
    turn_subtypes: list[Any] = []


def strip_role(content: str, english: bool) -> str:
    """Drop a leading speaker label ("User:", "AI Agent:", "用户：") as the pipeline does."""
    colon = content.find(":" if english else "：")
    if colon != -1:
        head = content[:colon]
        if (head.lower() in _ROLE_PREFIXES_EN) if english else (head in _ROLE_PREFIXES_ZH):
            return content[colon + 1:].strip()
    return content


def split_segments(messages: list[Any]) -> list[list[Any]]:
    segments: list[list[Any]] = [[]]
    for m in messages:
        if isinstance(m, str) and SEPARATOR in m:
            segments.append([])
        else:
            segments[-1].append(m)
    return [s for s in segments if s]


def _where_field(err: ValidationError, english: bool) -> str:
    first = err.errors()[0]
    loc = [p for p in first["loc"] if not (isinstance(p, str) and _UNION_TAG.match(p))]
    if loc and english and loc[0] in _LOCALIZED:
        loc[0] = f"english_{loc[0]}"
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    got = repr(first.get("input"))
    got = got if len(got) <= 60 else got[:57] + "..."
    return f"field {path or '(record)'}: {first['msg'].lower()} (got {got})"


def _check_graph(nodes: list[_Node], where: str) -> None:
    n = len(nodes)
    if not n:
        raise BenchmarkDataError(f"{where}: no gold nodes (every mission ends with {PREPARE})")
    for pos, node in enumerate(nodes):
        if node.idx != pos:
            raise BenchmarkDataError(f"{where}: node {pos} has idx {brief(node.idx)}; idx must "
                                     "be the node's position (dependencies refer to positions)")
        bad = [d for d in node.dependency_list if not 0 <= d < n]
        if bad:
            more = f", +{len(bad) - 5} more" if len(bad) > 5 else ""
            raise BenchmarkDataError(f"{where}: node {pos} depends on missing nodes "
                                     f"[{', '.join(brief(d) for d in bad[:5])}{more}]")
    state = [0] * n  # 0 new, 1 on the path, 2 done; iterative: a chain of 10⁵ nodes is fine
    for start in range(n):
        if state[start]:
            continue
        state[start] = 1
        path = [(start, iter(nodes[start].dependency_list))]
        while path:
            node, deps = path[-1]
            d = next(deps, None)
            if d is None:
                state[node] = 2
                path.pop()
            elif state[d] == 1:
                raise BenchmarkDataError(f"{where}: dependency cycle through node {d}")
            elif state[d] == 0:
                state[d] = 1
                path.append((d, iter(nodes[d].dependency_list)))


def _gold(node: _Node, where: str) -> GoldNode:
    args = node.action.arguments
    if isinstance(args, str):
        try:
            args = json.loads(args or "{}")
        except (ValueError, RecursionError):  # not JSON, or nested past the parser
            args = None
        if not isinstance(args, dict) or depth_over(args):
            raise BenchmarkDataError(f"{where}: node {node.idx}: arguments is a string that "
                                     "is not a JSON object")
    return GoldNode(idx=node.idx, name=node.action.name, arguments=args,
                    observation=node.observation, dependency_list=tuple(node.dependency_list),
                    user_input=node.user_input)


def _env_info(raw: str | list[str], n: int, where: str) -> list[str]:
    items = [raw] * n if isinstance(raw, str) else list(raw)
    if len(items) != n:
        raise BenchmarkDataError(f"{where}: env_info has {len(items)} entries for {n} missions")
    if not all("星期" in s for s in items):
        raise BenchmarkDataError(f"{where}: env_info must hold a weekday (星期…) after the time, "
                                 "as the official reader requires")
    return [s[:s.find("星期")].strip() for s in items]


def parse_entry(raw: Any, language: str = "en", where: str = "<entry>") -> Dialogue:
    if not isinstance(raw, dict):
        raise BenchmarkDataError(f"{where}: each line must be a JSON object")
    english = language == "en"
    key = {f: (f"english_{f}" if english and f in _LOCALIZED else f) for f in _REQUIRED}
    missing = [key[f] for f in _REQUIRED if key[f] not in raw]
    if missing:
        raise BenchmarkDataError(f"{where}: entry lacks fields {missing}; expected "
                                 f"{list(key.values())}")
    view = {k: v for k, v in raw.items() if k not in _LOCALIZED}
    view.update({f: raw[key[f]] for f in _LOCALIZED})
    try:
        e = _Entry.model_validate(view)
    except ValidationError as err:
        raise BenchmarkDataError(f"{where}: {_where_field(err, english)}") from None
    segments = split_segments(e.messages)
    types = list(e.type)
    n = len(e.task)
    if not (len(e.answer_list) == n == len(segments) == len(e.task_ids) == len(types)):
        raise BenchmarkDataError(
            f"{where}: per-mission lists disagree: {n} tasks, {len(e.answer_list)} answer "
            f"lists, {len(segments)} message segments ('{SEPARATOR}'), {len(e.task_ids)} "
            f"task_ids, {len(types)} types")
    env = _env_info(e.env_info, n, where)
    missions = []
    for i in range(n):
        if any(isinstance(m, str) for m in segments[i]):
            raise BenchmarkDataError(f"{where}: mission {i}: a message is a bare string without "
                                     f"'{SEPARATOR}' (only separators may be strings)")
        roles = [m.role for m in segments[i]]
        if roles != ["user", "assistant"] * (len(roles) // 2) + ["user"] * (len(roles) % 2) \
                or (len(roles) % 2 and i < n - 1):
            shown = ", ".join(brief(r, 40) for r in roles[:8]) + (", …" if len(roles) > 8 else "")
            raise BenchmarkDataError(
                f"{where}: mission {i}: messages must alternate user / assistant from the user "
                f"(and end with the assistant before '{SEPARATOR}'); got roles [{shown}]")
        seg = tuple({"role": m.role, "content": strip_role(m.content, english)}
                    for m in segments[i])
        task_id = e.task_ids[i]
        if not 0 <= task_id < len(seg) or seg[task_id]["role"] != "user":
            raise BenchmarkDataError(f"{where}: mission {i}: task_ids[{i}]={brief(task_id)} is "
                                     "not a user message of its segment")
        _check_graph(e.answer_list[i], f"{where}: mission {i}")
        nodes = tuple(_gold(a, f"{where}: mission {i}") for a in e.answer_list[i])
        missions.append(Mission(index=i, task=e.task[i], type=types[i],
                                kind=KINDS.get(types[i], "unknown"), task_id=task_id,
                                nodes=nodes, segment=seg, env_info=env[i]))
    ident = e.id if isinstance(e.id, str) else "".join(e.id)
    if not ident:
        raise BenchmarkDataError(f"{where}: field id is empty")
    turn_type = tuple(t if isinstance(t, bool) else t == "真" for t in e.turn_type)
    return Dialogue(id=ident, missions=tuple(missions), tools=list(view["tools"]),
                    turn_type=turn_type, turn_subtypes=tuple(e.turn_subtypes),
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
    check_size(file, MAX_FILE_BYTES, "the MMTB data file")
    out: list[Dialogue] = []
    first_line: dict[str, int] = {}
    with file.open("rb") as fh:
        for n, raw_line in enumerate(fh, 1):
            try:
                line = raw_line.decode("utf-8")
            except UnicodeDecodeError as err:
                raise BenchmarkDataError(f"{file}:{n} is not UTF-8 (byte {err.start}: "
                                         f"{raw_line[err.start:err.start + 1]!r})") from None
            if not line.strip():
                continue
            try:
                raw = parse_json(line, f"{file}:{n}", "one JSON dialogue per line")
            except json.JSONDecodeError as err:
                raise BenchmarkDataError(f"{file}:{n} is not JSON ({err})") from None
            dialogue = parse_entry(raw, language, f"{file}:{n}")
            if dialogue.id in first_line:
                raise BenchmarkDataError(f"{file}:{n}: dialogue id {brief(dialogue.id)} is "
                                         f"already used on line {first_line[dialogue.id]}; ids must be "
                                         "unique")
            first_line[dialogue.id] = n
            out.append(dialogue)
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
