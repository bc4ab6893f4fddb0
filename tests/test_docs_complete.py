"""The docs name what the code holds: every package has a README, and every module file is
named (by its path relative to ``edv_ray/``, e.g. ``llm/calls.py``) in ARCHITECTURE.md;
an ``__init__.py`` only when it defines a function or class.

A new package or module without its line fails here, so the map stays whole as the tree
grows. The root package's README is ARCHITECTURE.md itself.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "edv_ray"
ARCHITECTURE = PKG / "ARCHITECTURE.md"


def _packages() -> list[Path]:
    return sorted(p.parent for p in PKG.rglob("__init__.py") if "__pycache__" not in p.parts)


def _has_logic(path: Path) -> bool:
    """A function or class defined at module level (an ``__init__.py`` that only
    re-exports, or holds a docstring and ``__all__``, has none)."""
    tree = ast.parse(path.read_text())
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
               for n in tree.body)


def _modules() -> list[str]:
    """Every module that must be named: all ``*.py`` files except ``__init__.py`` files
    without logic of their own."""
    return sorted(p.relative_to(PKG).as_posix() for p in PKG.rglob("*.py")
                  if "__pycache__" not in p.parts
                  and (p.name != "__init__.py" or _has_logic(p)))


def _named(text: str) -> set[str]:
    """Every ``….py`` path written in ``text``, as written (``llm/calls.py``,
    ``edv_ray/llm/calls.py``, ``config.py``). A bare ``calls.py`` does not name
    ``llm/calls.py``: only the full path relative to ``edv_ray/`` counts."""
    return set(re.findall(r"[A-Za-z0-9_./]+\.py", text))


def test_every_package_has_a_readme():
    missing = [p.relative_to(PKG.parent).as_posix() for p in _packages()
               if p != PKG and not (p / "README.md").is_file()]
    assert not missing, "packages without a README.md: " + ", ".join(missing)


def test_every_module_is_named_in_architecture():
    named = _named(ARCHITECTURE.read_text())
    missing = [m for m in _modules() if m not in named and f"edv_ray/{m}" not in named]
    assert not missing, ("modules not named in edv_ray/ARCHITECTURE.md (write their path "
                         "relative to edv_ray/, e.g. `llm/calls.py`): " + ", ".join(missing))


def test_readmes_name_only_modules_that_exist():
    """A README's module table must not keep a module that was removed or renamed."""
    stale = []
    for pkg in _packages():
        readme = pkg / "README.md"
        if pkg == PKG or not readme.is_file():
            continue
        for row in re.findall(r"^\| `([A-Za-z0-9_]+\.py)`", readme.read_text(), re.M):
            if not (pkg / row).is_file():
                stale.append(f"{readme.relative_to(PKG.parent)}: {row}")
    assert not stale, "README rows naming modules that do not exist: " + ", ".join(stale)
