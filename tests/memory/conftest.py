"""Fixtures for the memory tests: the real all-MiniLM-L6-v2 model, loaded once per session."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from edv_ray.memory import Embedder, Experience, MemoryBank, MemoryItem


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    emb = Embedder()
    emb.embed(["warm up"])  # load the model once for the whole session
    return emb


@pytest.fixture(scope="session")
def embed_text(embedder: Embedder) -> Callable[[str], list[float]]:
    """Embed one text with the real model, memoised (test texts recur across tests)."""
    cache: dict[str, list[float]] = {}

    def _embed(text: str) -> list[float]:
        if text not in cache:
            cache[text] = embedder.embed_one(text).tolist()
        return cache[text]

    return _embed


def build_item(
    rule: str,
    *,
    title: str = "Experience",
    when_to_use: str = "Always.",
    bank: str = "shared",
    owner: str | None = None,
    tags: list[str] | None = None,
    **provenance: Any,
) -> MemoryItem:
    """A MemoryItem without an embedding (MemoryBank.add embeds such items in one batch)."""
    exp = Experience(title=title, when_to_use=when_to_use, rule=rule, tags=tags or [])
    return MemoryItem.from_experience(exp, bank=bank, owner=owner, **provenance)


@pytest.fixture(scope="session")
def new_item() -> Callable[..., MemoryItem]:
    """build_item as a fixture (test modules do not import conftest)."""
    return build_item


@pytest.fixture(scope="session")
def make_item(embed_text: Callable[[str], list[float]]) -> Callable[..., MemoryItem]:
    """Like build_item, with the real embedding of the item's text filled in."""

    def _make(rule: str, **kwargs: Any) -> MemoryItem:
        item = build_item(rule, **kwargs)
        return item.model_copy(update={"embedding": embed_text(item.text)})

    return _make


@pytest.fixture
def bank(tmp_path, embedder: Embedder) -> MemoryBank:
    return MemoryBank(tmp_path / "memory", embedder=embedder)
