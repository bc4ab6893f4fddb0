"""No planted value reads a run's output (issue 27): a walk over the suite's check code.

Every value a run produced reaches a check through a parameter that holds the run (a
``Run``: ``run``, ``hom``, ``het``). The walk taints what is computed from it — names
assigned from an expression that mentions a tainted name, loop and comprehension targets
over a tainted iterable — and, through helper calls, what a helper's parameters carry into
a row. A row's planted argument (``Row``'s, ``rate_row``'s and ``diff_row``'s second, the
second element of each ``cells_row`` / ``range_row`` cell, ``coverage_row``'s fourth) must
be untainted, unless the row's name says what it is conditioned on ("given …": a
diagnostic beside a profile-only row). A planted value that reads the run fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import edv_ray.validation as validation

MODULES = ("check_main", "check_pools", "checks", "coverage", "suite")
RUN_NAMES = {"run", "hom", "het"}
PLANTED_AT = {"Row": 1, "rate_row": 1, "diff_row": 1, "coverage_row": 3, "cells_row": 1,
              "range_row": 1}
CELLS = {"cells_row", "range_row"}


def _names(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} if node is not None else set()


def _targets(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _callee(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _bindings(fn) -> list[tuple[set[str], ast.AST]]:
    """(names bound, the expression they are bound from) for every binding in ``fn``."""
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            out += [(_targets(t), node.value) for t in node.targets]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            out.append((_targets(node.target), node.value))
        elif isinstance(node, (ast.For, ast.comprehension)):
            out.append((_targets(node.target), node.iter))
        elif isinstance(node, ast.NamedExpr):
            out.append((_targets(node.target), node.value))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("append", "extend", "add", "update", "setdefault") \
                and isinstance(node.func.value, ast.Name):
            out.append(({node.func.value.id}, ast.Tuple(elts=list(node.args), ctx=ast.Load())))
    return out


def _taint(fn, seeds: set[str]) -> set[str]:
    tainted, binds = set(seeds), _bindings(fn)
    while True:
        more = {n for names, expr in binds if _names(expr) & tainted for n in names} - tainted
        if not more:
            return tainted
        tainted |= more


def _planted_exprs(call: ast.Call, fn) -> list[ast.AST]:
    """The expressions a builder call takes its planted value(s) from."""
    name = _callee(call)
    at = PLANTED_AT[name]
    arg = call.args[at] if len(call.args) > at else None
    if name not in CELLS or arg is None:
        return [arg]
    sources = [arg]
    if isinstance(arg, ast.Name):  # cells built elsewhere in the function
        sources = [expr for names, expr in _bindings(fn) if arg.id in names]
    return [e for src in sources for e in _cell_planted(src)] or [arg]


def _cell_planted(src) -> list[ast.AST]:
    """A cells expression's planted parts: each cell's second element, and the iterables
    of a comprehension that makes the cells (which cells exist is planted too)."""
    if isinstance(src, (ast.ListComp, ast.GeneratorExp)):
        return [g.iter for g in src.generators] + _cell_planted(src.elt)
    if isinstance(src, ast.Tuple) and len(src.elts) >= 3:
        return [src.elts[1]]
    if isinstance(src, (ast.List, ast.Tuple)):
        return [e for x in src.elts for e in _cell_planted(x)]
    return [src]


def _check_text(node) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value for v in node.values if isinstance(v, ast.Constant))
    return None


def _scope_comprehensions(tree):
    """Give each comprehension's own variables names of their own (``d@12``): a
    comprehension is a scope, so ``d`` over the run in one and over the design in another
    are different names (outer first, so an inner one that rebinds a name shadows it)."""
    comps = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
    for comp in (n for n in ast.walk(tree) if isinstance(n, comps)):
        own = {t for g in comp.generators for t in _targets(g.target)}
        for n in ast.walk(comp):
            if isinstance(n, ast.Name) and n.id in own:
                n.id = f"{n.id}@{id(comp)}"
        for g in comp.generators[:1]:  # the first iterable is evaluated outside
            for n in ast.walk(g.iter):
                if isinstance(n, ast.Name) and "@" in n.id and n.id.endswith(f"@{id(comp)}"):
                    n.id = n.id.split("@")[0]
    return tree


def violations(sources: dict[str, str]) -> list[str]:
    """Rows whose planted value reads a run, over modules ``{name: source}``."""
    fns = {}
    for mod, src in sources.items():
        for node in ast.walk(_scope_comprehensions(ast.parse(src))):
            if isinstance(node, ast.FunctionDef):
                fns[node.name] = (mod, node)
    params = {name: [a.arg for a in fn.args.args] for name, (_m, fn) in fns.items()}
    # helpers that take (part of) a row's name as a parameter: per row they build, (the
    # param index of the name, the name's own words, the params whose taint reaches that
    # row's planted value) — found by seeding each parameter in turn
    helpers: dict[str, list[tuple[int, str, set[str]]]] = {}
    for name, (_m, fn) in fns.items():
        for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call) and _callee(n) in PLANTED_AT):
            label = call.args[0] if call.args else None
            named = [label] if isinstance(label, ast.Name) else [
                v.value for v in getattr(label, "values", []) if isinstance(v, ast.FormattedValue)]
            at = [params[name].index(n.id) for n in named
                  if isinstance(n, ast.Name) and n.id in params[name]]
            if at:
                flows = {p for p in params[name] if any(_names(e) & _taint(fn, {p})
                                                       for e in _planted_exprs(call, fn))}
                helpers.setdefault(name, []).append((at[0], _check_text(label) or "", flows))
    bad = []
    for name, (mod, fn) in fns.items():
        tainted = _taint(fn, RUN_NAMES & set(params[name]))
        for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
            callee = _callee(call)
            found = []  # (the row's name as far as known here, whether its planted reads a run)
            if callee in PLANTED_AT and call.args:
                found.append((_check_text(call.args[0]),
                              any(_names(e) & tainted for e in _planted_exprs(call, fn))))
            elif callee in helpers and name != callee:
                bound = dict(zip(params[callee], call.args))
                for at, words, flows in helpers[callee]:
                    given = _check_text(call.args[at]) if len(call.args) > at else None
                    found.append((None if given is None else given + words,
                                  any(_names(bound.get(p)) & tainted for p in flows)))
            bad += [f"{mod}.{name}: {text!r}" for text, reads in found
                    if reads and text is not None and "given" not in text]
    return bad


def _suite_sources() -> dict[str, str]:
    root = Path(validation.__file__).parent
    return {m: (root / f"{m}.py").read_text() for m in MODULES}


def test_no_planted_value_reads_a_run():
    assert violations(_suite_sources()) == []


def test_the_walk_flags_a_planted_value_read_from_the_run():
    """The walk itself can fail: planted values computed from a run — directly, through a
    name, a cells list, or a helper's parameter — are each flagged; the same from the
    profile, or under a "given" name, are not."""
    src = '''
def rows(run, ex):
    n = run.rows("SELECT count(*) FROM selection")
    share = n[0][0] / 10
    got = [(d, ex.p("a", d), run.cell_fn("x", d)) for d in ex.domains]
    per = [(d, ex.p("a", d) * share, run.cell_fn("x", d)) for d in ex.domains]
    by_run = [(d, ex.p("a", d), run.cell_fn("x", d)) for d in domains_of(run)]
    given = helper_of(run)
    return [rate_row("1a direct", run.rows("SELECT 1")[0][0], fn),
            rate_row("1b through a name", share, fn),
            cells_row("1c profile only", got),
            cells_row("1d a cell reads the run", per),
            cells_row("1e cells the run chose", by_run),
            diff_row("1f given the run", share, fn),
            _curve(run, "1g through a helper", given),
            _curve(run, "1h given what it retrieved", given),
            _curve(run, "1i profile only", {"x": ex.p("a", "x")}),
            _named(run, "1j", given),
            _named(run, "1k", {"x": ex.p("a", "x")})]


def _named(run, number, planted):
    return cells_row(f"{number} through a helper's f-string name",
                     [(k, v, run.cell_fn("x", k)) for k, v in planted.items()])


def _curve(run, check, planted):
    return cells_row(check, [(k, v, run.cell_fn("x", k)) for k, v in planted.items()])
'''
    bad = violations({"m": src})
    assert sorted(b.split(": ", 1)[1].strip("'\"") for b in bad) == [
        "1a direct", "1b through a name", "1d a cell reads the run", "1e cells the run chose",
        "1g through a helper", "1j through a helper's f-string name"]
