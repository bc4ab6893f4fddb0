"""`memory_from` is checked before any work (issue 22 item 10): a missing folder, a file,
a folder that is no run, a run without that method's memory, a damaged memory file,
another benchmark's run, memory for other domains and an unreadable source config are
each one line from `edv validate` and `edv run` (exit 2), and `edv run` leaves no run
folder behind. The source is a real EDV run on the scripted server."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from edv_ray.cli import main
from tests.hostile.security_kit import one_line, write_yaml
from tests.methods import scripts
from tests.methods.test_methods import config, run

EDV = {"n_executors": 2, "retrieval_tau": -1.0, "poison_per_task": 0}
FIX = Path(__file__).parents[1] / "fixtures"


@pytest.fixture(scope="module")
def source_run(scripted, tmp_path_factory):
    scripted.reset()  # module-scoped: whatever the test before left on the shared server goes
    scripted.agent_modes["bad"] = "nothing"
    scripted.add_script("distiller", scripts.distiller)
    scripted.add_script("verifier", scripts.verifier_all_approve)
    try:
        run_dir = run(config(scripted, tmp_path_factory.mktemp("source"), "edv", edv=EDV))
    finally:
        scripted.reset()
    assert any((run_dir / "memory").rglob("*.parquet"))
    return run_dir


def _memory_files(src: Path) -> list[Path]:
    return sorted((src / "memory").rglob("*.parquet"))


def _other_benchmark(src: Path) -> None:
    import yaml

    cfg = yaml.safe_load((src / "config.yaml").read_text())
    cfg["benchmark"] = {"name": "mmtb", "data_dir": str(FIX / "mmtb"), "split": "all"}
    (src / "config.yaml").write_text(yaml.safe_dump(cfg))


def _other_domain(src: Path) -> None:
    for f in _memory_files(src):
        t = pq.read_table(f)
        i = t.schema.get_field_index("domain")
        pq.write_table(t.set_column(i, "domain", pa.array(["retail"] * len(t), pa.string())), f)


CASES = {
    # name: (make the source from a copy of a good run folder `src`, phrase)
    "missing": (lambda src: shutil.rmtree(src), "no such folder"),
    "a_file": (lambda src: (shutil.rmtree(src), src.write_text("x")), "not a folder"),
    "not_a_run": (lambda src: (shutil.rmtree(src), src.mkdir(), (src / "memory").mkdir()),
                  "not an edv run folder"),
    "no_memory": (lambda src: shutil.rmtree(src / "memory"), "has no memory/ folder"),
    "damaged": (lambda src: _memory_files(src)[0].write_bytes(b"PAR1 cut short"),
                "damaged memory file"),
    "other_benchmark": (_other_benchmark, "a mmtb run; this run is tau2"),
    "other_domain": (_other_domain, "holds no items for domain(s) ['mock']"),
    "bad_config": (lambda src: (src / "config.yaml").write_text("models: [\n"),
                   "its config.yaml cannot be read"),
}


def _target(server, tmp_path: Path, src: Path) -> str:
    cfg = config(server, tmp_path, "edv", edv=EDV, memory_from=str(src))
    return write_yaml(tmp_path / "target.yaml", cfg)


@pytest.mark.slow
def test_a_good_source_validates(server, tmp_path, source_run, capsys):
    assert main(["validate", _target(server, tmp_path, source_run)]) == 0
    assert "config OK" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_memory_from_is_one_line_before_any_work(server, tmp_path, source_run, capsys, name):
    src = tmp_path / "source copy"
    shutil.copytree(source_run, src)
    make, phrase = CASES[name]
    make(src)
    target = _target(server, tmp_path, src)
    for cmd in (["validate", target], ["run", "--no-progress", target]):
        assert main(cmd) == 2, (name, cmd)
        line = one_line(capsys.readouterr().err)
        assert phrase in line and f"memory_from {src}" in line, line
    assert not (tmp_path / "runs").exists()  # nothing left behind
