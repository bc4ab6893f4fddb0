"""Hostile benchmark data past the shapes the readers check (issue 28 D10): nesting 10⁵
deep, a 15 MB bad value, a pickle whose memo-shared tables would be copied thousands of
times, files over the size cap. Each is refused by `edv validate` (exit 2, one line
naming the file) or by the reader in one short message, in bounded time and memory —
and the release's shapes still load."""

from __future__ import annotations

import copy
import json
import pickle
import shutil
import struct
import time
import tracemalloc
from pathlib import Path

import pytest
import yaml

from edv_ray.cli import main
from edv_ray.envs.errors import BenchmarkDataError
from edv_ray.envs.mind2web import data as m2w_data
from edv_ray.envs.mind2web import scores as m2w_scores
from edv_ray.envs.mind2web.scores import load_scores
from edv_ray.envs.mmtb import data as mmtb_data
from edv_ray.envs.mmtb.data import DATA_FILE, load_dialogues
from edv_ray.testing.helpers import scripted_config
from tests.hostile.test_mind2web_inputs import _config as _m2w_config

FIX = Path(__file__).resolve().parents[1] / "fixtures"
SPLIT = "test_website"
DEEP = 100_000
GOOD_MMTB = json.loads((FIX / "mmtb" / DATA_FILE).read_text(encoding="utf-8").splitlines()[0])
SHORT = 1000  # a message longer than this is not "one line saying what is wrong"


def _u(text: str) -> bytes:
    """A pickle BINUNICODE opcode."""
    raw = text.encode("utf-8")
    return b"X" + struct.pack("<I", len(raw)) + raw


def _deep_list_pickle() -> bytes:
    """{"scores": {}, "ranks": {"s": {"c": [[[…]]] 10⁵ deep}}}, written opcode by opcode
    (``pickle.dumps`` itself would recurse)."""
    deep = b"]" * DEEP + b"a" * (DEEP - 1)  # EMPTY_LIST × N, then APPEND each into the one below
    return (b"\x80\x02}" + _u("scores") + b"}s" + _u("ranks") + b"}" + _u("s") + b"}" + _u("c")
            + deep + b"sss.")


def _copying_pickle(call: bytes, entries: int = 1000, copies: int = 200) -> bytes:
    """{"scores": {}, "ranks": {sid: CALL(D) for each of ``copies`` sids}}: one table D
    in the memo, copied by each call (``dict(D)``, ``defaultdict(dict, D)``)."""
    table = pickle.dumps({str(i): i for i in range(entries)}, protocol=2)[2:-1]
    put, get = b"r" + struct.pack("<I", 100_000), b"j" + struct.pack("<I", 100_000)
    items = b"".join(_u(f"s{i}") + call.replace(b"@D", get) for i in range(copies))
    return (b"\x80\x02}" + _u("scores") + b"}s" + _u("ranks") + b"}" + table + put + b"0"
            + b"(" + items + b"us.")


DICT_CALL = b"c__builtin__\ndict\n@D\x85R"  # dict(D)
DEFAULTDICT_CALL = b"ccollections\ndefaultdict\nc__builtin__\ndict\n@D\x86R"  # defaultdict(dict, D)


# ---- the folders and configs ------------------------------------------------------------
def _m2w_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "m2w"
    shutil.copytree(FIX / "mind2web", folder, ignore=shutil.ignore_patterns("official"))
    return folder


def _mmtb_config(tmp_path: Path, content: bytes) -> tuple[str, Path]:
    folder = tmp_path / "mmtb"
    folder.mkdir()
    (folder / DATA_FILE).write_bytes(content)
    cfg = scripted_config("http://127.0.0.1:9/v1", tmp_path)
    cfg["benchmark"] = {"name": "mmtb", "data_dir": str(folder), "split": "all"}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path), folder / DATA_FILE


def _one_line(capsys, argv: list[str], names: Path, expect: str) -> str:
    assert main(argv) == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1, lines[:3]
    assert str(names) in lines[0] and expect in lines[0], lines[0][:SHORT]
    assert len(lines[0]) < SHORT, len(lines[0])
    return lines[0]


def _mmtb_line(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n"


# ---- nesting ------------------------------------------------------------------------------
def test_mmtb_line_nested_1e5_deep(tmp_path, capsys):
    cfg, file = _mmtb_config(tmp_path, b"[" * DEEP + b"]" * DEEP + b"\n")
    _one_line(capsys, ["validate", cfg], file, "nested deeper than")
    assert not (tmp_path / "runs").exists()


def test_mmtb_value_nested_past_the_bound(tmp_path, capsys):
    """200 levels inside a gold observation: parsed by json, refused by the depth bound."""
    entry = copy.deepcopy(GOOD_MMTB)
    deep: list = []
    for _ in range(200):
        deep = [deep]
    entry["english_answer_list"][0][0]["observation"] = deep
    cfg, file = _mmtb_config(tmp_path, _mmtb_line(entry))
    _one_line(capsys, ["validate", cfg], file, "nested deeper than 100 levels")


def test_mmtb_arguments_string_nested_1e5_deep(tmp_path):
    entry = copy.deepcopy(GOOD_MMTB)
    entry["english_answer_list"][0][0]["action"]["arguments"] = "[" * DEEP + "]" * DEEP
    (tmp_path / DATA_FILE).write_bytes(_mmtb_line(entry))
    with pytest.raises(BenchmarkDataError, match="arguments is a string that is not a JSON"):
        load_dialogues(tmp_path)


def test_mmtb_dependency_chain_of_5000_nodes_loads(tmp_path):
    """A long but valid dependency chain is checked without recursion (it raised
    RecursionError at ~1,000 nodes)."""
    entry = copy.deepcopy(GOOD_MMTB)
    first = entry["english_answer_list"][0][0]
    chain = [dict(copy.deepcopy(first), idx=i, dependency_list=[i - 1] if i else [])
             for i in range(5000)]
    entry["english_answer_list"][0] = chain
    (tmp_path / DATA_FILE).write_bytes(_mmtb_line(entry))
    (dialogue,) = load_dialogues(tmp_path)
    assert len(dialogue.missions[0].nodes) == 5000
    entry["english_answer_list"][0][0]["dependency_list"] = [4999]  # now a 5000-node cycle
    (tmp_path / DATA_FILE).write_bytes(_mmtb_line(entry))
    with pytest.raises(BenchmarkDataError, match="dependency cycle"):
        load_dialogues(tmp_path)


def test_mind2web_split_nested_1e5_deep(tmp_path, capsys):
    folder = _m2w_folder(tmp_path)
    split_file = folder / SPLIT / f"{SPLIT}_0.json"
    split_file.write_bytes(b"[" * DEEP + b"]" * DEEP)
    _one_line(capsys, ["validate", _m2w_config(tmp_path, folder)], split_file,
              "nested deeper than")
    assert not (tmp_path / "runs").exists()


def test_mind2web_attributes_nested_1e5_deep_count_as_none(tmp_path):
    """A candidate's ``attributes`` string too deep to parse is read like any unparsable
    one (no attributes), not a RecursionError."""
    folder = _m2w_folder(tmp_path)
    split_file = folder / SPLIT / f"{SPLIT}_0.json"
    records = json.loads(split_file.read_text())
    records[0]["actions"][0]["pos_candidates"][0]["attributes"] = "[" * DEEP + "]" * DEEP
    split_file.write_text(json.dumps(records))
    (task,) = m2w_data.load_split(folder, SPLIT)
    assert task.steps[0].pos_candidates[0].attributes == {}


def test_scores_pickle_nested_1e5_deep(tmp_path, capsys):
    folder = _m2w_folder(tmp_path)
    (folder / "scores_all_data.pkl").write_bytes(_deep_list_pickle())
    line = _one_line(capsys, ["validate", _m2w_config(tmp_path, folder)],
                     folder / "scores_all_data.pkl", "expected an integer rank")
    assert "a list of 1 item(s)" in line


# ---- echo -----------------------------------------------------------------------------------
def test_scores_pickle_15_mb_bad_value_is_echoed_short(tmp_path, capsys):
    path = tmp_path / "scores_all_data.pkl"
    path.write_bytes(pickle.dumps({"scores": {}, "ranks": {"s": {"c": "x" * 15_000_000}}}))
    start = time.monotonic()
    with pytest.raises(BenchmarkDataError) as err:
        load_scores(path)
    assert len(str(err.value)) < SHORT and "expected an integer rank" in str(err.value)
    assert time.monotonic() - start < 20
    folder = _m2w_folder(tmp_path)
    shutil.copy(path, folder / "scores_all_data.pkl")
    _one_line(capsys, ["validate", _m2w_config(tmp_path, folder)],
              folder / "scores_all_data.pkl", "str cut at 200")


@pytest.mark.parametrize("data, expect", [
    ({"scores": {"s": {"c": 10 ** 400}}, "ranks": {}}, "an integer of 1329 bits"),  # OverflowError
    ({"scores": {}, "ranks": {10 ** 5000: {"c": 1}}}, "has the key an integer of"),  # str() fails
    ({"scores": {}, "ranks": {("a",) * 3: {"c": 1}}}, "expected a string id"),
], ids=["huge_int_score", "huge_int_step_id", "tuple_step_id"])
def test_scores_pickle_odd_numbers_and_keys(data, expect, tmp_path, capsys):
    folder = _m2w_folder(tmp_path)
    (folder / "scores_all_data.pkl").write_bytes(pickle.dumps(data))
    _one_line(capsys, ["validate", _m2w_config(tmp_path, folder)],
              folder / "scores_all_data.pkl", expect)


def test_mind2web_2_mb_annotation_id_is_echoed_short(tmp_path, capsys):
    folder = _m2w_folder(tmp_path)
    split_file = folder / SPLIT / f"{SPLIT}_0.json"
    split_file.write_text(json.dumps([{"annotation_id": "x" * 2_000_000}]))
    _one_line(capsys, ["validate", _m2w_config(tmp_path, folder)], split_file, "record 0")


def test_mmtb_2_mb_dialogue_id_is_echoed_short(tmp_path, capsys):
    big = _mmtb_line(dict(GOOD_MMTB, id="x" * 2_000_000))
    cfg, file = _mmtb_config(tmp_path, big + big)
    _one_line(capsys, ["validate", cfg], file, "is already used on line 1")


# ---- amplification --------------------------------------------------------------------------
def test_scores_pickle_memo_shared_tables_are_not_expanded(tmp_path):
    """One 2,000-entry table shared by 2,000 steps (a 40 kB pickle): read once, the steps
    share the result (each used to get its own copy: 4 M entries; at the reviewer's
    sizes 355 MB and 18 s for 0.87 MB)."""
    table = {str(i): i for i in range(2000)}
    path = tmp_path / "scores_all_data.pkl"
    path.write_bytes(pickle.dumps({"scores": {}, "ranks": {f"s{i}": table
                                                           for i in range(2000)}}))
    assert path.stat().st_size < 60_000
    start = time.monotonic()
    tracemalloc.start()
    try:
        got = load_scores(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.monotonic() - start < 10
    assert peak < 20_000_000, peak  # a copy per step: ~200 MB
    assert len(got.ranks) == 2000 and got.ranks["s0"] is got.ranks["s1999"]
    assert got.ranks["s7"]["1999"] == 1999


@pytest.mark.parametrize("call", [DICT_CALL, DEFAULTDICT_CALL], ids=["dict", "defaultdict"])
def test_scores_pickle_copying_calls_are_refused(call, tmp_path):
    raw = _copying_pickle(call)
    path = tmp_path / "scores_all_data.pkl"
    path.write_bytes(raw)
    with pytest.raises(BenchmarkDataError, match="refused: it builds .*nothing from it was run"):
        load_scores(path)
    real = pickle.loads(raw)  # the bytes are a real pickle: the plain unpickler copies
    assert len(real["ranks"]) == 200 and real["ranks"]["s0"] is not real["ranks"]["s1"]


# ---- size -------------------------------------------------------------------------------------
@pytest.mark.parametrize("reader", ["mmtb", "mind2web", "scores"])
def test_files_over_the_size_cap_are_refused_before_reading(reader, tmp_path, monkeypatch):
    if reader == "mmtb":
        monkeypatch.setattr(mmtb_data, "MAX_FILE_BYTES", 100)
        (tmp_path / DATA_FILE).write_bytes(_mmtb_line(GOOD_MMTB))
        call, file = (lambda: load_dialogues(tmp_path)), tmp_path / DATA_FILE
    elif reader == "mind2web":
        monkeypatch.setattr(m2w_data, "MAX_FILE_BYTES", 100)
        folder = _m2w_folder(tmp_path)
        call, file = (lambda: m2w_data.load_split(folder, SPLIT)), \
            folder / SPLIT / f"{SPLIT}_0.json"
    else:
        monkeypatch.setattr(m2w_scores, "MAX_FILE_BYTES", 100)
        file = FIX / "mind2web" / "scores_all_data.pkl"
        def call():
            return load_scores(file)
    with pytest.raises(BenchmarkDataError, match="over the 100-byte limit") as err:
        call()
    assert str(file) in str(err.value)


def test_the_release_shapes_still_load():
    got = load_scores(FIX / "mind2web" / "scores_all_data.pkl")
    assert got.ranks["tw-1_a1"] == {"910": 0, "901": 1, "911": 2, "912": 3}
    assert len(load_dialogues(FIX / "mmtb")) >= 1
