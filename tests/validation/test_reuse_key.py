"""A validation world's finished run is reused only for the same config and the same code."""

from __future__ import annotations

import shutil
from pathlib import Path

from edv_ray.validation import runs
from edv_ray.validation.runs import code_digest


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "edv_ray"
    shutil.copytree(runs.PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_code_digest_moves_with_code_and_prompts_not_docs_or_checks(tmp_path):
    root = _copy(tmp_path)
    base = code_digest(root)
    (root / "README.md").write_text("a changed README changes no run\n")
    (root / "memory" / "README.md").write_text("nor does a package's\n")
    check = root / "validation" / "check_main.py"  # a check reads a run; it changes none
    check.write_text(check.read_text() + "\n# a changed check\n")
    assert code_digest.__wrapped__(root) == base
    engine = root / "simulation" / "planted.py"
    engine.write_text(engine.read_text() + "\n# a changed engine\n")
    changed = code_digest.__wrapped__(root)
    assert changed != base
    prompt = next((root / "methods" / "edv" / "prompts").glob("*.md"))
    prompt.write_text(prompt.read_text() + "\none more instruction\n")
    assert code_digest.__wrapped__(root) not in (base, changed)


def test_world_digest_moves_with_the_code(tmp_path):
    class World:
        config = {"output_dir": "x", "seed": 1}

    root = _copy(tmp_path)
    same = runs.digest(World(), code_digest.__wrapped__(root))
    assert same == runs.digest(World())  # an unchanged copy reuses the run
    step = root / "methods" / "edv" / "stages.py"
    step.write_text(step.read_text() + "\n# a changed method\n")
    assert runs.digest(World(), code_digest.__wrapped__(root)) != same
