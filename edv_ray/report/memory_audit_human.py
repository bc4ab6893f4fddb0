"""People's side of the memory audit (:mod:`edv_ray.report.memory_audit`): filled rating
sheets imported back into ``RUN_DIR/audit/human_scores.parquet``, one row per rater ×
item. Every rating is keyed by its rater — the sheet's ``rater`` column, else
``--rater`` — and a sheet that names no rater is refused (a default such as the file's
name made two people who both returned ``human_rating_sheet.csv`` one rater, and the
second import replaced the first). Importing the same rater again replaces only that
rater's rows; every other rater's are kept, and the summary's agreement uses them all.

The sheet is blind: its ``item_id`` column holds the audit's opaque ids. The key
(``audit/key/audit_key.json``) is joined here, and only here: each imported row gets the
item's real id, method and bank. A run audited before blinding (no key) is imported by
its plain item ids."""

from __future__ import annotations

import csv
import datetime as dt
import re
import unicodedata
from pathlib import Path

from edv_ray.report.memory_audit import (
    CRITERIA,
    HUMAN_SCHEMA,
    HumanScoreError,
    audit_dir,
)
from edv_ray.report.memory_audit_key import keyed_items
from edv_ray.results.parquet_io import read_rows, write_rows_atomic


_SCORE = re.compile(r"[0-5]")
_RATER = re.compile(r"[^\x00-\x1f\x7f-\x9f]{1,64}")


def _is_name(text: str) -> bool:
    """1–64 printable characters: no C0/C1 controls, no bidirectional or other format
    characters (U+202E would reverse how the name reads), no line separators."""
    return bool(_RATER.fullmatch(text)) and not any(
        unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp") for c in text)


def _read_csv(path: Path, encoding: str = "utf-8-sig") -> tuple[list[str], list[dict]]:
    """(header, rows) of a CSV sheet; an unreadable one is one :class:`HumanScoreError`."""
    try:
        with path.open(newline="", encoding=encoding) as f:
            reader = csv.DictReader(f)
            return list(reader.fieldnames or []), list(reader)
    except FileNotFoundError:
        raise HumanScoreError(f"{path}: no such file") from None
    except UnicodeDecodeError as err:
        raise HumanScoreError(f"{path} is not UTF-8 text ({err.reason} at byte {err.start}); "
                              "save the sheet as \"CSV UTF-8\"") from None
    except (csv.Error, OSError) as err:
        raise HumanScoreError(f"{path}: cannot be read as CSV ({err})") from None


def _known_items(run_dir: Path) -> dict[str, dict]:
    """The id a sheet names → the item it stands for: the key's opaque ids (a blind
    audit), else — an audit from before blinding — the plain item ids."""
    try:
        keyed = keyed_items(run_dir)
    except ValueError as err:
        raise HumanScoreError(str(err)) from None
    if keyed:
        return keyed
    known: dict[str, dict] = {}
    sheet = audit_dir(run_dir) / "human_rating_sheet.csv"
    if sheet.is_file():
        known.update({r["item_id"]: r for r in _read_csv(sheet)[1] if r.get("item_id")})
    for r in read_rows(audit_dir(run_dir) / "memory_audit.parquet"):
        known.setdefault(r["item_id"], r)
    return known


def import_human_scores(run_dir: str | Path, csv_path: str | Path, rater: str | None = None) -> int:
    """Import a filled rating sheet into ``audit/human_scores.parquet``. Each rated row's
    rater is its ``rater`` cell, else ``rater``; the raters it names have their earlier
    rows replaced, everyone else's are kept. Cells must be integers 0–5 or empty (not
    rated); item ids must be in the audited sample; a rater rates an item once;
    problems name the spreadsheet row (header = row 1). Any problem:
    :class:`HumanScoreError`, nothing written. Returns the number of rated items imported."""
    run_dir, csv_path = Path(run_dir), Path(csv_path)
    known = _known_items(run_dir)
    if not known:
        raise HumanScoreError(f"{run_dir} has no audit sample: run the memory audit first")
    if rater is not None and not _is_name(rater.strip()):
        raise HumanScoreError(f"--rater {ascii(rater[:40])}: give a name of 1–64 printable characters")
    header, records = _read_csv(csv_path)
    missing = [c for c in ("item_id", *CRITERIA) if c not in header]
    if missing:
        raise HumanScoreError(f"{csv_path}: missing column(s) {', '.join(missing)}")
    errors, rows, seen, unnamed = [], [], set(), []
    for n, rec in enumerate(records, start=2):  # as a spreadsheet numbers rows
        line = f"row {n}"
        item_id = (rec.get("item_id") or "").strip()
        if item_id not in known:
            errors.append(f"{line}: unknown item id {item_id!r} (not in this run's audit sample)")
            continue
        who = (rec.get("rater") or "").strip() or (rater or "").strip()
        if (who, item_id) in seen:
            errors.append(f"{line}: item {item_id!r} is rated twice"
                          + (f" by {who!r}" if who else ""))
            continue
        seen.add((who, item_id))
        scores = {}
        for c in CRITERIA:
            raw = (rec.get(c) or "").strip()
            if raw and not _SCORE.fullmatch(raw):
                errors.append(f"{line}: {c} = {raw!r} is not an integer from 0 to 5")
            scores[c] = int(raw) if _SCORE.fullmatch(raw) else None
        if all(v is None for v in scores.values()):
            continue  # not rated
        if not who:
            unnamed.append(n)
            continue
        if not _is_name(who):
            errors.append(f"{line}: rater {ascii(who[:20])}… is not a name of 1–64 printable characters")
            continue
        k = known[item_id]
        rows.append(dict(audit_id=k.get("audit_id"), item_id=k["item_id"],
                         method=k.get("method"), bank=k.get("bank"),
                         rater=who, **scores, comment=(rec.get("comment") or "").strip() or None))
    if unnamed:
        errors.append(f"row(s) {', '.join(map(str, unnamed[:10]))}: no rater: give --rater NAME "
                      "or fill a rater column (ratings of several people are kept apart by it)")
    if errors:
        shown = "; ".join(errors[:20]) + (f"; … {len(errors) - 20} more" if len(errors) > 20 else "")
        raise HumanScoreError(f"{csv_path}: {len(errors)} problem(s), nothing imported: {shown}")
    now = dt.datetime.now(dt.timezone.utc).isoformat()
    raters = {r["rater"] for r in rows}
    path = audit_dir(run_dir) / "human_scores.parquet"
    kept = [r for r in read_rows(path) if r["rater"] not in raters]
    write_rows_atomic(kept + [{**r, "imported_at": now} for r in rows], path, HUMAN_SCHEMA)
    return len(rows)


def raters_of(run_dir: str | Path) -> list[str]:
    """Every rater with imported scores, sorted."""
    return sorted({r["rater"] for r in read_rows(audit_dir(run_dir) / "human_scores.parquet")})
