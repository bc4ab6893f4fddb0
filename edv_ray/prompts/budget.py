"""Prompt budgets in tokens of a model's context window, and the rule that shortens evidence.

The fixed part of a stage prompt (instructions, the full policy, the task) always goes in
whole; the evidence (the runs' transcripts) goes in whole whenever it fits: nothing is
cut before the budget. A prompt whose fixed part cannot fit with room for the answer is
a :class:`PromptBudgetError` naming the model and the sizes.

When the evidence does not fit, the **evidence rule** shortens it:

1. *longest first* — one cap C (characters) is found so that the transcripts, each cut
   to at most C, fit; a transcript shorter than C stays whole;
2. *final state whole* — a transcript cut to C keeps, whole, its final state: from its
   last tool-call message (its calls and their results) to its end, or its last two
   lines when it has no tool line. Of the text before the final state it keeps
   the head (a third of the room: the task as stated) and the part just before the
   final state (two thirds); the middle is replaced by a visible marker
   ``[… M chars elided …]``;
3. only when the final states alone cannot fit is a final state cut (its end kept), and
   the prompt says so in its record (``final_kept=False``; the run's validity check fails);
4. a prompt the measured shortening did not bring within the budget is shortened
   further (the evidence budget halved, down to nothing); one that still does not fit
   is returned *flagged* (``fits=False``, and ``final_kept=False`` in its record: the
   server may cut or refuse it, so no final state is known to reach the model — the
   ``evidence_kept`` validity check fails for it).

Every fitted prompt is a :class:`FittedPrompt`: the text plus its :class:`Evidence`
(characters kept / total, final states kept), which the stage jobs record with each
model call (:mod:`edv_ray.methods.jobkit`). Tokens are counted with tiktoken's cl100k
(the exact tokenizer of a self-served model is not at hand) times a safety margin, so
the count errs on the long side.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

SAFETY = 1.15  # cl100k under-counts some models' tokenizers; keep headroom
TEMPLATE_TOKENS = 64  # chat-template overhead per request
FIT_ROUNDS = 8  # re-measure after each shortening (markers and tokenization drift)

# lines that start a tool call / a tool's output in the benchmarks' renderings
# (τ²-bench: "assistant calls f(...)" / "tool result: ..."; MMTB: "[assistant→tools] ..."
# / "[tool] ...")
CALL_LINE = re.compile(r"^(?:\w+ calls \w+\(|\[assistant→tools\])")
RESULT_LINE = re.compile(r"^(?:tool result\b|\[tool\])")


class PromptBudgetError(ValueError):
    """A prompt cannot fit a model's context window (names model and sizes)."""


@dataclass(frozen=True)
class Evidence:
    """What a prompt kept of its evidence: characters (markers not counted)."""

    chars: int  # the transcripts, whole
    kept: int  # what the prompt holds of them
    final_kept: bool  # every transcript's final state is whole (and the prompt fits)
    fits: bool = True  # False: over the budget after every shortening (rule 4)

    @property
    def share(self) -> float:
        return self.kept / self.chars if self.chars else 1.0


class FittedPrompt(str):
    """A prompt text carrying the :class:`Evidence` it kept (``.evidence``)."""

    evidence: Evidence

    def __new__(cls, text: str, evidence: Evidence) -> FittedPrompt:
        obj = super().__new__(cls, text)
        obj.evidence = evidence
        return obj


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


def final_state_start(lines: list[str]) -> int:
    """Index of the first line of a transcript's final state (rule 2): the last tool-call
    lines and the results that follow them, or the last two lines without any."""
    tool = [i for i, ln in enumerate(lines) if CALL_LINE.match(ln) or RESULT_LINE.match(ln)]
    if not tool:
        return max(0, len(lines) - 2)
    i = tool[-1]
    while i > 0 and RESULT_LINE.match(lines[i]) and RESULT_LINE.match(lines[i - 1]):
        i -= 1
    if RESULT_LINE.match(lines[i]) and i > 0 and CALL_LINE.match(lines[i - 1]):
        i -= 1
    while i > 0 and CALL_LINE.match(lines[i - 1]):
        i -= 1
    return i


def final_state_chars(text: str) -> int:
    lines = text.split("\n")
    return len("\n".join(lines[final_state_start(lines):]))


def _marker(chars: int) -> str:
    return f"[… {chars} chars elided …]"


def elide_middle(text: str, max_chars: int) -> tuple[str, int]:
    """``text`` cut to about ``max_chars`` by rule 2: (new text, characters kept). The
    final state stays whole (even when it alone is longer than ``max_chars``); of what
    precedes it, the head keeps a third of the room and the text just before the final
    state the other two thirds."""
    if len(text) <= max_chars:
        return text, len(text)
    lines = text.split("\n")
    start = final_state_start(lines)
    body, final = "\n".join(lines[:start]), "\n".join(lines[start:])
    room = max(0, max_chars - len(final) - 2)
    head = room // 3
    before = room - head
    if len(body) <= room:
        return text, len(text)
    elided = len(body) - head - before
    parts = [body[:head], _marker(elided), body[len(body) - before:] if before else "", final]
    return "\n".join(p for p in parts if p), len(text) - elided


def keep_end(text: str, max_chars: int) -> tuple[str, int]:
    """``text`` cut to its last ``max_chars`` characters, the cut marked on a line before
    them (``[… M chars elided …]``, not counted, as in :func:`elide_middle`): (new text,
    characters kept). Rule 3 (only the end of a final state fits) and the benchmarks'
    renderings that keep the latest steps."""
    if len(text) <= max_chars:
        return text, len(text)
    keep = max(0, max_chars)
    return _marker(len(text) - keep) + "\n" + text[len(text) - keep:], keep


def shrink_parts(parts: list[str], budget_chars: int) -> tuple[list[str], Evidence]:
    """Rules 1-3 over the transcripts for a total of about ``budget_chars`` characters."""
    total = sum(len(p) for p in parts)
    if total <= budget_chars:
        return list(parts), Evidence(total, total, True)
    finals = [final_state_chars(p) for p in parts]
    if sum(finals) > budget_chars:  # rule 3: even the final states do not fit
        share = max(0.0, budget_chars / max(1, sum(finals)))
        cut = [keep_end(p[len(p) - f:], int(f * share)) for p, f in zip(parts, finals)]
        return [c[0] for c in cut], Evidence(total, sum(c[1] for c in cut), False)

    def size(cap: int) -> int:
        return sum(min(len(p), max(cap, f)) for p, f in zip(parts, finals))

    lo, hi = 0, max(len(p) for p in parts)  # the largest cap that fits (rule 1)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if size(mid) <= budget_chars:
            lo = mid
        else:
            hi = mid - 1
    cut = [elide_middle(p, max(lo, f)) for p, f in zip(parts, finals)]
    return [c[0] for c in cut], Evidence(total, sum(c[1] for c in cut), True)


def fit_prompt(render: Callable[[list[str]], str], parts: list[str], *, n_ctx: int,
               answer_tokens: int, who: str) -> FittedPrompt:
    """``render(parts)`` → the prompt, with the evidence ``parts`` (transcripts) whole
    when it fits ``n_ctx`` with ``answer_tokens`` left for the answer, shortened by the
    evidence rule otherwise."""
    room = n_ctx - answer_tokens - TEMPLATE_TOKENS
    fixed = count_tokens(render(["" for _ in parts]))
    if fixed > room:
        raise PromptBudgetError(
            f"{who}: instructions + policy need ~{fixed} tokens, but n_ctx={n_ctx} leaves "
            f"{room} after {answer_tokens} answer tokens; raise the model's n_ctx or lower "
            "its max_tokens")
    total = sum(len(p) for p in parts)
    prompt = render(parts)
    used = count_tokens(prompt)
    evidence = Evidence(total, total, True)
    budget = total
    for _ in range(FIT_ROUNDS):
        if used <= room or budget <= 0:
            break
        # characters per evidence token, measured on this prompt; aim a little under
        budget = int(budget * (room - fixed) / max(1, used - fixed) * 0.97)
        shortened, evidence = shrink_parts(parts, budget)
        prompt = render(shortened)
        used = count_tokens(prompt)
    while used > room and budget > 0:  # rule 4: the estimate missed; halve until it fits
        budget //= 2
        shortened, evidence = shrink_parts(parts, budget)
        prompt = render(shortened)
        used = count_tokens(prompt)
    if used > room:  # flagged, never passed off as fitting
        evidence = Evidence(evidence.chars, evidence.kept, False, fits=False)
    return FittedPrompt(prompt, evidence)
