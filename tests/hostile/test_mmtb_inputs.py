"""Hostile MMTB data files: every malformed record is refused with one line naming the
file, the line and the field; duplicate dialogue ids are refused (they used to collapse:
validate counted 2 tasks, the run scored 1); the data file is never changed and no run
folder is left behind."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from edv_ray.config import ConfigError, load_config_dict
from edv_ray.envs.errors import BenchmarkDataError
from edv_ray.envs.mmtb.data import DATA_FILE, load_dialogues
from edv_ray.pipeline import validate
from edv_ray.testing.helpers import scripted_config

GOOD = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "mmtb" / DATA_FILE)
                  .read_text(encoding="utf-8").splitlines()[0])


def entry(**changes) -> dict:
    """The fixture's first dialogue with top-level fields replaced."""
    e = copy.deepcopy(GOOD)
    e.update(changes)
    return e


def node_changed(mission: int, node: int, **changes) -> dict:
    e = copy.deepcopy(GOOD)
    e["english_answer_list"][mission][node].update(changes)
    return e


def line(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n"


CASES = {  # name: (file bytes, what the one-line error must say)
    "not_utf8": (line(GOOD) + b'{"id": "caf\xe9"}\n', ":2 is not UTF-8"),
    "not_json": (b"{oops\n", ":1 is not JSON"),
    "not_an_object": (b"[1, 2]\n", ":1: each line must be a JSON object"),
    "missing_fields": (line({"id": "x", "english_task": ["a"]}), "lacks fields"),
    "task_not_a_list": (line(entry(english_task="one string")),
                        ":1: field english_task: input should be a valid list"),
    "task_ids_not_ints": (line(entry(task_ids=["0", 0, 0, 0])), "field task_ids[0]"),
    "idx_a_string": (line(node_changed(1, 0, idx="0")), "field english_answer_list[1][0].idx"),
    "dependency_a_string": (line(node_changed(1, 3, dependency_list=["0", 1])),
                            "field english_answer_list[1][3].dependency_list[0]"),
    "action_without_name": (line(node_changed(0, 0, action={"arguments": {}})),
                            "field english_answer_list[0][0].action.name"),
    "no_observation": (line({**GOOD, "english_answer_list": [
        [{k: v for k, v in n.items() if k != "observation"} for n in m]
        for m in GOOD["english_answer_list"]]}), "observation: field required"),
    "content_null": (line(entry(english_messages=[{"role": "user", "content": None}]
                                + GOOD["english_messages"][1:])), "field english_messages[0]"),
    "tool_without_function": (line(entry(english_tools=[{"name": "f"}])),
                              "field english_tools[0].function"),
    "required_not_a_list": (line(entry(english_tools=[{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {}, "required": "a"}}}])),
        "required: input should be a valid list"),
    "id_a_number": (line(entry(id=7)), "field id"),
    "id_empty": (line(entry(id=[])), "field id is empty"),
    "duplicate_id": (line(GOOD) + line(GOOD), ":2: dialogue id 'mmtb-1' is already used on line 1"),
    "duplicate_id_joined": (line(GOOD) + line(entry(id=["mmtb-", "1"])),
                            "dialogue id 'mmtb-1' is already used on line 1"),
    "env_info_without_weekday": (line(entry(env_info="当前时间：2024-05-10 10:00:00")),
                                 "env_info must hold a weekday"),
    "env_info_count": (line(entry(env_info=["当前时间：2024-05-10 10:00:00 星期五"])),
                       "env_info has 1 entries for 4 missions"),
    "lists_disagree": (line(entry(task_ids=[0, 0])), "per-mission lists disagree"),
    "dependency_cycle": (line(node_changed(1, 0, dependency_list=[3])), "dependency cycle"),
    "dependency_missing": (line(node_changed(1, 0, dependency_list=[9])),
                           "depends on missing nodes [9]"),
    "idx_not_position": (line(node_changed(1, 1, idx=7)), "node 1 has idx 7"),
    "mission_without_nodes": (line({**GOOD, "english_answer_list":
                                    GOOD["english_answer_list"][:3] + [[]]}), "no gold nodes"),
    "bare_string_message": (line(entry(english_messages=GOOD["english_messages"][:1]
                                       + ["hello"] + GOOD["english_messages"][1:])),
                            "bare string without '====='"),
    "roles_do_not_alternate": (line(entry(english_messages=[
        {"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
        + GOOD["english_messages"][2:])), "mission 0: messages must alternate"),
    "segment_ends_with_user": (line(entry(english_messages=GOOD["english_messages"][:1]
                                          + GOOD["english_messages"][2:])),
                               "mission 0: messages must alternate"),
    "arguments_missing": (line(node_changed(0, 0, action={"name": "get_weather"})),
                          "field english_answer_list[0][0].action.arguments: field required"),
    "task_id_on_assistant": (line(entry(task_ids=[1, 0, 0, 0])), "task_ids[0]=1 is not a user"),
    "arguments_not_json": (line(node_changed(0, 0, action={"name": "get_weather",
                                                           "arguments": "{nope"})),
                           "arguments is a string that is not a JSON object"),
    "empty_file": (b"\n\n", "holds no dialogues"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_malformed_record_is_one_line_naming_file_and_line(name, tmp_path):
    data, expected = CASES[name]
    f = tmp_path / DATA_FILE
    f.write_bytes(data)
    with pytest.raises(BenchmarkDataError) as err:
        load_dialogues(tmp_path)
    msg = str(err.value)
    assert expected in msg and "\n" not in msg and str(f) in msg, msg
    assert f.read_bytes() == data  # nothing changed or lost


def test_missing_file_names_the_expected_file(tmp_path):
    with pytest.raises(BenchmarkDataError, match=f"{DATA_FILE} .*in the folder given"):
        load_dialogues(tmp_path)


def _config(tmp_path, data_dir: Path, **bench) -> dict:
    cfg = scripted_config("http://127.0.0.1:9/v1", tmp_path)
    cfg["benchmark"] = {"name": "mmtb", "data_dir": str(data_dir), "split": "all", **bench}
    return cfg


@pytest.mark.parametrize("name", ["duplicate_id", "not_utf8", "idx_a_string"])
def test_validate_refuses_before_any_work(name, tmp_path):
    data, expected = CASES[name]
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / DATA_FILE).write_bytes(data)
    with pytest.raises(ConfigError) as err:
        validate(load_config_dict(_config(tmp_path, folder)))
    assert expected in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "runs").exists()
    assert (folder / DATA_FILE).read_bytes() == data


def test_unknown_metrics_mode_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="metrics"):
        load_config_dict(_config(tmp_path, tmp_path, metrics="lenient"))
