"""``report/``, ``view/`` and ``power/`` name no method (issue 30 item 4): what they know of
a method they ask the registry (:mod:`edv_ray.report.method_facts`, ``Method.memory_view``,
``Method.report_order``…), so a sixth method needs no edit there. No string literal in
their ``*.py`` files is a registered method's name, nor quotes one inside SQL
(``'name'``); no viewer template quotes one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import edv_ray
from edv_ray.methods.registry import known_methods

PKG = Path(edv_ray.__file__).resolve().parent
PACKAGES = ("report", "view", "power")
FILES = sorted(f for p in PACKAGES for f in (PKG / p).glob("*.py"))
TEMPLATES = sorted((PKG / "view" / "templates").glob("*.jinja"))
# literals that are a method's name but mean something else there, with the reason
ALLOWED = {
    ("power/profile.py", "judge"): "the judging role (roles.judge, the simulation profile's "
                                   "judge block, edv.verify_by: judge), not the Judge method",
}


def _quoted(text: str, names: set[str]) -> set[str]:
    """Names quoted in the text (``'edv'`` in SQL, ``"edv"`` in a template)."""
    return {m for m in re.findall(r"""['"]([A-Za-z_]+)['"]""", text) if m in names}


def _hits(path: Path, names: set[str], root: Path = PKG) -> list[str]:
    rel = path.relative_to(root).as_posix()
    allowed = {n for (f, n) in ALLOWED if f == rel}
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            quoted = {m for m in re.findall(r"'([A-Za-z_]+)'", text) if m in names}
            if (text in names and text not in allowed) or quoted - allowed:
                out.append(f"{rel}:{node.lineno}: {text[:60]!r}")
    return out


def test_report_view_and_power_name_no_method():
    names = set(known_methods())
    assert {"edv", "reasoning_bank", "no_memory", "judge", "router"} <= names
    assert {f.parent.name for f in FILES} == set(PACKAGES) and TEMPLATES
    hits = [h for f in FILES for h in _hits(f, names)]
    hits += [f"{t.relative_to(PKG).as_posix()}: {sorted(_quoted(t.read_text(), names))}"
             for t in TEMPLATES if _quoted(t.read_text(), names)]
    assert not hits, "method names hard-coded outside methods/:\n" + "\n".join(hits)


def test_the_scan_finds_a_hard_coded_name(tmp_path):
    """Not vacuous: a literal name and a name quoted in SQL are found, a longer word and
    an allowed role are not; a template's quoted name is found."""
    names = {"edv", "judge", "reasoning_bank"}
    (tmp_path / "power").mkdir()
    src = tmp_path / "power" / "profile.py"
    src.write_text('A = "edv"\nB = "SELECT 1 WHERE method = \'reasoning_bank\'"\n'
                   'C = "edv_ray"\nD = "judge"\n')
    assert [h.split(":")[1] for h in _hits(src, names, root=tmp_path)] == ["1", "2"]
    (tmp_path / "view").mkdir()
    other = tmp_path / "view" / "queries.py"
    other.write_text(src.read_text())
    assert [h.split(":")[1] for h in _hits(other, names, root=tmp_path)] == ["1", "2", "4"]
    assert _quoted("{% if it.method == 'edv' %}{{ \"judge\" }}", names) == {"edv", "judge"}
