"""Damaged Parquet files in a run folder: found, named, and (for episodes) set aside.

A file can be cut short by a full disk or a copy that died (our own writes are atomic,
so a crash never leaves one), or hold a column of the wrong type (``success`` as text,
``trial`` as text: written by another tool). DuckDB then fails on every query of the run
(a cut file: no footer; a mistyped one: a BinderException deep in a view). ``--resume``
moves damaged episode / call files aside (``NAME.damaged``), so their episodes run
again as a new attempt; any other damaged file is one clear error naming it
(:func:`damage_message`, with the resume command quoted for a shell).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from edv_ray.config_files import ConfigError

RERUNNABLE = ("episodes", "llm_calls")  # tables whose files resume can re-create
_DUCKDB_FAMILY = {"boolean": "bool", "varchar": "text", "list": "list", "null": "null"} | {
    t: "number" for t in ("tinyint", "smallint", "integer", "bigint", "hugeint", "utinyint",
                          "usmallint", "uinteger", "ubigint", "uhugeint", "float", "double",
                          "decimal")}
_CHECKED = ("bool", "number", "text", "list")  # other types (structs, times) are not compared


class DamagedTable(ConfigError):
    """A table's files hold a column of another type than its schema (found by
    :func:`check_view_types` when a view is made): ``bad`` names the files."""

    def __init__(self, bad: list[tuple[Path, str]]):
        self.bad = bad
        super().__init__(f"damaged file(s): {_named(bad)} — restore them from a copy of the "
                         "run folder")


def _schemas() -> dict[str, pa.Schema]:
    """The core tables' folders and schemas (those :func:`results.views.connect` reads)."""
    from edv_ray.results import schema as s

    return {"episodes": s.EPISODE_SCHEMA, "llm_calls": s.CALL_SCHEMA, "pool": s.POOL_SCHEMA,
            "routing": s.ROUTING_SCHEMA, "selection": s.SELECTION_SCHEMA,
            "routing_matrix": s.ROUTING_MATRIX_SCHEMA, "uses": s.USES_SCHEMA}


def _family(t: pa.DataType) -> str:
    """What DuckDB can unify: any integer or float is a number, any string is text (a
    file whose column is of another family breaks the views' queries, or is read wrongly)."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    for name, test in (("null", pa.types.is_null), ("bool", pa.types.is_boolean),
                       ("number", lambda x: pa.types.is_integer(x) or pa.types.is_floating(x)),
                       ("text", lambda x: pa.types.is_string(x) or pa.types.is_large_string(x)),
                       ("list", lambda x: pa.types.is_list(x) or pa.types.is_large_list(x))):
        if test(t):
            return name
    return str(t)


def _mistyped(meta: pq.FileMetaData, expected: pa.Schema | None) -> str | None:
    if expected is None:
        return None
    got = meta.schema.to_arrow_schema()
    for field in got:
        want = expected.field(field.name).type if field.name in expected.names else None
        if want is not None and _differ(_family(field.type), _family(want)):
            return f"column {field.name} is {field.type}, expected {want}"
    return None


def _differ(got: str, want: str) -> bool:
    return got in _CHECKED and want in _CHECKED and got != want


def check_view_types(columns: list[str], types: list, schema: pa.Schema,
                     files: list[Path], partition_keys: list[str] = ()) -> None:
    """Raise :class:`DamagedTable` when a view over ``files`` has a column whose DuckDB type
    is of another family than ``schema`` says (one file of the wrong type is enough:
    DuckDB unions it to text). Costs nothing on a sound table; on a bad one the files'
    footers are read to name the culprits. Folder-name columns (``partition_keys``: an
    agent named ``7`` reads as a number) are not files' columns and are not checked."""
    for col, typ in zip(columns, types):
        if col in schema.names and col not in partition_keys and _differ(_DUCKDB_FAMILY.get(typ.id, typ.id),
                                           _family(schema.field(col).type)):
            bad = []
            for f in files:
                try:
                    why = _mistyped(pq.read_metadata(f), schema)
                except Exception as err:  # noqa: BLE001 - unreadable is damage too
                    why = f"unreadable ({type(err).__name__})"
                if why:
                    bad.append((f, why))
            why = f"column {col} is {typ}, expected {schema.field(col).type}"
            raise DamagedTable(bad or [(files[0].parent, why)])


def _named(bad: list[tuple[Path, str]]) -> str:
    more = f" (+{len(bad) - 5} more)" if len(bad) > 5 else ""
    return "; ".join(f"{f} ({why})" for f, why in bad[:5]) + more


def damage(run_dir: str | Path) -> list[tuple[Path, str]]:
    """(file, what is wrong) for each Parquet file of the run DuckDB cannot use: an
    unreadable footer, or a core table's column of another type than its schema."""
    run_dir = Path(run_dir)
    schemas = _schemas()
    bad, seen = [], {}
    for f in sorted(run_dir.rglob("*.parquet")):
        if f.name.startswith("."):
            continue
        try:
            meta = pq.read_metadata(f)
        except Exception as err:  # noqa: BLE001 - any unreadable footer is damage
            bad.append((f, f"unreadable ({type(err).__name__})"))
            continue
        table = f.relative_to(run_dir).parts[0]
        arrow = (meta.metadata or {}).get(b"ARROW:schema")  # files of a table share one:
        key = (table, arrow)  # each schema is checked once
        if arrow is None or key not in seen:
            seen[key] = _mistyped(meta, schemas.get(table))
        why = seen[key]
        if why:
            bad.append((f, why))
    return bad


def find_damaged(run_dir: str | Path) -> list[Path]:
    return [f for f, _ in damage(run_dir)]


def damage_message(run_dir: str | Path, bad: list[tuple[Path, str]]) -> str:
    """One line naming the damaged files, and what to do (a command that works pasted)."""
    from edv_ray.commands import resume_command

    run_dir = Path(run_dir)
    if all(f.is_relative_to(run_dir) and f.relative_to(run_dir).parts[0] in RERUNNABLE
           for f, _ in bad):
        todo = f"`{resume_command(run_dir)}` sets them aside and re-runs their episodes"
    else:
        todo = "restore them from a copy of the run folder"
    return f"damaged file(s) in {run_dir}: {_named(bad)} — {todo}"


def set_aside(run_dir: str | Path) -> tuple[list[Path], list[Path]]:
    """(moved aside, left in place): episode / call files move to ``*.damaged``."""
    run_dir = Path(run_dir)
    moved, other = [], []
    for f in find_damaged(run_dir):
        if f.relative_to(run_dir).parts[0] in RERUNNABLE:
            f.rename(f.with_name(f.name + ".damaged"))
            moved.append(f)
        else:
            other.append(f)
    return moved, other
