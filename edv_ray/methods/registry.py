"""The method registry: configs pick a method by name; methods register themselves.

A method is a plug-in (:class:`Method`): a name, its own typed config section (the
top-level config key of the same name), the stages it runs over a ``RunContext``,
optional pool checks, and the DuckDB views it adds — including the rows it contributes
to ``method_results`` (what the method scored on each test task), the one table every
method shares, so runs of any methods can be compared by one query.

The table of methods (names, config sections as ``"module:Class"`` strings, ``BUILTIN``)
and the registry itself live in :mod:`edv_ray.plugins` (base layer); ``register``,
``known_methods``, ``get_method`` and ``BUILTIN`` are re-exported here. Adding a method =
one module (+ its prompts) that calls :func:`register`, its pydantic-only config module,
and its entry in ``plugins.METHODS`` / ``plugins.BUILTIN`` (or any module imported before
the config is loaded).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from pydantic import BaseModel

# the table of methods and the registry live in the base layer (configs validate method
# sections without loading any method); re-exported here, where methods import them
from edv_ray.plugins import BUILTIN, get_method, known_methods, register  # noqa: F401

# the phases a method's stages belong to (Method.phases), defined beside the table
from edv_ray.plugins import AUDIT, CONSTRUCTION, CONTAMINATION, INFERENCE  # noqa: F401
PER_AGENT, PICK = "per_agent", "pick"  # Method.scoring


def episode_results(method: str, stage: str, label: str | None = None) -> str:
    """``results_sql`` for a method scored on its own episodes of ``stage`` (the ones it
    used, ``method_episodes``); a contaminated condition's rows are labelled
    ``<label>+<condition>``."""
    label = label or method
    return f"""SELECT run_id,
                      '{label}' || CASE WHEN condition = '' THEN '' ELSE '+' || condition END AS method,
                      agent, epoch, domain, task_id, trial, status, success, reward, episode_id
               FROM method_episodes WHERE used_by = '{method}' AND stage = '{stage}'"""


class MemoryReader(Protocol):
    """What ``edv view`` hands a method's :class:`MemoryView` functions: reads of one run."""

    def rows(self, sql: str, params=()) -> list[dict]:
        """Rows as dicts (none when the run lacks a view the query reads)."""

    def episodes(self, ids: list[str]) -> dict[str, dict]:
        """Each id's latest attempt: its keys and grade."""

    def task_runs(self, stage: str, epoch: int, domain: str, task_id: str,
                  agents: list[str]) -> list[str]:
        """The ids of a task's runs in ``stage`` and ``epoch`` by those agents."""


@dataclass(frozen=True)
class MemoryView:
    """What ``edv view`` shows of a method's memory (``view/`` names no method: it lists and
    explains every registered method's items through these)."""

    # (views the run has, name) → SQL of its items, the columns of
    # edv_ray/view/sql.py ITEM_COLUMNS; None: the run has none
    items_sql: Callable[[set, str], str | None]
    # (reader, the item's row, name) → its provenance: ``sources`` (episode ids, in order),
    # ``source_roles`` ({episode id: role}), ``notes`` (sentences); optionally the
    # ``decisions`` on it (rows with ``item_ids``) and its verifiers' ``votes`` (rows)
    provenance: Callable[[MemoryReader, dict, str], dict] | None = None
    # (reader, an episode's row, name) → the stage jobs that used the episode as evidence:
    # dicts with ``cls`` (a CSS class), ``text`` and ``item_ids`` (items it led to, linked)
    evidence: Callable[[MemoryReader, dict, str], list[dict]] | None = None


@dataclass(frozen=True)
class Method:
    name: str
    config_cls: type[BaseModel]
    run: Callable[[Any, Any], None]  # (RunContext, section) → None
    # SQL over the run's views giving method_results rows for this method:
    # run_id, method, agent, epoch, domain, task_id, trial, status, success, reward, episode_id
    results_sql: str
    # stage → construction | inference (token accounting); stages not listed: inference
    phases: dict[str, str] = field(default_factory=dict)
    check: Callable[[Any, Any], None] | None = None  # (RunConfig, section) → raise ValueError
    add_views: Callable[[Any, Any], None] | None = None  # (duckdb con, run_dir) → None
    uses_train: bool = True  # reads the training selection (construction / matrix)
    # SQL giving (method, bank, items): experiences the method admitted to memory
    admitted_sql: str | None = None
    has_memory: bool = False  # supports contamination / memory_from
    memory_dir: str | None = None  # memory_from: the source run's folder this method reads
    summary: str = ""
    # (section) → where the method learns from the benchmark's reward (graded outcomes):
    # a tuple of parts, e.g. ("distill", "verify", "routing"); () = it never reads one
    # (self-judged labels, a judge's pick and no memory are not the benchmark's reward)
    reward_use: Callable[[Any], tuple[str, ...]] = field(default=lambda section: ())
    # The facts the reports read (``report/`` names no method; it asks these):
    # how method_results rows are scored — PER_AGENT (each agent × task × trial; the
    # tables break it out per model) or PICK (one row per (task, trial), whichever agent)
    scoring: str = "per_agent"
    # rank as the comparison baseline (0 = preferred); None = never the baseline
    baseline: int | None = None
    # where its rows sit in every table (lower first; ties by name); paired comparisons
    # are later − earlier
    report_order: int = 100
    # validity checks it contributes: (duckdb con, run_dir, section, name) → rows (dicts
    # with name, ok, figure[, detail, method]); run for each of its instances in a run
    validity_checks: tuple[Callable[[Any, Any, Any, str], list[dict]], ...] = ()
    # (run_dir, section | None, name) → its memory items for the memory audit: dicts with
    # item_id, bank, owner, domain, text, source_task_ids, source_episode_ids[, task_text]
    audit_items: Callable[[Any, Any, str], list[dict]] | None = None
    # (views the run has, name) → SQL of its experiences for the W&B ``experiences`` table
    # (report/wandb_tables.py EXPERIENCE_COLUMNS less the retrieval ones); None: none
    experience_sql: Callable[[set, str], str | None] | None = None
    # tables it adds to the run report: (table, title, SQL of its rows, ORDER BY of the
    # table); a table several methods add (each EDV instance) is their union
    report_tables: tuple[tuple[str, str, str, str], ...] = ()
    # the view of its verifiers' votes (columns approve, is_poison, supporting_all_failed):
    # ``edv compare``'s approve rates; None = it has no votes
    votes_view: str | None = None
    # stage roles that judge runs from transcripts (the evidence check holds them to a
    # minimum share of what they were shown)
    judging_roles: tuple[str, ...] = ()
    # its memory in ``edv view`` (items, provenance, episodes used as evidence); None: none
    memory_view: MemoryView | None = None

    def __post_init__(self):
        if self.scoring not in (PER_AGENT, PICK):
            raise ValueError(f"method {self.name!r}: scoring must be {PER_AGENT!r} or {PICK!r}, "
                             f"not {self.scoring!r}")


def reward_use(cfg, name: str) -> str:
    """Where method ``name`` of run config ``cfg`` learns from the benchmark's reward, as
    the report prints it (``none`` when it never reads one)."""
    parts = get_method(name).reward_use(cfg.section(name))
    return ", ".join(parts) if parts else "none"

