"""Prompt budgets in tokens of a model's context window.

The full policy always goes in; when policy + transcripts do not fit, transcripts are
shortened first (start and end kept); a prompt whose fixed part (instructions + policy)
cannot fit with room for the answer is a :class:`PromptBudgetError` naming the model and
the sizes. Tokens are counted with litellm's offline tokenizer (cl100k; the exact
tokenizer of a self-served model is not at hand) plus a safety margin, so the count is
an estimate that errs on the long side.
"""

from __future__ import annotations

import functools
from typing import Callable

SAFETY = 1.15  # cl100k under-counts some models' tokenizers; keep headroom
TEMPLATE_TOKENS = 64  # chat-template overhead per request


class PromptBudgetError(ValueError):
    """A prompt cannot fit a model's context window (names model and sizes)."""


@functools.lru_cache(maxsize=1)
def _encoder():
    try:
        import tiktoken

        return tiktoken.get_encoding("cl100k_base")
    except Exception:  # noqa: BLE001 - no tokenizer files: fall back to a char estimate
        return None


def count_tokens(text: str) -> int:
    enc = _encoder()
    raw = len(enc.encode(text, disallowed_special=())) if enc is not None else len(text) // 3 + 1
    return int(raw * SAFETY) + 1


def shorten(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    half = max(0, (max_chars - 7) // 2)
    return text[:half] + "\n[...]\n" + text[len(text) - half:]


def fit_prompt(render: Callable[[list[str]], str], parts: list[str], *, n_ctx: int,
               answer_tokens: int, who: str) -> str:
    """``render(parts)`` → the prompt; shorten ``parts`` (transcripts) until it fits
    ``n_ctx`` with ``answer_tokens`` left for the answer."""
    room = n_ctx - answer_tokens - TEMPLATE_TOKENS
    fixed = count_tokens(render(["" for _ in parts]))
    if fixed > room:
        raise PromptBudgetError(
            f"{who}: instructions + policy need ~{fixed} tokens, but n_ctx={n_ctx} leaves "
            f"{room} after {answer_tokens} answer tokens; raise the model's n_ctx or lower "
            "its max_tokens")
    prompt = render(parts)
    for _ in range(6):
        used = count_tokens(prompt)
        if used <= room:
            return prompt
        total = sum(len(p) for p in parts) or 1
        keep = max(0.0, (room - fixed) / max(1, used - fixed)) * 0.95
        parts = [shorten(p, int(len(p) * keep)) for p in parts]
        prompt = render(parts)
        if total == 0:
            break
    return prompt
