"""The package's import graph: no cycles, and no lower layer importing a higher one.

Every ``import`` statement counts, the ones inside functions too (a deferred import is
still a dependency). Plug-ins found by name at run time (``"module:function"`` handler
strings, the method registry's ``BUILTIN`` list) are not imports and do not count.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "edv_ray"

# Lowest first. A module may import its own layer and the layers below it.
LAYERS = [
    # the method registry is a plain plug-in table (dataclasses, names): configs validate
    # method sections through it; it loads the built-in methods by name
    ("base", ["edv_ray.commands", "edv_ray.config_files", "edv_ray.credentials", "edv_ray.config", "edv_ray.config_simulation",
              "edv_ray.prompts",
              "edv_ray.methods.registry"]),
    ("io", ["edv_ray.llm", "edv_ray.results"]),
    ("domain", ["edv_ray.memory", "edv_ray.envs", "edv_ray.agents", "edv_ray.serving"]),
    ("runtime", ["edv_ray.runtime"]),
    ("methods", ["edv_ray.methods"]),
    ("top", ["edv_ray.report", "edv_ray.pipeline", "edv_ray.sweep", "edv_ray.validation",
             "edv_ray.cli", "edv_ray.interrupts", "edv_ray.power", "edv_ray.testing",
             "edv_ray.view"]),
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    found = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base if is_pkg else base[:-1]
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            subs = [f"{mod}.{a.name}" for a in node.names]
            # ``from pkg import submodule`` depends on the submodule; the package's own
            # ``__init__`` runs first because Python imports parents, not by choice
            targets = [s for s in subs if s in known]
            if len(targets) < len(subs):
                targets.append(mod)
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t.startswith("edv_ray") and t != name:
                found.add(t)
    return found


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    return {n: _imports(n, p, known) for n, p in mods.items()}


def _layer(mod: str) -> int | None:
    """The layer of the longest matching prefix."""
    best = None
    for i, (_name, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (mod == p or mod.startswith(p + ".")) and (best is None or len(p) > best[1]):
                best = (i, len(p))
    return None if best is None else best[0]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles: " + "; ".join(" ↔ ".join(c) for c in cycles)


def test_every_module_has_a_layer():
    missing = [m for m in _graph() if m != "edv_ray" and _layer(m) is None]
    assert not missing, f"modules with no layer in LAYERS: {missing}"


def test_no_lower_layer_imports_a_higher_one():
    bad = []
    for mod, deps in _graph().items():
        lm = _layer(mod)
        for d in deps:
            ld = _layer(d)
            if lm is not None and ld is not None and ld > lm:
                bad.append(f"{mod} ({LAYERS[lm][0]}) imports {d} ({LAYERS[ld][0]})")
    assert not bad, "\n".join(sorted(bad))
