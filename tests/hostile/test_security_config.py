"""Hostile config files (issue 22 items 5 and 11): every case is `edv validate` and
`edv run` exiting 2 with one line naming the file, within seconds, with no run folder
made. Reading is bounded (size, depth, aliases, expanded nodes; see config_files.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from edv_ray.cli import main
from edv_ray.testing.helpers import scripted_config
from tests.hostile.security_kit import one_line, write_yaml

GOOD = scripted_config("http://127.0.0.1:9/v1", Path("/nonexistent"))


def _bomb(levels: int = 9) -> str:
    """The billion-laughs shape: 9 aliases per level, 9 levels → 9⁹ leaves."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def _good_text(tmp: Path) -> str:
    import yaml

    return yaml.safe_dump({**GOOD, "output_dir": str(tmp / "runs")})


CASES = {
    # name: (file text or bytes, the phrase the one line must hold)
    "anchor_bomb": (lambda t: _good_text(t) + _bomb(), "expands to more than"),
    "many_aliases": (lambda t: _good_text(t) + "a: &a x\nb: [" + ", ".join(["*a"] * 1500) + "]\n",
                     "more than 1000 YAML aliases"),
    "deep_flow": (lambda t: "a: " + "[" * 5000 + "]" * 5000 + "\n", "nest"),  # libyaml's or ours
    "deep_block": (lambda t: "".join("  " * i + f"k{i}:\n" for i in range(200)) + "  " * 200 + "v\n",
                   "nests deeper than 64"),
    "huge_file": (lambda t: _good_text(t) + "# " + "x" * 2_000_000 + "\n", "at most 1,000,000 bytes"),
    "not_yaml": (lambda t: "models: {a: 1\nagents: [\n", "is not valid YAML"),
    "tab_indent": (lambda t: "models:\n\tscripted: {}\n", "is not valid YAML"),
    "not_utf8": (lambda t: "run_id: caf\xe9\n".encode("latin-1"), "is not UTF-8"),
    "binary": (lambda t: bytes(range(256)) * 4, "is not UTF-8"),
    "top_level_list": (lambda t: "- a\n- b\n", "expected a mapping"),
    "top_level_scalar": (lambda t: "hello\n", "expected a mapping"),
    "extends_list": (lambda t: "extends: [a.yaml, b.yaml]\n", "`extends` must be the name of one"),
    "extends_number": (lambda t: "extends: 42\n", "`extends` must be the name of one"),
    "extends_mapping": (lambda t: "extends: {file: a.yaml}\n", "`extends` must be the name of one"),
    "extends_empty": (lambda t: "extends: ''\n", "`extends` is empty"),
    "extends_missing": (lambda t: "extends: nope.yaml\n", "`extends` file nope.yaml not found"),
    "extends_folder": (lambda t: "extends: .\n", "`extends` file . not found"),
    "extends_self": (lambda t: "extends: cfg.yaml\n", "`extends` cycle"),
    "wrong_types": (lambda t: _good_text(t) + "seed: many\nruntime: {concurrency: lots}\n",
                    "runtime.concurrency"),
    "unknown_field": (lambda t: _good_text(t) + "sede: 1\n", "sede: unknown field"),
}


@pytest.fixture(scope="module", autouse=True)
def _imports_done(tmp_path_factory):
    """The first CLI call imports the package (seconds): not part of any case's time."""
    main(["validate", str(tmp_path_factory.mktemp("warm") / "none.yaml")])


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_config_is_one_line_exit_2(name, tmp_path, capsys):
    make, phrase = CASES[name]
    path = tmp_path / "cfg.yaml"
    content = make(tmp_path)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    for cmd in (["validate", str(path)], ["run", "--no-progress", str(path)]):
        t0 = time.monotonic()
        assert main(cmd) == 2, (name, cmd)
        assert time.monotonic() - t0 < 10, (name, cmd)  # a bounded read, never a hang
        line = one_line(capsys.readouterr().err)
        assert phrase in line and "cfg.yaml" in line, line
    assert not (tmp_path / "runs").exists()


def test_extends_chain_is_bounded(tmp_path, capsys):
    for i in range(20):
        write_yaml(tmp_path / f"c{i}.yaml", {"extends": f"c{i + 1}.yaml"} if i < 19 else GOOD)
    assert main(["validate", str(tmp_path / "c0.yaml")]) == 2
    assert "longer than 16 files" in one_line(capsys.readouterr().err)


def test_sweep_file_bomb_is_refused(tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text("sweep_id: s\nbase: cfg.yaml\naxes: {seed: [1, 2]}\n" + _bomb())
    t0 = time.monotonic()
    assert main(["sweep", str(path)]) == 2 and time.monotonic() - t0 < 10
    assert "expands to more than" in one_line(capsys.readouterr().err)
