"""What a construction stage admits is embedded on the run's workers, not in the driver:
the vectors are the ones the driver's own model gives, items that carry one keep it, the
order holds across chunks, and the driver never loads the model to get them."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from rich.console import Console

from edv_ray.config import load_config_dict
from edv_ray.memory import MemoryItem, embed_job, embeddings
from edv_ray.methods.steps import embed_on_workers
from edv_ray.runtime.batch import EpisodeRunner
from edv_ray.testing.helpers import scripted_config


def _item(n: int, embedding: list[float] | None = None) -> MemoryItem:
    return MemoryItem(bank="shared", title=f"Lesson {n} on refunds",
                      when_to_use=f"when a customer asks about case {n}",
                      rule=f"Check the booking class before quoting fee number {n}.",
                      domain="airline", source_task_ids=[str(n)], embedding=embedding or [])


def _ctx(tmp_path, console: Console) -> SimpleNamespace:
    """What embed_on_workers reads of a run: a real 2-worker runner and a console."""
    cfg = load_config_dict(scripted_config("http://127.0.0.1:9/v1", tmp_path,
                                           runtime={"concurrency": 4, "workers": 2}))
    return SimpleNamespace(runner=EpisodeRunner(cfg, str(tmp_path / "run")),
                           console=console, show_progress=False)


@pytest.mark.slow
def test_items_are_embedded_on_the_workers_in_order(ray_session, tmp_path, monkeypatch):
    ctx = _ctx(tmp_path, Console(quiet=True))
    monkeypatch.setattr(embed_job, "CHUNK", 3)  # 7 texts → 3 jobs over 2 workers
    kept = [0.0] * 383 + [1.0]
    items = [_item(n) for n in range(4)] + [_item(4, kept)] + [_item(n) for n in range(5, 8)]
    monkeypatch.setattr(embeddings, "_MODELS", {})  # the driver has no model loaded ...
    out = embed_on_workers(ctx, items, "embed")
    assert not embeddings._MODELS  # ... and loaded none to get the vectors
    assert [i.item_id for i in out] == [i.item_id for i in items]
    assert out[4].embedding == kept
    got = np.array([out[n].embedding for n in range(8) if n != 4], dtype=np.float32)
    want = embeddings.Embedder().embed([items[n].text for n in range(8) if n != 4])
    assert got.shape == want.shape == (7, 384)
    assert np.allclose(got, want, atol=1e-5)
    assert len({tuple(np.round(v, 4)) for v in got}) == 7  # each text its own vector
    assert embed_on_workers(ctx, out, "embed") == out  # nothing missing: no job sent


class _HalfFailing(embed_job.EmbedJob):
    """Odd chunks name a handler the worker cannot resolve: a job that fails there."""

    @property
    def handler(self) -> str:
        n = int(self.job_id.rsplit(":", 1)[1])
        return super().handler if n % 2 == 0 else "edv_ray.memory.embed_job:no_such_handler"


@pytest.mark.slow
def test_a_failed_chunk_is_embedded_by_the_bank_and_loses_nothing(ray_session, tmp_path,
                                                                   monkeypatch):
    from edv_ray.memory import MemoryBank

    lines = Console(record=True, width=200)
    ctx = _ctx(tmp_path, lines)
    monkeypatch.setattr(embed_job, "CHUNK", 3)  # chunks 0, 1, 2: chunk 1 fails
    monkeypatch.setattr(embed_job, "EmbedJob", _HalfFailing)
    items = [_item(n) for n in range(8)]
    out = embed_on_workers(ctx, items, "embed")
    assert [i.item_id for i in out] == [i.item_id for i in items]
    assert [bool(i.embedding) for i in out] == [True] * 3 + [False] * 3 + [True] * 2
    assert "embed: embed:1 failed; the driver embeds its 3 text(s)" in lines.export_text()
    bank = MemoryBank(str(tmp_path / "bank"), dedup_threshold=1.0)  # no near-dup merge
    res = bank.add(out)
    assert len(res.added) == 8  # nothing lost: the bank embedded the failed chunk's items
    want = embeddings.Embedder().embed([i.text for i in items])
    got = np.array([bank.get(i.item_id).embedding for i in items], dtype=np.float32)
    assert np.allclose(got, want, atol=1e-5)


@pytest.mark.slow
def test_each_distinct_text_is_embedded_once(ray_session, tmp_path):
    """An item approved by two verifiers sits in both their private banks: its text is
    sent to the workers once and both copies get its vector."""
    ctx = _ctx(tmp_path, Console(quiet=True))
    sent: list[list[str]] = []
    run_jobs = ctx.runner.run_jobs

    def recording(jobs, **kw):
        sent.extend(j.texts for j in jobs)
        return run_jobs(jobs, **kw)

    ctx.runner.run_jobs = recording
    base = [_item(n) for n in range(3)]
    copies = [MemoryItem(bank="private", owner=owner, title=base[1].title,
                         when_to_use=base[1].when_to_use, rule=base[1].rule, domain="airline",
                         source_task_ids=["1"]) for owner in ("a", "b")]
    out = embed_on_workers(ctx, base + copies, "embed")
    texts = [t for chunk in sent for t in chunk]
    assert sorted(texts) == sorted(i.text for i in base)  # three texts, not five
    assert copies[0].text == base[1].text
    assert out[3].embedding == out[4].embedding == out[1].embedding
    assert len({i.item_id for i in out}) == 5 and all(i.embedding for i in out)


@pytest.mark.slow
def test_a_bfloat16_stage_embeds_as_a_bfloat16_chunk_on_the_driver_would(ray_session, tmp_path):
    """The precision reaches the workers: their vectors are the bfloat16 pass over the same
    chunk (reproducible), close to but not the float32 ones."""
    ctx = _ctx(tmp_path, Console(quiet=True))
    items = [_item(n) for n in range(6)]
    out = embed_on_workers(ctx, items, "embed", "bfloat16")
    got = np.array([i.embedding for i in out], dtype=np.float32)
    texts = [i.text for i in items]
    assert np.allclose(got, embeddings.Embedder(precision="bfloat16").embed(texts), atol=1e-6)
    fp32 = embeddings.Embedder().embed(texts)
    assert not np.allclose(got, fp32, atol=1e-5)
    assert (got * fp32).sum(axis=1).min() > 0.9999
