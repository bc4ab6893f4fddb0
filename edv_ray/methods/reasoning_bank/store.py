"""ReasoningBank's memory: one append-only bank per agent (model), keyed by task query.

An *entry* is one learned trajectory (or, with MaTTS, one task's group of rollouts): the
task query the agent observed, its embedding, the episode(s), the agent's own judge
label beside the true reward (so the trap is measurable for RB too), and up to 3 (5 with
MaTTS) items — title, one-sentence description, content. One Parquet file per entry
(``rb/bank/agent=A/epoch=E/<task>.parquet``), written atomically; nothing is ever
merged, pruned or rewritten (the paper's plain append).

Retrieval (:func:`rb_experiences`, run in the episode worker once the agent has observed
its task) embeds the query, finds the k most similar past *task queries* of the agent's
own bank (cosine; never the current task — leave-one-task-out), and returns all their
items.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pyarrow as pa

from edv_ray.runtime.spec import Retrieval

_S = pa.string()
ITEM = pa.struct([("title", _S), ("description", _S), ("content", _S)])
ENTRY_SCHEMA = pa.schema([
    ("entry_id", _S), ("run_id", _S), ("agent", _S), ("domain", _S), ("task_id", _S),
    ("stage", _S), ("query", _S), ("query_embedding", pa.list_(pa.float32())),
    ("episode_ids", pa.list_(_S)), ("judge_labels", pa.list_(_S)),
    ("true_success", pa.list_(pa.bool_())), ("items", pa.list_(ITEM)), ("status", _S),
    ("error", _S), ("picked_episode_id", _S),  # MaTTS parallel: the model's best-of-k
])
JUDGMENT_SCHEMA = pa.schema([
    ("run_id", _S), ("agent", _S), ("domain", _S), ("task_id", _S), ("stage", _S),
    ("episode_id", _S), ("label", _S), ("parse_ok", pa.bool_()), ("reasoning", _S),
    ("true_success", pa.bool_()), ("reward", pa.float64()),
])


def entry_path(run_dir, agent: str, epoch: int, domain: str, task_id: str, stage: str) -> Path:
    from edv_ray.results.store import task_file

    name = task_file(task_id, domain).replace(".parquet", f".{stage}.parquet")
    return Path(run_dir) / "rb" / "bank" / f"agent={agent}" / f"epoch={epoch}" / name


def judgment_path(run_dir, agent: str, epoch: int, domain: str, task_id: str, stage: str) -> Path:
    return entry_path(run_dir, agent, epoch, domain, task_id, stage).parent.parent.parent.parent \
        / "judgments" / f"agent={agent}" / f"epoch={epoch}" / entry_path(
            run_dir, agent, epoch, domain, task_id, stage).name


def render_item(item: dict) -> str:
    return f"### {item['title']}\n{item['description']}\n{item['content']}"


_lock = threading.Lock()
_cache: dict[str, tuple[tuple, list[dict]]] = {}


def load_entries(bank_dir: Path) -> list[dict]:
    """Every entry of one agent's bank (cached per process until a file is added)."""
    import pyarrow.parquet as pq

    files = sorted(bank_dir.rglob("*.parquet")) if bank_dir.is_dir() else []
    sig = tuple((str(p), p.stat().st_size) for p in files)
    with _lock:
        hit = _cache.get(str(bank_dir))
        if hit is None or hit[0] != sig:
            rows = [r for f in files for r in pq.read_table(f).to_pylist()]
            hit = (sig, [r for r in rows if r["items"] and r["query_embedding"]])
            _cache[str(bank_dir)] = hit
        return hit[1]


def top_entries(entries: list[dict], query_vec: np.ndarray, k: int,
                exclude_task_ids: set[str]) -> list[tuple[float, dict]]:
    allowed = [e for e in entries if e["task_id"] not in exclude_task_ids]
    if not allowed or k <= 0:
        return []
    mat = np.asarray([e["query_embedding"] for e in allowed], dtype=np.float32)
    scores = mat @ query_vec
    order = sorted(range(len(allowed)), key=lambda i: (-float(scores[i]), allowed[i]["entry_id"]))
    return [(float(scores[i]), allowed[i]) for i in order[:k]]


def rb_experiences(observed_text: str, params: dict) -> Retrieval:
    from edv_ray.memory import Embedder

    entries = load_entries(Path(params["bank_dir"]))
    if not entries or not observed_text.strip():
        return Retrieval()
    vec = Embedder().embed_one(observed_text)
    hits = top_entries(entries, vec, params["k"], set(params.get("exclude_task_ids") or ()))
    texts, ids = [], []
    for _score, e in hits:
        for i, item in enumerate(e["items"]):
            texts.append(render_item(item))
            ids.append(f"{e['entry_id']}:{i}")
    return Retrieval(texts=texts, item_ids=ids, banks=["rb"] * len(ids))
