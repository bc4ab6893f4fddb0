"""The memory audit's blinding (:mod:`edv_ray.report.memory_audit`): neither the LLM rubric
nor a human rater may learn which method or bank an item came from.

Each sampled item gets an opaque id, ``m-`` + 12 hex digits of an HMAC-SHA256 of its item
id under a random per-run salt (so the id says nothing of the method, the agent or the
bank, and cannot be recomputed without the key); the sample is shuffled with a seeded
RNG (the same seed gives the same order). The key — salt, seed, domain and, per opaque
id, the item id, method, bank and owner — lives apart from the sheet, in
``RUN_DIR/audit/key/audit_key.json``: keep the ``key/`` folder from raters. It is joined
only when scores come back (``edv audit-import``, and the LLM's rows once scored).
A re-audit of the same run keeps the salt, so an item keeps its opaque id.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import secrets
from pathlib import Path


DEFAULT_DOMAIN = "retail"  # the paper's audit domain

KEY_FIELDS = ("item_id", "method", "bank", "owner", "domain")


def key_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / "audit" / "key" / "audit_key.json"


def opaque_id(salt: str, item_id: str) -> str:
    return "m-" + hmac.new(salt.encode(), item_id.encode(), hashlib.sha256).hexdigest()[:12]


def read_key(run_dir: str | Path) -> dict | None:
    """The stored key (None: the run was never audited blind)."""
    path = key_path(run_dir)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data.get("salt"), str) or not isinstance(data.get("items"), list):
            raise ValueError("no salt or items")
    except (OSError, ValueError, AttributeError) as err:
        raise ValueError(f"{path} is damaged ({type(err).__name__}); re-run the memory audit") from None
    return data


def keyed_items(run_dir: str | Path) -> dict[str, dict]:
    """opaque id → {item_id, method, bank, owner, domain} ({} without a key)."""
    key = read_key(run_dir)
    return {} if key is None else {r["audit_id"]: r for r in key["items"]}


def blind(run_dir: str | Path, items: list, seed: int, domain: str | None) -> list:
    """Give every item (``AuditItem``) its opaque ``audit_id``, return them in a seeded
    shuffled order, and write the key."""
    old = read_key(run_dir)
    salt = old["salt"] if old else secrets.token_hex(16)
    ordered = sorted(items, key=lambda i: i.item_id)
    random.Random(f"memory-audit-order|{seed}").shuffle(ordered)
    for it in ordered:
        it.audit_id = opaque_id(salt, it.item_id)
    rows = [{"audit_id": it.audit_id, **{f: getattr(it, f) for f in KEY_FIELDS}} for it in ordered]
    path = key_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    from edv_ray.results.parquet_io import write_text_atomic  # pyarrow: not on `edv --help`

    write_text_atomic(path, json.dumps({"salt": salt, "seed": seed, "domain": domain,
                                        "items": rows}, indent=1))
    return ordered
