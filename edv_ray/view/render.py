"""The viewer's templates (Jinja2, autoescape on for every template) and their filters,
shared by the server and the static export."""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).parent / "templates"
# the stylesheet: a plain file, named .jinja only so the package data (``**/*.jinja``)
# ships it; it is read as text, never rendered
STYLESHEET = TEMPLATES / "view.css.jinja"
CSP = ("default-src 'none'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "base-uri 'none'; form-action 'self'")

# bidirectional controls and invisible separators: shown as a visible mark, never applied
_INVISIBLE = re.compile("[\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")


def visible(value) -> str:
    """Text as shown: ``None`` as an empty string, each bidi control or invisible
    character as ``[U+XXXX]`` (so a right-to-left override cannot reorder what follows)."""
    if value is None:
        return ""
    return _INVISIBLE.sub(lambda m: f"[U+{ord(m.group()):04X}]", str(value))


def fmt(value, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return "–" if math.isnan(value) else f"{value:.{digits}f}"
    if isinstance(value, (list, tuple)):
        return ", ".join(visible(v) for v in value)
    return visible(value)


def rate(p, lo=None, hi=None, n=None) -> str:
    """``0.850 [0.640, 0.948] n=20`` — how every Pass@1 is printed (as edv compare)."""
    if p is None:
        return f"– n={n or 0}"
    ci = f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else ""
    return f"{p:.3f}{ci}" + (f" n={n}" if n is not None else "")


def short(value, width: int = 90) -> str:
    text = " ".join(visible(value).split())
    return text if len(text) <= width else text[: width - 1] + "…"


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters.update(fmt=fmt, rate=rate, short=short, visible=visible)
    return env


def render(template: str, **context) -> str:
    return environment().get_template(template).render(**context)
