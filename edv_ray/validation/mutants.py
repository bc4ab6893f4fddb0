"""The mutation table (issue 27): plausible quiet bugs, each applied to a copy of the
tree, and the fast suite run on that copy — does a planted-vs-measured row catch it?

A :class:`Mutant` is a named bug: one or more exact text edits of framework files (each
``old`` must occur exactly once, so a refactor that moves the code makes the mutant fail
loudly instead of testing nothing) and the fast worlds whose checks it can move (running
only those keeps the table affordable; ``coverage`` is check 6's planted outcome tables
and the coverage world's run, 6d). :func:`apply` writes a mutated copy; ``experiments/validation/mutants.py``
runs the suite on it and prints the table (``experiments/validation/README.md``).

Only framework code is mutated — never the simulated engine (the planted world) nor the
suite's own package (``validation/``): a mutant is a bug a framework change could bring.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from edv_ray.validation.runs import INCOMPLETE

COPIED = ("edv_ray", "experiments/validation")  # what a suite run on a copy needs


class StaleMutant(ValueError):
    """An edit's text is not in the tree exactly once: the mutant must be rewritten."""


@dataclass(frozen=True)
class Mutant:
    name: str
    bug: str  # what the bug does, in a user's words
    edits: tuple[tuple[str, str, str], ...]  # (path under the tree, old text, new text)
    worlds: tuple[str, ...]  # the fast worlds (or "coverage") whose rows it can move


def _edit(path: str, old: str, new: str) -> tuple[str, str, str]:
    return (path, old, new)


_STATS = "edv_ray/report/stats.py"
_ADMIT = "edv_ray/methods/edv/stages.py"

MUTANTS: tuple[Mutant, ...] = (
    Mutant("retrieval_nothing", "EDV's retrieval returns nothing",
           (_edit("edv_ray/methods/edv/retrieval.py",
                  "if len(bank) == 0 or not observed_text.strip():", "if True:"),),
           ("main", "epochs", "gains", "epochs_wide")),
    Mutant("retrieval_random", "retrieval ranks the bank at random (the query's embedding is noise)",
           (_edit("edv_ray/memory/retrieval.py",
                  "query = (embedder or bank.embedder).embed_one(query_text)  # type: ignore[arg-type]",
                  "query = l2_normalise(np.random.default_rng(len(query_text)).standard_normal("
                  "bank.dim or 384).astype(np.float32))"),),
           ("relevance",)),
    Mutant("votes_ignored", "verifier votes ignored: every candidate goes to shared memory",
           (_edit("edv_ray/methods/edv/construct.py",
                  'admit({v["verifier"]: bool(v["approve"]) for v in cv})',
                  'admit({v["verifier"]: True for v in cv})'),),
           ("main", "gains", "construction")),
    Mutant("banks_swapped", "shared and private memory swapped",
           (_edit(_ADMIT, 'return "shared", approvers\n    if approvers:\n        return "private", approvers',
                  'return "private", approvers\n    if approvers:\n        return "shared", approvers'),),
           ("main", "construction")),
    # a strict majority of two voters is both of them (the worlds' groups are pairs): the
    # plausible slip is a majority that counts a tie
    Mutant("majority", "unanimity relaxed to a majority (a tie admits)",
           (_edit(_ADMIT, "if len(approvers) == len(approvals):",
                  "if 2 * len(approvers) >= len(approvals):"),),
           ("main", "gains", "construction")),
    Mutant("distiller_in_group", "the 'third-party' distiller drawn from the executing group",
           (_edit("edv_ray/methods/edv/plan.py",
                  "options = sorted(set(cfg.roles.distillers or pool) - set(group))",
                  "options = sorted(group)"),),
           ("main", "construction")),
    Mutant("grades_inverted", "grades inverted in the distiller's and verifiers' prompts",
           (_edit(_ADMIT, '''outcome="{"success" if t.success else "failure"}"''',
                  '''outcome="{"failure" if t.success else "success"}"'''),),
           ("main", "gains", "construction")),
    Mutant("selector_random", "the Model Selector picks at random",
           (_edit("edv_ray/methods/selector.py", "best = sorted(candidates, key=key)[0]",
                  'best = __import__("random").Random(repr(sorted(cells.items()))).choice('
                  "sorted(candidates))"),),
           ("main", "gains", "rates")),
    Mutant("selector_worst", "the Model Selector picks the worst",
           (_edit("edv_ray/methods/selector.py", "best = sorted(candidates, key=key)[0]",
                  "best = sorted(candidates, key=key)[-1]"),),
           ("main", "gains", "rates")),
    Mutant("contamination_halved", "contamination places half the asked share",
           (_edit("edv_ray/methods/contamination.py",
                  "return int(round(share * n_clean / (1.0 - share)))",
                  "return int(round(share * n_clean / (1.0 - share) / 2))"),),
           ("main",)),
    Mutant("poison_wrong_domain", "contamination twins placed in the other domain",
           (_edit("edv_ray/methods/edv/method.py", 'tags=["contamination"], domain=host.domain,',
                  'tags=["contamination"], domain={"airline": "retail", "retail": "airline"}'
                  ".get(host.domain, host.domain),"),),
           ("main",)),
    Mutant("judge_sees_rewards", "the Judge is shown the runs' rewards",
           (_edit("edv_ray/methods/judge.py", 'labels = {f"T{i}": r for i, r in enumerate(ok, 1)}',
                  'labels = {f"T{i}": r for i, r in enumerate(ok, 1)}\n    graded = {k: "success" '
                  'if r["success"] else "failure" for k, r in labels.items()}'),
            _edit("edv_ray/methods/judge.py", """f'<run label="{lab}">\\n""",
                  """f'<run label="{lab}" outcome="{graded[lab]}">\\n""")),
           ("main",)),
    Mutant("agents_mixed", "every agent acts with the first agent's sampling",
           (_edit("edv_ray/runtime/plan.py", "sampling=agent_sampling(a.sampling, seed_epoch, trial),",
                  "sampling=agent_sampling(cfg.agents[0].sampling, seed_epoch, trial),"),),
           ("main",)),
    Mutant("prompt_strategy_ignored", "every agent acts with the default prompt strategy",
           (_edit("edv_ray/runtime/plan.py", "prompt_strategy=a.prompt_strategy,",
                  'prompt_strategy="text_tools",'),),
           ("main",)),
    Mutant("seeds_collapsed", "every agent's sampling seed collapsed to one",
           (_edit("edv_ray/llm/client.py", 'kwargs["seed"] = sampling.seed', 'kwargs["seed"] = 0'),),
           ("homogeneous",)),
    Mutant("rb_stale", "ReasoningBank serves a task's oldest entry, not its latest",
           (_edit("edv_ray/methods/reasoning_bank/store.py",
                  "if key not in latest or entry_seq(e) > entry_seq(latest[key]):",
                  "if key not in latest or entry_seq(e) < entry_seq(latest[key]):"),),
           ("epochs", "epochs_wide")),
    Mutant("clustering_ignored_domain", "a domain's cell treats a task's episodes as independent",
           (_edit("edv_ray/report/compare_units.py",
                  "from edv_ray.report.stats import clustered_rate",
                  "from edv_ray.report.stats import clustered_rate, wilson"),
            _edit("edv_ray/report/compare_units.py",
                  "return {**out, **_rate_fields(pooled)}",
                  "return {**out, **_rate_fields(wilson(pooled.successes, pooled.n))}")),
           ("coverage",)),
    Mutant("clustering_ignored", "every cell treats a task's episodes as independent",
           (_edit(_STATS, "n_eff = min(n_eps, max(n_tasks, p * (1 - p) / var))", "n_eff = n_eps"),
            _edit(_STATS, "        n_eff = n_tasks\n", "        n_eff = n_eps\n")),
           ("coverage",)),
    Mutant("ninety_percent", "90 % intervals printed as 95 %",
           (_edit(_STATS, "weights: Sequence[float] | None = None, confidence: float = 0.95) -> Rate:",
                  "weights: Sequence[float] | None = None, confidence: float = 0.90) -> Rate:"),
            _edit("edv_ray/report/paired.py", "half = float(sps.t.ppf(0.5 + confidence / 2.0, df)) * math.sqrt(var)",
                  "half = float(sps.t.ppf(0.95, df)) * math.sqrt(var)")),
           ("coverage",)),
)

BY_NAME = {m.name: m for m in MUTANTS}
# the tree as it is, on every fast world: the table's first row, which must pass
BASELINE = Mutant("none", "no bug: the tree as it is", (), ("main", "null", "homogeneous", "epochs",
                                                            "gains", "relevance", "coverage"))


def copy_tree(root: Path, dest: Path) -> Path:
    """``root``'s :data:`COPIED` folders at ``dest`` (replacing it), without bytecode."""
    if dest.exists():
        shutil.rmtree(dest)
    for sub in COPIED:
        shutil.copytree(root / sub, dest / sub, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def apply(mutant: Mutant, root: Path, dest: Path) -> Path:
    """Copy the tree's :data:`COPIED` folders from ``root`` to ``dest`` (replacing it) and
    apply the mutant's edits there. Raises :class:`StaleMutant` when an edit's text is
    not found exactly once (in ``root``, before anything is copied)."""
    for path, old, _new in mutant.edits:
        n = (root / path).read_text().count(old)
        if n != 1:
            raise StaleMutant(f"mutant {mutant.name}: {path} holds its text {n} times, not once: "
                              f"{old[:80]!r}")
    copy_tree(root, dest)
    for path, old, new in mutant.edits:
        f = dest / path
        f.write_text(f.read_text().replace(old, new, 1))
    return dest


def refused(log: str) -> str | None:
    """The suite's own refusal in a suite log — a world whose run errs (e.g. the engine
    refusing requests that are not the agent's own) is a finding, not data — or None."""
    for line in log.splitlines():
        if INCOMPLETE in line:
            return line.strip()[:300]
    return None


def framework_own(check: str) -> bool:
    """A row of the framework's own validity table, not a planted-vs-measured row."""
    return check.startswith("0  validity")
