"""Embedding as a stage job: a chunk of texts embedded on a run's worker, not in the driver.

The driver holds the memory banks, but embedding what a stage admits is the heaviest CPU
it would spend (MiniLM forwards for every admitted item: most of the driver's CPU in a
10⁵-episode construction). :func:`edv_ray.methods.steps.embed_on_workers` sends the texts
out in chunks of :data:`CHUNK` as these jobs; the bank then only indexes the vectors.
The worker loads the same offline model (:class:`~edv_ray.memory.embeddings.Embedder`),
so the vectors are the ones the driver would have computed — at the job's ``precision``
(EDV's ``item_embedding_precision``: ``auto`` is bfloat16 where the worker's CPU has it
natively, ~1.7× faster;
a chunk's texts always share their batches, so a bfloat16 chunk is reproducible).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

CHUNK = 256  # texts per job: one batched forward pass series, a few hundred KB back


class EmbedJob(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job_id: str
    texts: list[str]
    precision: Literal["auto", "float32", "bfloat16"] = "float32"  # auto: by the worker's CPU
    timeout_s: float = 300.0

    @property
    def handler(self) -> str:
        return "edv_ray.memory.embed_job:run_embed_job"


def run_embed_job(job_json: str, client: Any = None) -> dict[str, Any]:
    """Worker side: the chunk's unit vectors (float32, one row per text, in order)."""
    from edv_ray.memory.embeddings import Embedder, resolve_precision

    job = EmbedJob.model_validate_json(job_json)
    vectors = Embedder(precision=resolve_precision(job.precision)).embed(job.texts)
    return {"job_id": job.job_id, "status": "ok", "vectors": vectors}
