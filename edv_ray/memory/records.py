"""Typed memory records and the one Parquet schema of a bank table.

``Lesson`` is the one schema of a lesson, whoever writes it — EDV's distiller
(``DistilledExperience``), the contamination writer (``TwinAnswer``), ReasoningBank's
extractor (its item names the same three parts title / description / content) — with
one set of bounds (:data:`LESSON_BOUNDS`), which the prompts asking for lessons state
(:func:`lesson_bounds_text`). ``Experience`` is a lesson as a bank keeps it (with tags);
``MemoryItem`` is an experience admitted to a bank, with its embedding and provenance.
``BANK_SCHEMA`` is the only place the on-disk layout of a bank table is defined.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
from typing import Annotated, Any, Literal

import pyarrow as pa
from pydantic import (BaseModel, ConfigDict, Field, StringConstraints, field_validator,
                      model_validator)

Bank = Literal["shared", "private"]
BANKS: tuple[str, ...] = ("shared", "private")

# Same rule as agent names in edv_ray.config: owners become path segments (owner=<name>).
_OWNER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_WS_RE = re.compile(r"\s+")
_EDGE_PUNCT = " \t\n.,;:!?\"'`()[]{}-*"

#: A lesson's three parts and their (min, max) characters, edge whitespace stripped first.
LESSON_BOUNDS: dict[str, tuple[int, int]] = {
    "title": (3, 200),  # a short name
    "when_to_use": (3, 600),  # the situation it applies to (ReasoningBank: description)
    "rule": (8, 2000),  # what to do (ReasoningBank: content)
}


def _bounded(part: str) -> Any:
    low, high = LESSON_BOUNDS[part]
    return Annotated[str, StringConstraints(strip_whitespace=True, min_length=low, max_length=high)]


LessonTitle = _bounded("title")
LessonWhenToUse = _bounded("when_to_use")
LessonRule = _bounded("rule")


def lesson_bounds_text(title: str = "title", when_to_use: str = "when_to_use",
                       rule: str = "rule") -> str:
    """The bounds as a prompt states them, under the names that prompt's answer uses."""
    names = {"title": title, "when_to_use": when_to_use, "rule": rule}
    return "; ".join(f'"{names[part]}" {low}–{high} characters'
                     for part, (low, high) in LESSON_BOUNDS.items())


def normalise_text(text: str) -> str:
    """Casefold, collapse whitespace and strip edge punctuation (the exact-duplicate key)."""
    return _WS_RE.sub(" ", text.casefold()).strip(_EDGE_PUNCT)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Lesson(_Strict):
    """One lesson: a title, when to use it, the rule (bounds: :data:`LESSON_BOUNDS`)."""

    title: LessonTitle
    when_to_use: LessonWhenToUse
    rule: LessonRule


class Experience(Lesson):
    """A lesson as a bank keeps it, with its tags (duplicates dropped, order kept)."""

    tags: list[str] = Field(default_factory=list)

    @field_validator("tags")
    @classmethod
    def _clean_tags(cls, v: list[str]) -> list[str]:
        return _union([], [t.strip() for t in v if t.strip()])

    def render(self) -> str:
        """The text injected into an agent's system prompt (and embedded for search)."""
        lines = [f"### {self.title}", f"When to use: {self.when_to_use}", f"Rule: {self.rule}"]
        if self.tags:
            lines.append(f"Tags: {', '.join(self.tags)}")
        return "\n".join(lines)


def lesson_text_sql(alias: str) -> str:
    """DuckDB SQL for the text :meth:`Experience.render` gives a lesson (without tags), over
    the ``title`` / ``when_to_use`` / ``rule`` columns of table alias ``alias``."""
    return (f"'### ' || {alias}.title || chr(10) || 'When to use: ' || {alias}.when_to_use"
            f" || chr(10) || 'Rule: ' || {alias}.rule")


class Vote(_Strict):
    """One verifier's vote on one candidate."""

    verifier: str
    approve: bool
    rationale: str = ""


def make_item_id(
    bank: str,
    owner: str | None,
    experience: Experience,
    source_task_ids: list[str],
    epoch: int,
    domain: str | None = None,
) -> str:
    """Stable id: the same candidate from the same task/epoch/bank/domain hashes alike.

    A resumed run that re-derives an item therefore re-derives its id, and
    :meth:`MemoryBank.add` can skip it.
    """
    key = json.dumps(
        [
            bank,
            owner,
            domain,
            normalise_text(experience.title),
            normalise_text(experience.rule),
            sorted(source_task_ids),
            epoch,
        ],
        ensure_ascii=False,
    )
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:24]


class MemoryItem(_Strict):
    """An experience stored in the shared bank or one agent's private bank."""

    item_id: str = ""
    bank: Bank
    owner: str | None = None
    title: str
    when_to_use: str
    rule: str
    tags: list[str] = Field(default_factory=list)
    text: str = ""
    embedding: list[float] = Field(default_factory=list)
    # provenance
    domain: str | None = None
    source_task_ids: list[str] = Field(default_factory=list)
    epoch: int = 0
    supporting_trajectory_ids: list[str] = Field(default_factory=list)
    rejected_trajectory_ids: list[str] = Field(default_factory=list)
    distiller: str | None = None
    votes: list[Vote] = Field(default_factory=list)
    method: str = "edv"
    created_at: _dt.datetime = Field(
        default_factory=lambda: _dt.datetime.now(_dt.timezone.utc)
    )
    merged_count: int = Field(0, ge=0)
    merged_item_ids: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> MemoryItem:
        if self.bank == "shared" and self.owner is not None:
            raise ValueError("shared items have no owner (owner must be None)")
        if self.bank == "private":
            if self.owner is None:
                raise ValueError("private items need an owner (the agent name)")
            if not _OWNER_RE.fullmatch(self.owner):
                raise ValueError(f"owner {self.owner!r} is not a valid agent name")
        # the lesson's bounds, as every writer of a lesson is held to them
        exp = Experience(
            title=self.title, when_to_use=self.when_to_use, rule=self.rule, tags=self.tags
        )
        self.title, self.when_to_use, self.rule, self.tags = (
            exp.title,
            exp.when_to_use,
            exp.rule,
            exp.tags,
        )
        if not self.text:
            self.text = exp.render()
        if not self.item_id:
            self.item_id = make_item_id(
                self.bank, self.owner, exp, self.source_task_ids, self.epoch, self.domain
            )
        if self.created_at.tzinfo is None:
            self.created_at = self.created_at.replace(tzinfo=_dt.timezone.utc)
        return self

    @classmethod
    def from_experience(
        cls, experience: Experience, *, bank: Bank, owner: str | None = None, **provenance: Any
    ) -> MemoryItem:
        """Build an item from a candidate; ``provenance`` takes any other field."""
        return cls(bank=bank, owner=owner, **experience.model_dump(), **provenance)

    @property
    def experience(self) -> Experience:
        return Experience(
            title=self.title, when_to_use=self.when_to_use, rule=self.rule, tags=self.tags
        )

    @property
    def exact_key(self) -> str:
        """Items with equal keys (same bank/owner) are exact duplicates."""
        return normalise_text(self.rule)

    def render(self) -> str:
        return self.experience.render()

    def to_row(self) -> dict[str, Any]:
        return self.model_dump(mode="python")

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> MemoryItem:
        return cls.model_validate(row)


def _union(a: list[Any], b: list[Any]) -> list[Any]:
    """Ordered union (first occurrence wins)."""
    out = list(a)
    for x in b:
        if x not in out:
            out.append(x)
    return out


def merge_items(keep: MemoryItem, other: MemoryItem) -> MemoryItem:
    """``keep`` absorbs ``other``: text and embedding stay; provenance is the union."""
    return keep.model_copy(
        update={
            "tags": _union(keep.tags, other.tags),
            "source_task_ids": _union(keep.source_task_ids, other.source_task_ids),
            "supporting_trajectory_ids": _union(
                keep.supporting_trajectory_ids, other.supporting_trajectory_ids
            ),
            "rejected_trajectory_ids": _union(
                keep.rejected_trajectory_ids, other.rejected_trajectory_ids
            ),
            "votes": _union(keep.votes, other.votes),
            "merged_count": keep.merged_count + other.merged_count + 1,
            "merged_item_ids": _union(
                keep.merged_item_ids, [other.item_id, *other.merged_item_ids]
            ),
        }
    )


_STR_LIST = pa.list_(pa.string())

#: The one schema of a bank table (every partition file has exactly these columns).
BANK_SCHEMA = pa.schema(
    [
        pa.field("item_id", pa.string(), nullable=False),
        pa.field("bank", pa.string(), nullable=False),
        pa.field("owner", pa.string()),
        pa.field("title", pa.string(), nullable=False),
        pa.field("when_to_use", pa.string(), nullable=False),
        pa.field("rule", pa.string(), nullable=False),
        pa.field("tags", _STR_LIST),
        pa.field("text", pa.string(), nullable=False),
        pa.field("embedding", pa.list_(pa.float32())),
        pa.field("domain", pa.string()),
        pa.field("source_task_ids", _STR_LIST),
        pa.field("epoch", pa.int32()),
        pa.field("supporting_trajectory_ids", _STR_LIST),
        pa.field("rejected_trajectory_ids", _STR_LIST),
        pa.field("distiller", pa.string()),
        pa.field(
            "votes",
            pa.list_(
                pa.struct(
                    [
                        pa.field("verifier", pa.string()),
                        pa.field("approve", pa.bool_()),
                        pa.field("rationale", pa.string()),
                    ]
                )
            ),
        ),
        pa.field("method", pa.string()),
        pa.field("created_at", pa.timestamp("us", tz="UTC")),
        pa.field("merged_count", pa.int32()),
        pa.field("merged_item_ids", _STR_LIST),
    ]
)

if set(BANK_SCHEMA.names) != set(MemoryItem.model_fields):  # pragma: no cover - import-time guard
    raise RuntimeError("BANK_SCHEMA drifted from MemoryItem fields")
