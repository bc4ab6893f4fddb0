"""ReasoningBank's memory: one append-only bank per agent (model), keyed by task query.

An *entry* is one learned trajectory (or, with MaTTS, one task's group of rollouts): the
task query the agent observed, its embedding, the episode(s), the agent's own judge
label beside the true reward (so the trap is measurable for RB too), and up to 3 (5 with
MaTTS) items per rollout learned from — title, one-sentence description, content — with
the episode each item was extracted from (``item_episode_ids``, parallel to ``items``;
null for a MaTTS self-contrast item, drawn from all the entry's episodes and for a
contamination twin). One Parquet file per entry
(``rb/bank/agent=A/epoch=E/<task>.parquet``), written atomically; nothing is ever
merged, pruned or rewritten (the paper's plain append).

Retrieval (:func:`rb_experiences`, run in the episode worker once the agent has observed
its task) embeds the query, finds the k most similar *distinct past tasks* of the same
domain in the agent's own bank (cosine over their task queries; never the current task —
leave-one-task-out), and returns all the items of each task's latest entry (the most
similar task's first; at most ``max_injected`` items when set). Each injected item ends
with a request to say, at each step, whether it was used. Entries carry
a sequence number (``seq`` = epoch × SEQ_EPOCH + the task's position in the stream): an
episode sees only entries learned before it (``before_seq``), so a resumed run or an
epoch's evaluation never sees later learning.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pyarrow as pa

from edv_ray.runtime.spec import Retrieval

PKG = "methods/reasoning_bank"  # where its prompt files live

_S = pa.string()
ITEM = pa.struct([("title", _S), ("description", _S), ("content", _S)])
ENTRY_SCHEMA = pa.schema([
    ("entry_id", _S), ("run_id", _S), ("agent", _S), ("domain", _S), ("task_id", _S),
    ("stage", _S), ("query", _S), ("query_embedding", pa.list_(pa.float32())),
    ("episode_ids", pa.list_(_S)), ("judge_labels", pa.list_(_S)),
    ("true_success", pa.list_(pa.bool_())), ("items", pa.list_(ITEM)), ("status", _S),
    ("error", _S), ("picked_episode_id", _S),  # MaTTS parallel: the model's best-of-k
    ("seq", pa.int64()),  # epoch × SEQ_EPOCH + position in the epoch's task stream
    ("item_episode_ids", pa.list_(_S)),  # per item: the rollout it was extracted from
])
SEQ_EPOCH = 10_000_000
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


#: DuckDB SQL for :func:`render_item` over an unnested item struct ``it``
ITEM_TEXT_SQL = "'### ' || it.title || chr(10) || it.description || chr(10) || it.content"


def injected_items(items: list[dict]) -> list[str]:
    """The items as the acting agent reads them (numbered 1.. in its memory block), the
    last one followed once by the request to say at each step whether each item was used
    (once per block, not per item: the request costs every method the same few tokens
    whatever k is)."""
    from edv_ray.prompts import render_prompt

    texts = [render_item(item) for item in items]
    if texts:
        texts[-1] += "\n" + render_prompt(PKG, "rb_item_use.v2", count=len(texts))
    return texts


_lock = threading.Lock()
# per bank folder: (its files' signature, its entries, each file's ((size, mtime), rows))
_cache: dict[str, tuple[tuple, list[dict], dict[str, tuple[tuple[int, int], list[dict]]]]] = {}


def load_entries(bank_dir: Path) -> list[dict]:
    """Every entry of one agent's bank with items (cached per process); ``epoch`` from the
    file's partition folder. When files are added (the training stream writes one a task)
    only the new or changed files are read: re-reading every file on each addition made a
    stream of n tasks read n²/2 files (at 760 tasks a type, ~0.2 tasks/s instead of ~2)."""
    import pyarrow.parquet as pq

    files = sorted(bank_dir.rglob("*.parquet")) if bank_dir.is_dir() else []
    stamps = {str(p): (st.st_size, st.st_mtime_ns) for p in files for st in [p.stat()]}
    sig = tuple(stamps.items())
    with _lock:
        hit = _cache.get(str(bank_dir))
        if hit is not None and hit[0] == sig:
            return hit[1]
        known = hit[2] if hit is not None else {}
        per_file, rows = {}, []
        for f in files:
            got = known.get(str(f))
            if got is None or got[0] != stamps[str(f)]:
                epoch = int(f.parent.name.removeprefix("epoch=")) if f.parent.name.startswith("epoch=") else 0
                got = (stamps[str(f)], [dict(r, epoch=epoch) for r in pq.read_table(f).to_pylist()])
            per_file[str(f)] = got
            rows += got[1]
        entries = [r for r in rows if r["items"] and r["query_embedding"]]
        _cache[str(bank_dir)] = (sig, entries, per_file)
        return entries


def entry_seq(e: dict) -> int:
    return e["seq"] if e.get("seq") is not None else e.get("epoch", 0) * SEQ_EPOCH


def visible(entries: list[dict], domain: str | None, before_seq: int | None,
            exclude: set[tuple[str, str]]) -> list[dict]:
    """The latest entry of each distinct past task an episode may see: same domain,
    learned before ``before_seq``, not an excluded (domain, task)."""
    latest: dict[tuple[str, str], dict] = {}
    for e in entries:
        key = (e["domain"], e["task_id"])
        if (domain is not None and e["domain"] != domain) or key in exclude:
            continue
        if before_seq is not None and entry_seq(e) >= before_seq:
            continue
        if key not in latest or entry_seq(e) > entry_seq(latest[key]):
            latest[key] = e
    return list(latest.values())


def version(entries: list[dict]) -> str:
    """A fingerprint of what an episode can retrieve (its entries and their items)."""
    import hashlib

    keys = sorted(f"{e['entry_id']}:{len(e['items'])}" for e in entries)
    return hashlib.sha1("\n".join(keys).encode()).hexdigest()[:16]


def top_entries(entries: list[dict], query_vec: np.ndarray, k: int) -> list[tuple[float, dict]]:
    """The k most similar of ``entries`` (already one per task); ties → the more recent."""
    if not entries or k <= 0:
        return []
    mat = np.asarray([e["query_embedding"] for e in entries], dtype=np.float32)
    scores = mat @ query_vec
    order = sorted(range(len(entries)),
                   key=lambda i: (-float(scores[i]), -entry_seq(entries[i]), entries[i]["entry_id"]))
    return [(float(scores[i]), entries[i]) for i in order[:k]]


def rb_experiences(observed_text: str, params: dict) -> Retrieval:
    from edv_ray.memory import Embedder

    exclude = {tuple(x) for x in params.get("exclude") or ()}
    entries = visible(load_entries(Path(params["_bank_dir"])), params.get("domain"),
                      params.get("before_seq"), exclude)
    if not entries or not observed_text.strip():
        return Retrieval()
    vec = Embedder().embed_one(observed_text)
    cap = params.get("max_injected")
    items, ids = [], []
    for _score, e in top_entries(entries, vec, params["k"]):
        for i, item in enumerate(e["items"]):
            if cap is not None and len(ids) >= cap:
                break
            items.append(item)
            ids.append(f"{e['entry_id']}:{i}")
    return Retrieval(texts=injected_items(items), item_ids=ids, banks=["rb"] * len(ids))
