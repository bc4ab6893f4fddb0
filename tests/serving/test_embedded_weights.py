"""Embedded weights: located in their packages, verified by sha256, clear errors."""

from __future__ import annotations

import dataclasses

import pytest

from edv_ray.serving import embedded
from edv_ray.serving.embedded import EMBEDDED_MODELS, WeightsError, resolve_weights


def test_smollm_is_found_in_its_package():
    path = resolve_weights("smollm2-135m-instruct")
    assert path.suffix == ".gguf" and path.stat().st_size > 50_000_000
    assert path.read_bytes()[:4] == b"GGUF"


def test_qwen_chunks_are_joined_and_verified(tmp_path, monkeypatch):
    monkeypatch.setenv("EDV_CACHE_DIR", str(tmp_path))
    path = resolve_weights("qwen2.5-coder-0.5b-instruct")
    assert path.stat().st_size == 491_400_064 and path.read_bytes()[:4] == b"GGUF"
    assert path.with_suffix(".sha256").read_text() == EMBEDDED_MODELS[
        "qwen2.5-coder-0.5b-instruct"].sha256


def test_checksum_mismatch_refuses_the_weights(tmp_path, monkeypatch):
    monkeypatch.setenv("EDV_CACHE_DIR", str(tmp_path))
    real = EMBEDDED_MODELS["qwen2.5-coder-0.5b-instruct"]
    fake = dataclasses.replace(real, name="tampered", sha256="0" * 64)
    monkeypatch.setitem(EMBEDDED_MODELS, "tampered", fake)
    with pytest.raises(WeightsError, match="sha256 mismatch"):
        resolve_weights("tampered")
    assert not (tmp_path / "tampered.gguf").exists()  # nothing half-written is left


def test_unknown_weights_and_missing_package(monkeypatch):
    with pytest.raises(WeightsError, match="neither an embedded model"):
        resolve_weights("no-such-model")
    ghost = embedded.EmbeddedModel("ghost", "ghost", (("edv-no-such-dist", "x.gguf"),), None, None, "")
    monkeypatch.setitem(EMBEDDED_MODELS, "ghost", ghost)
    with pytest.raises(WeightsError, match="is not installed"):
        resolve_weights("ghost")
