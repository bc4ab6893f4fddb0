"""Hostile sweep inputs: every case ends with exit code 2 and one `error:` message before
any work — no sweep folder made, nothing already there changed, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from edv_ray.cli import main
from edv_ray.testing.helpers import scripted_config


@pytest.fixture(scope="module")
def endpoint():
    """An OpenAI-compatible endpoint that answers `GET /models` (no episode ever runs)."""
    from edv_ray.testing.scripted_server import ScriptedServer

    server = ScriptedServer({}).start()
    yield server
    server.stop()


def base(endpoint, tmp_path) -> dict:
    return scripted_config(endpoint.base_url, tmp_path, method="edv", agents=[
        {"name": n, "model": "scripted"} for n in ("a", "b", "c")],
        benchmark={"domains": ["mock"], "split": "all", "num_tasks": 1, "solo": "always",
                   "train_split": "all", "num_train_tasks": 1})


def sweep_file(tmp_path, content, name: str = "sweep.yaml") -> str:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False))
    return str(path)


def grid(endpoint, tmp_path, axes, **over) -> dict:
    return {"sweep_id": "sw", "output_dir": str(tmp_path / "out"),
            "base": base(endpoint, tmp_path), "parallel": 2, "axes": axes, **over}


def refused(capsys, argv, *needles, one_line: bool = True) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    # τ²-bench logs two warnings when it is first imported: not ours
    err = "\n".join(line for line in captured.err.strip().splitlines() if " | WARNING  | " not in line)
    assert err.startswith("error:"), err
    assert "Traceback" not in captured.err + captured.out
    if one_line:
        assert len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


# (axes or sweep overrides, what the message must say) — all refused before any work
GRID_CASES = {
    "same value, other type": ({"contamination": [0.25, "0.25"]}, ["would share the folder sw-0.25"]),
    "labels differing in case": ({"pool": {"A": {"seed": 1}, "a": {"seed": 2}}},
                                 ["would share the folder"]),
    "a value listed twice": ({"seed": [1, 1]}, ["would share the folder sw-1"]),
    "an axis without values": ({"seed": []}, ["axis 'seed' has no values"]),
    "a named axis without values": ({"pool": {}}, ["axis 'pool' has no values"]),
    "no axes": ({}, ["invalid sweep", "axes"]),
    "an axis value that is not a list": ({"seed": 3}, ["invalid sweep", "axes.seed"]),
    "a named override that is not a mapping": ({"pool": {"a": 3}}, ["invalid sweep", "axes.pool"]),
    "folder names over 128 characters": (
        {f"axis{i}": {"x" * 30 + str(i): {"seed": i}} for i in range(5)}, ["longer than 128"]),
    "runtime settings one process has once": ({"runtime.num_cpus": [2, 4]},
                                              ["runtime.num_cpus differs between variants"]),
}


@pytest.mark.parametrize("case", list(GRID_CASES))
def test_bad_grids_are_refused(endpoint, tmp_path, capsys, case):
    axes, needles = GRID_CASES[case]
    path = sweep_file(tmp_path, grid(endpoint, tmp_path, axes))
    refused(capsys, ["sweep", path], *needles)
    assert not (tmp_path / "out").exists()


BAD_SWEEPS = {
    "sweep_id escaping the output folder": ({"sweep_id": "../x"}, ["invalid sweep", "sweep_id"]),
    "parallel 0": ({"parallel": 0}, ["invalid sweep", "parallel"]),
    "an unknown key": ({"paralel": 2}, ["invalid sweep", "paralel"]),
    "base neither a file nor a mapping": ({"base": [1, 2]}, ["invalid sweep", "base"]),
    "a base file that is missing": ({"base": "nope.yaml"}, ["config file not found", "nope.yaml"]),
}


@pytest.mark.parametrize("case", list(BAD_SWEEPS))
def test_bad_sweep_fields_are_refused(endpoint, tmp_path, capsys, case):
    over, needles = BAD_SWEEPS[case]
    path = sweep_file(tmp_path, grid(endpoint, tmp_path, {"seed": [0, 1]}, **over))
    refused(capsys, ["sweep", path], *needles)
    assert not (tmp_path / "out").exists() and not (tmp_path / "x").exists()


FILES = {
    "not YAML": ("axes: [unclosed", ["not valid YAML", "line 2, column 1"]),
    "not a mapping": ("- 1\n- 2\n", ["expected a mapping"]),
    "not UTF-8": (b"sweep_id: \xff\xfe\n", ["not UTF-8"]),
    "empty": ("", ["invalid sweep"]),
}


@pytest.mark.parametrize("case", list(FILES))
def test_unreadable_sweep_files_are_refused(tmp_path, capsys, case):
    content, needles = FILES[case]
    # YAML's own message is folded into one line that still points at the line and column
    refused(capsys, ["sweep", sweep_file(tmp_path, content)], *needles)


def test_a_missing_sweep_file_is_refused(tmp_path, capsys):
    refused(capsys, ["sweep", str(tmp_path / "none.yaml")], "not found")


def test_a_base_that_extends_itself_is_refused(tmp_path, capsys):
    (tmp_path / "base.yaml").write_text("extends: base.yaml\nseed: 1\n")
    path = sweep_file(tmp_path, {"sweep_id": "sw", "output_dir": str(tmp_path / "out"),
                                 "base": "base.yaml", "axes": {"seed": [0]}})
    refused(capsys, ["sweep", path], "`extends` cycle")


def test_an_invalid_variant_is_named(endpoint, tmp_path, capsys):
    """The variant's name used to vanish from the message: rich read `[sw-9]` as markup."""
    path = sweep_file(tmp_path, grid(endpoint, tmp_path, {"edv.n_executors": [2, 9]}))
    err = refused(capsys, ["sweep", path], "variant sw-9", "edv.n_executors=9", one_line=False)
    assert "sw-2" not in err
    assert not (tmp_path / "out").exists()


def test_a_dotted_axis_into_a_plain_value_is_named(endpoint, tmp_path, capsys):
    """`method.x` goes into a string (it used to raise ValueError from dict("edv"))."""
    path = sweep_file(tmp_path, grid(endpoint, tmp_path, {"method.x": [1]}))
    refused(capsys, ["sweep", path], "variant sw-1", "method", one_line=False)


def test_an_unknown_config_path_is_named(endpoint, tmp_path, capsys):
    path = sweep_file(tmp_path, grid(endpoint, tmp_path, {"edv.nonsense": [1, 2]}))
    refused(capsys, ["sweep", path], "variant sw-1", "edv.nonsense", one_line=False)


def test_a_file_where_a_variant_folder_goes(endpoint, tmp_path, capsys):
    runs = tmp_path / "out" / "sw" / "runs"
    runs.mkdir(parents=True)
    (runs / "sw-1").write_text("keep me")
    path = sweep_file(tmp_path, grid(endpoint, tmp_path, {"seed": [0, 1]}))
    refused(capsys, ["sweep", path], "variant sw-1", "is a file")
    assert (runs / "sw-1").read_text() == "keep me" and sorted(p.name for p in runs.iterdir()) == ["sw-1"]


def test_an_output_dir_that_is_a_file(endpoint, tmp_path, capsys):
    (tmp_path / "out").write_text("keep me")
    path = sweep_file(tmp_path, grid(endpoint, tmp_path, {"seed": [0, 1]}))
    refused(capsys, ["sweep", path], "is a file")
    assert (tmp_path / "out").read_text() == "keep me"


@pytest.mark.parametrize("name", ["variants.json", "summary.json"])
def test_a_damaged_sweep_record_is_named_and_kept(endpoint, tmp_path, capsys, name):
    folder = tmp_path / "out" / "sw"
    folder.mkdir(parents=True)
    (folder / name).write_text("{not json")
    path = sweep_file(tmp_path, grid(endpoint, tmp_path, {"seed": [0, 1]}))
    refused(capsys, ["sweep", path], name, "damaged")
    assert (folder / name).read_text() == "{not json"


def test_a_started_variant_without_a_record_needs_accept_changed(endpoint, tmp_path, capsys):
    """A variant folder started by an older edv (no record of its config): not resumed
    silently with whatever the sweep file says now."""
    folder = tmp_path / "out" / "sw"
    (folder / "runs" / "sw-0").mkdir(parents=True)
    (folder / "runs" / "sw-0" / "config.yaml").write_text("seed: 0\n")
    path = sweep_file(tmp_path, grid(endpoint, tmp_path, {"seed": [0, 1]}))
    refused(capsys, ["sweep", path], "sw-0 was started without a record", "--accept-changed")
    assert sorted(p.name for p in (folder / "runs").iterdir()) == ["sw-0"]
