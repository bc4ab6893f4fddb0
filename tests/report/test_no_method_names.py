"""``report/`` names no method (issue 30 item 4): what it knows of a method it asks the
registry (:mod:`edv_ray.report.method_facts`), so a sixth method needs no edit there. No
string literal in ``edv_ray/report/*.py`` is a registered method's name, nor quotes one
inside SQL (``'name'``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import edv_ray
from edv_ray.methods.registry import known_methods

PKG = Path(edv_ray.__file__).resolve().parent
FILES = sorted((PKG / "report").glob("*.py"))


def _hits(path: Path, names: set[str]) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            quoted = {m for m in re.findall(r"'([A-Za-z_]+)'", text) if m in names}
            if text in names or quoted:
                out.append(f"{path.relative_to(PKG.parent)}:{node.lineno}: {text[:60]!r}")
    return out


def test_report_names_no_method():
    names = set(known_methods())
    assert {"edv", "reasoning_bank", "no_memory", "judge", "router"} <= names
    hits = [h for f in FILES for h in _hits(f, names)]
    assert not hits, "method names hard-coded outside methods/:\n" + "\n".join(hits)
