"""Prompts are data: one file per prompt, versioned in its name (``NAME.vN.md``).

Fields use ``$name`` placeholders (``string.Template``) so JSON braces in a prompt need
no escaping; a missing field is an error, never a silently empty hole. Prompt files
live next to the package that owns them (``edv_ray/<pkg>/prompts/``).
"""

from __future__ import annotations

import functools
import re
import string
import unicodedata
from pathlib import Path
from typing import Sequence

_ROOT = Path(__file__).resolve().parent.parent


@functools.lru_cache(maxsize=None)
def load_prompt(package: str, name: str) -> string.Template:
    """``load_prompt("agents", "agent_text_tools.v1")`` → the template of that file."""
    path = _ROOT / package / "prompts" / f"{name}.md"
    if not path.is_file():
        raise FileNotFoundError(f"prompt file not found: {path}")
    return string.Template(path.read_text())


def render_prompt(package: str, name: str, **fields: object) -> str:
    try:
        return load_prompt(package, name).substitute(**fields).strip()
    except KeyError as err:
        raise KeyError(f"prompt {package}/{name} needs field {err}") from None


def fence(text: str) -> str:
    """Untrusted text (tool output, user turns, transcripts, distilled rules) is escaped
    so it cannot open or close our prompt blocks or forge an attribute such as a run's
    outcome: ``<`` ``>`` ``&`` become entities. Labels such as outcomes are attributes of
    block tags that only our code writes."""
    return (_fold(text or "").replace("&", "&amp;").replace("<", "&lt;")
            .replace(">", "&gt;"))


# Characters a model reads as ``<`` ``>`` ``&`` (fullwidth ＜, small-form ﹤, …: their
# compatibility form is the ASCII one) are folded to it before escaping, so
# ``＜/experiences＞`` is escaped like ``</experiences>``; bidirectional controls and
# invisible separators (which reorder or hide what a person reviewing a prompt sees) go.
_INVISIBLE = re.compile("[\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")
_LOOKALIKES = {c: unicodedata.normalize("NFKC", c)
               for c in map(chr, range(0x80, 0x10000))
               if unicodedata.normalize("NFKC", c) in ("<", ">", "&")}
_LOOKALIKE = re.compile("[" + "".join(_LOOKALIKES) + "]")


def _fold(text: str) -> str:
    text = _INVISIBLE.sub("", text)
    return _LOOKALIKE.sub(lambda m: _LOOKALIKES[m.group(0)], text)


def experiences_block(package: str, experiences: Sequence[str],
                      name: str = "experiences_block.v2") -> str:
    """The retrieved-experiences block of an agent's system prompt — the one fence every
    benchmark uses (τ²-bench through ``agents``, Mind2Web, MMTB). A stored lesson is
    data written by a model from trajectories that carry tool output and user text: each
    one is fenced (:func:`fence`: it cannot close ``</experiences>`` or open a tag) and
    kept inside its numbered item: its further lines are indented and blank lines dropped,
    so no line of it starts a line of the prompt (such as a forged ``SYSTEM:`` turn) or
    passes for another item. The wording around the lessons is the
    package's ``prompts/NAME.md`` (``$experiences`` = the numbered items). "" for none."""
    if not experiences:
        return ""
    items = []
    for i, e in enumerate(experiences, 1):
        lines = [ln.strip() for ln in fence(str(e)).splitlines() if ln.strip()] or [""]
        items.append("\n".join([f"{i}. {lines[0]}", *(f"   {ln}" for ln in lines[1:])]))
    return "\n" + render_prompt(package, name, experiences="\n".join(items))
