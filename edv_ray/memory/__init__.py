"""Memory layer: experience records, offline embeddings, shared/private banks, retrieval.

Pure Python (numpy, pyarrow, pydantic, sentence-transformers; faiss-cpu optional for
large banks); no Ray, no tau2.
"""

from edv_ray.memory.bank import AddResult, MemoryBank, partition_path
from edv_ray.memory.embeddings import Embedder, EmbeddingModelMissing
from edv_ray.memory.index import DEFAULT_ANN_THRESHOLD, PartitionIndex
from edv_ray.memory.records import (
    BANK_SCHEMA,
    Experience,
    MemoryItem,
    Vote,
    make_item_id,
)
from edv_ray.memory.retrieval import DEFAULT_K, DEFAULT_TAU, Retrieved, retrieve

__all__ = [
    "BANK_SCHEMA",
    "DEFAULT_ANN_THRESHOLD",
    "DEFAULT_K",
    "DEFAULT_TAU",
    "AddResult",
    "Embedder",
    "EmbeddingModelMissing",
    "Experience",
    "MemoryBank",
    "MemoryItem",
    "PartitionIndex",
    "Retrieved",
    "Vote",
    "make_item_id",
    "partition_path",
    "retrieve",
]
