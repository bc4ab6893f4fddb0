"""People's side of the memory audit (:mod:`edv_ray.report.memory_audit`): filled rating
sheets imported back into ``RUN_DIR/audit/human_scores.parquet``."""

from __future__ import annotations

import csv
import datetime as dt
import re
from pathlib import Path

from edv_ray.report.memory_audit import (
    CRITERIA,
    HUMAN_SCHEMA,
    HumanScoreError,
    audit_dir,
)
from edv_ray.results.parquet_io import read_rows, write_rows_atomic


_SCORE = re.compile(r"[0-5]")


def _known_items(run_dir: Path) -> dict[str, dict]:
    known: dict[str, dict] = {}
    sheet = audit_dir(run_dir) / "human_rating_sheet.csv"
    if sheet.is_file():
        with sheet.open(newline="", encoding="utf-8") as f:
            known.update({r["item_id"]: r for r in csv.DictReader(f)})
    for r in read_rows(audit_dir(run_dir) / "memory_audit.parquet"):
        known.setdefault(r["item_id"], r)
    return known


def import_human_scores(run_dir: str | Path, csv_path: str | Path, rater: str | None = None) -> int:
    """Import a filled rating sheet into ``audit/human_scores.parquet`` (this rater's
    earlier rows replaced). Cells must be integers 0–5 or empty (not rated); item ids
    must be in the audited sample; problems name the spreadsheet row (header = row 1). Any problem: :class:`HumanScoreError`, nothing written.
    Returns the number of rated items imported."""
    run_dir, csv_path = Path(run_dir), Path(csv_path)
    known = _known_items(run_dir)
    if not known:
        raise HumanScoreError(f"{run_dir} has no audit sample: run the memory audit first")
    rater = rater or csv_path.stem
    errors, rows, seen = [], [], set()
    with csv_path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        missing = [c for c in ("item_id", *CRITERIA) if c not in (reader.fieldnames or [])]
        if missing:
            raise HumanScoreError(f"{csv_path}: missing column(s) {', '.join(missing)}")
        for n, rec in enumerate(reader, start=2):  # as a spreadsheet numbers rows
            line = f"row {n}"
            item_id = (rec.get("item_id") or "").strip()
            if item_id not in known:
                errors.append(f"{line}: unknown item id {item_id!r} (not in this run's audit sample)")
                continue
            if item_id in seen:
                errors.append(f"{line}: item {item_id!r} is rated twice")
                continue
            seen.add(item_id)
            scores = {}
            for c in CRITERIA:
                raw = (rec.get(c) or "").strip()
                if raw and not _SCORE.fullmatch(raw):
                    errors.append(f"{line}: {c} = {raw!r} is not an integer from 0 to 5")
                scores[c] = int(raw) if _SCORE.fullmatch(raw) else None
            if all(v is None for v in scores.values()):
                continue  # not rated
            k = known[item_id]
            rows.append(dict(item_id=item_id, method=k.get("method"), bank=k.get("bank"),
                             rater=(rec.get("rater") or "").strip() or rater, **scores,
                             comment=(rec.get("comment") or "").strip() or None))
    if errors:
        shown = "\n  ".join(errors[:20]) + (f"\n  … {len(errors) - 20} more" if len(errors) > 20 else "")
        raise HumanScoreError(f"{csv_path}: {len(errors)} problem(s), nothing imported:\n  {shown}")
    now = dt.datetime.now(dt.timezone.utc).isoformat()
    raters = {r["rater"] for r in rows} | {rater}
    path = audit_dir(run_dir) / "human_scores.parquet"
    kept = [r for r in read_rows(path) if r["rater"] not in raters]
    write_rows_atomic(kept + [{**r, "imported_at": now} for r in rows], path, HUMAN_SCHEMA)
    return len(rows)
