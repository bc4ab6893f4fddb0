"""The package's import graph: no cycles (of modules or of packages), no lower layer
importing a higher one, per-package allow-lists inside a layer, only ``envs/`` importing
a benchmark, and nothing in the framework importing the simulation's oracle.

Every ``import`` statement counts, the ones inside functions too (a deferred import is
still a dependency), and so does every string constant naming an ``edv_ray`` module
(``"edv_ray.x.y"``, ``"edv_ray.x.y:attr"``: ``importlib.import_module`` arguments, job
handler strings): a plug-in loaded by name is an import made later. The only strings
that do not count are the declared plug-in tables (``PLUGIN_TABLES``), which point at
plug-in packages by design.

The checks are functions of a package root, so ``test_mutations_are_caught`` can run them
on mutated copies of the tree.
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "edv_ray"

# Lowest first. A module may import its own layer and the layers below it (inside its
# layer: only what ALLOWED_WITHIN lists for its package).
LAYERS = [
    ("base", ["edv_ray.commands", "edv_ray.config_files", "edv_ray.config_benchmarks",
              "edv_ray.config", "edv_ray.config_simulation",
              "edv_ray.prompts", "edv_ray.plugins"]),
    ("io", ["edv_ray.llm", "edv_ray.results"]),
    ("domain", ["edv_ray.memory", "edv_ray.envs", "edv_ray.agents", "edv_ray.serving",
                "edv_ray.simulation"]),
    ("runtime", ["edv_ray.runtime"]),
    ("methods", ["edv_ray.methods"]),
    ("top", ["edv_ray.report", "edv_ray.pipeline", "edv_ray.sweep", "edv_ray.validation",
             "edv_ray.cli", "edv_ray.interrupts", "edv_ray.power", "edv_ray.testing",
             "edv_ray.view"]),
]

# package → the packages of its own layer it may import (one line, one reason each)
ALLOWED_WITHIN: dict[str, set[str]] = {
    # base: the config is assembled from its parts; the parts know nothing of each other
    "edv_ray.config": {"edv_ray.config_files", "edv_ray.config_benchmarks",
                       "edv_ray.config_simulation", "edv_ray.plugins"},
    "edv_ray.config_files": set(),  # reading YAML (extends:), refusing credentials; no model of a run
    "edv_ray.config_benchmarks": set(),  # pydantic sections only
    "edv_ray.config_simulation": set(),  # pydantic sections only
    "edv_ray.commands": set(),  # shell command lines only
    "edv_ray.prompts": set(),  # prompt files and budgets: below every config
    "edv_ray.plugins": set(),  # the plug-in table: strings and a registry dict, nothing else
    # io: the model-call path and the results store are independent
    "edv_ray.llm": set(),
    "edv_ray.results": set(),
    # domain
    "edv_ray.memory": set(),  # banks and retrieval know no benchmark, server or prompt format
    "edv_ray.agents": set(),  # prompt strategies: text formats, below the benchmarks using them
    "edv_ray.envs": {"edv_ray.agents"},  # an episode is played through an agent's strategy
    "edv_ray.serving": set(),  # runs model engines: knows no benchmark, prompt or memory
    # the simulated model engine: a server process (serving's ProcessServer) that plays
    # each benchmark through its protocol hook (envs.protocol's get_env and
    # simulated_player; the benchmark rule keeps it out of the benchmark packages). No
    # memory, no agents: it reads requests, and the players write the strategies' formats
    "edv_ray.simulation": {"edv_ray.serving", "edv_ray.envs"},
    "edv_ray.runtime": set(),
    "edv_ray.methods": set(),
    # top
    "edv_ray.report": set(),  # reads stored runs; never runs, sweeps, views or validates
    "edv_ray.interrupts": set(),  # signal handling only
    "edv_ray.testing": set(),  # test fixtures (servers, helpers) used by tests, not by code
    "edv_ray.view": {"edv_ray.report"},  # shows what the report computes; runs nothing
    "edv_ray.pipeline": {"edv_ray.report", "edv_ray.interrupts"},  # a run ends in its report
    "edv_ray.sweep": {"edv_ray.pipeline"},  # a sweep is many runs
    "edv_ray.validation": {"edv_ray.pipeline", "edv_ray.report"},  # runs worlds, checks reports
    "edv_ray.power": {"edv_ray.pipeline", "edv_ray.report", "edv_ray.validation"},
    # the command line dispatches to every top package but the test fixtures
    "edv_ray.cli": {"edv_ray.report", "edv_ray.pipeline", "edv_ray.sweep", "edv_ray.validation",
                    "edv_ray.interrupts", "edv_ray.power", "edv_ray.view"},
}

# Declared plug-in tables: strings in ``module`` naming modules under one of ``targets``
# are plug-ins by design, not imports (module → (targets, reason)). They point up a layer
# (or back at modules importing the table), loaded by name only when needed.
PLUGIN_TABLES = {
    "edv_ray.plugins": (("edv_ray.methods",), "the table of methods: each section's config "
                        "class and the modules registering the built-in methods"),
    "edv_ray.results.views": (("edv_ray.methods.views",), "METHOD_VIEWS: the method views "
                              "connect() adds when a run's views are built"),
    "edv_ray.envs.protocol": (tuple(f"edv_ray.envs.{b}.env" for b in ("tau2", "mind2web", "mmtb")),
                              "_ENVS: the benchmark adapters get_env loads by name (they "
                              "implement the protocol, so they import it)"),
    "edv_ray.report.validity": (tuple(f"edv_ray.report.{m}" for m in (
        "validity_checks", "mind2web_checks", "scoring_checks", "validity_evidence")),
        "the check modules run_checks loads (they register through its @check)"),
}

# Benchmark packages: only edv_ray.envs imports them (others go through envs.protocol).
BENCHMARKS = ("edv_ray.envs.tau2", "edv_ray.envs.mind2web", "edv_ray.envs.mmtb")
# The simulation's oracle (the planted truth): only validation (and the engine, whose
# functions it reuses) may read it.
ORACLE = "edv_ray.simulation.oracle"
ORACLE_READERS = ("edv_ray.validation", "edv_ray.simulation")

# Arrows that break a rule today, each with why and when it goes (none today). The test
# fails when a listed arrow no longer exists (delete the line then).
KNOWN_EXCEPTIONS: set[tuple[str, str]] = set()

_MODULE_STRING = re.compile(r"edv_ray(\.[A-Za-z_]\w*)+(:[\w.]*)?")


def modules(root: Path) -> dict[str, Path]:
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _under(mod: str, prefix: str) -> bool:
    return mod == prefix or mod.startswith(prefix + ".")


def _known(target: str, known: set[str]) -> str | None:
    while target and target not in known:
        target = target.rpartition(".")[0]
    return target or None


def _strings(tree: ast.AST) -> list[str]:
    """String constants naming an edv_ray module (f-strings: their fixed module part)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            text = str(node.values[0].value)
            if ":" not in text:  # the module name itself is formatted: nothing to resolve
                continue
        else:
            continue
        m = _MODULE_STRING.fullmatch(text) or (isinstance(node, ast.JoinedStr)
                                               and _MODULE_STRING.match(text))
        if m:
            out.append(m.group(0).partition(":")[0])
    return sorted(set(out))


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The edv_ray modules ``name`` imports: statements and plug-in strings."""
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    targets: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets += [a.name for a in node.names]
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
            found = [s for s in subs if s in known]
            targets += found + ([mod] if len(found) < len(subs) else [])
    table = PLUGIN_TABLES.get(name, ((), ""))[0]
    targets += [s for s in _strings(tree) if not any(_under(s, p) for p in table)]
    out = set()
    for t in targets:
        t = _known(t, known) if t.startswith("edv_ray") else None
        if t and t != name:
            out.add(t)
    return out


def graph(root: Path = PKG) -> dict[str, set[str]]:
    mods = modules(root)
    known = set(mods)
    return {n: imports(n, p, known) for n, p in mods.items()}


def _prefix(mod: str) -> tuple[int, str] | None:
    """(layer index, package) of the longest matching LAYERS prefix."""
    best = None
    for i, (_name, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if _under(mod, p) and (best is None or len(p) > len(best[1])):
                best = (i, p)
    return best


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
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

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def package_graph(g: dict[str, set[str]]) -> dict[str, set[str]]:
    """The same arrows between packages (``edv_ray.<first part>``)."""
    def pkg(m):
        return ".".join(m.split(".")[:2])
    out: dict[str, set[str]] = {}
    for m, deps in g.items():
        out.setdefault(pkg(m), set()).update(pkg(d) for d in deps if pkg(d) != pkg(m))
    return out


def unlayered(g) -> list[str]:
    return sorted(m for m in g if m != "edv_ray" and _prefix(m) is None)


def layer_violations(g) -> list[str]:
    bad = []
    for mod, deps in g.items():
        lm = _prefix(mod)
        for d in deps:
            ld = _prefix(d)
            if lm and ld and ld[0] > lm[0]:
                bad.append(f"{mod} ({LAYERS[lm[0]][0]}) imports {d} ({LAYERS[ld[0]][0]})")
    return sorted(bad)


def within_layer_violations(g) -> list[str]:
    bad = []
    for mod, deps in g.items():
        lm = _prefix(mod)
        for d in deps:
            ld = _prefix(d)
            if (lm and ld and ld[0] == lm[0] and ld[1] != lm[1]
                    and ld[1] not in ALLOWED_WITHIN.get(lm[1], set())
                    and (mod, d) not in KNOWN_EXCEPTIONS):
                bad.append(f"{mod} imports {d}: {lm[1]} may import only "
                           f"{sorted(ALLOWED_WITHIN.get(lm[1], ())) or 'nothing'} of its layer")
    return sorted(bad)


def benchmark_violations(g) -> list[str]:
    return sorted(f"{m} imports benchmark module {d} (go through envs.protocol.get_env)"
                  for m, deps in g.items() if not _under(m, "edv_ray.envs")
                  for d in deps if any(_under(d, b) for b in BENCHMARKS)
                  and (m, d) not in KNOWN_EXCEPTIONS)


def oracle_violations(g) -> list[str]:
    return sorted(f"{m} imports the simulation's oracle {d}" for m, deps in g.items()
                  if not any(_under(m, r) for r in ORACLE_READERS)
                  for d in deps if _under(d, ORACLE))


def problems(root: Path = PKG) -> list[str]:
    """Every rule's violations on the tree at ``root`` ([] = it passes)."""
    g = graph(root)
    out = [f"unlayered module {m}" for m in unlayered(g)]
    out += ["import cycle: " + " ↔ ".join(c) for c in cycles(g)]
    out += ["package cycle: " + " ↔ ".join(c) for c in cycles(package_graph(g))]
    out += layer_violations(g) + within_layer_violations(g)
    out += benchmark_violations(g) + oracle_violations(g)
    return out


# ---- the real tree ----------------------------------------------------------------------
def test_no_import_cycles():
    found = cycles(graph())
    assert not found, "import cycles: " + "; ".join(" ↔ ".join(c) for c in found)


def test_no_package_cycles():
    found = cycles(package_graph(graph()))
    assert not found, "package cycles: " + "; ".join(" ↔ ".join(c) for c in found)


def test_every_module_has_a_layer_and_every_package_an_allow_list():
    assert not unlayered(graph()), f"modules with no layer in LAYERS: {unlayered(graph())}"
    packages = {p for _n, ps in LAYERS for p in ps}
    assert packages == set(ALLOWED_WITHIN), packages ^ set(ALLOWED_WITHIN)


def test_no_lower_layer_imports_a_higher_one():
    bad = layer_violations(graph())
    assert not bad, "\n".join(bad)


def test_packages_import_only_their_allow_list_within_a_layer():
    bad = within_layer_violations(graph())
    assert not bad, "\n".join(bad)


def test_only_envs_imports_a_benchmark():
    bad = benchmark_violations(graph())
    assert not bad, "\n".join(bad)


def test_nothing_in_the_framework_imports_the_oracle():
    bad = oracle_violations(graph())
    assert not bad, "\n".join(bad)


def test_known_exceptions_are_not_stale():
    g = graph()
    stale = sorted(f"{m} → {d}" for m, d in KNOWN_EXCEPTIONS if d not in g.get(m, set()))
    assert not stale, f"no longer imported, delete from KNOWN_EXCEPTIONS: {stale}"


def test_plugin_tables_still_name_their_plugins():
    mods = modules(PKG)
    for mod, (targets, _why) in PLUGIN_TABLES.items():
        named = [s for s in _strings(ast.parse(mods[mod].read_text()))
                 if any(_under(s, p) for p in targets)]
        assert named, f"{mod} names no {targets} module: delete it from PLUGIN_TABLES"
        assert all(s in mods for s in named), (mod, [s for s in named if s not in mods])


def test_plugin_strings_are_read():
    """Handler strings (f-strings too) and import_module arguments name modules; prose
    and formatted module names do not."""
    code = ('import importlib\nimportlib.import_module("edv_ray.pipeline")\n'
            'H = f"edv_ray.methods.edv.jobs:run_{k}_job"\nP = "edv_ray.memory.bank:load"\n'
            'M = f"edv_ray.{x}"\nD = "see edv_ray.cli for the commands"\n')
    assert sorted(_strings(ast.parse(code))) == ["edv_ray.memory.bank", "edv_ray.methods.edv.jobs",
                                                 "edv_ray.pipeline"]
    g = graph()  # the declared tables' strings are no edges
    assert not any(_under(d, "edv_ray.methods") for d in g["edv_ray.plugins"])
    assert "edv_ray.methods.views" not in g["edv_ray.results.views"]


# ---- mutated copies: each rule catches what it is for -----------------------------------
MUTATIONS = {
    "serving imports a benchmark": (
        "serving/replicas.py", "\nfrom edv_ray.envs import mmtb  # noqa\n",
        ("imports benchmark module edv_ray.envs.mmtb", "edv_ray.serving may import only")),
    "results loads the pipeline by name": (
        "results/schema.py", '\nimport importlib\n_P = importlib.import_module("edv_ray.pipeline")\n',
        ("edv_ray.results.schema (io) imports edv_ray.pipeline (top)",)),
    "the simulated engine imports a benchmark": (
        "simulation/world.py", "\nfrom edv_ray.envs.tau2 import tasks  # noqa\n",
        ("edv_ray.simulation.world imports benchmark module edv_ray.envs.tau2.tasks",)),
    "a benchmark's player imports the engine": (
        "envs/tau2/sim_player.py", "\nfrom edv_ray.simulation import codec  # noqa\n",
        ("edv_ray.envs may import only", "package cycle")),
    "a method imports the oracle": (
        "methods/steps.py", "\nfrom edv_ray.simulation import oracle  # noqa\n",
        ("imports the simulation's oracle",)),
    "report imports the pipeline": (
        "report/tables.py", "\ndef _p():\n    from edv_ray import pipeline  # noqa\n",
        ("edv_ray.report may import only nothing",)),
    "the plug-in table imports a method": (
        "plugins.py", "\nfrom edv_ray.methods import registry  # noqa\n",
        ("package cycle", "edv_ray.plugins (base) imports edv_ray.methods.registry")),
}


def test_real_tree_passes():
    assert problems(PKG) == []


@pytest.mark.parametrize("what", sorted(MUTATIONS))
def test_mutations_are_caught(what, tmp_path):
    rel, code, expected = MUTATIONS[what]
    root = tmp_path / "edv_ray"
    shutil.copytree(PKG, root, ignore=shutil.ignore_patterns("__pycache__", "*.md", "*.yaml"))
    target = root / rel
    target.write_text(target.read_text() + code)
    found = "\n".join(problems(root))
    for e in expected:
        assert e in found, (what, e, found)
