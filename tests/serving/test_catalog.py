"""The GPU catalog: serving facts from vLLM recipes and model cards, and the vLLM argv built from them."""

from __future__ import annotations

import json

import pytest

from edv_ray.config import ConfigError
from edv_ray.serving.catalog import (
    CATALOG,
    VLLM_SERVER_MODULE,
    CatalogEntry,
    CatalogError,
    find_entry,
    get_entry,
    gpus_needed,
    markdown_table,
    render_flags,
    vllm_argv,
    vllm_engine_args,
)

# name: (hf id, TP, tool-call parser, reasoning parser, trust_remote_code)
EXPECTED = {
    "mimo-v2-flash": ("XiaomiMiMo/MiMo-V2-Flash", 4, "qwen3_xml", "qwen3", True),
    "glm-4.7-fp8": ("zai-org/GLM-4.7-FP8", 4, "glm47", "glm45", False),
    "minimax-m2.1": ("MiniMaxAI/MiniMax-M2.1", 4, "minimax_m2", "minimax_m2_append_think", True),
    "qwen3-8b": ("Qwen/Qwen3-8B", 1, "hermes", "qwen3", False),
    "qwen3-30b-a3b": ("Qwen/Qwen3-30B-A3B", 1, "hermes", "qwen3", False),
    "llama-3.1-8b-instruct": ("meta-llama/Llama-3.1-8B-Instruct", 1, "llama3_json", None, False),
}


def flag_value(argv: list[str], flag: str) -> str:
    assert flag in argv, f"{flag} missing from {argv}"
    return argv[argv.index(flag) + 1]


def test_catalog_holds_the_paper_pool_and_small_models():
    assert set(CATALOG) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_argv_per_model_matches_the_serving_facts(name):
    hf_id, tp, tool_parser, reasoning_parser, trust = EXPECTED[name]
    entry = CATALOG[name]
    assert (entry.hf_id, entry.tensor_parallel_size, entry.gpus) == (hf_id, tp, tp)
    argv = vllm_argv(name, "served", 8001, python="python3")
    assert argv[:3] == ["python3", "-m", VLLM_SERVER_MODULE]
    assert flag_value(argv, "--model") == hf_id
    assert flag_value(argv, "--served-model-name") == "served"
    assert flag_value(argv, "--tensor-parallel-size") == str(tp)
    assert flag_value(argv, "--tool-call-parser") == tool_parser
    assert "--enable-auto-tool-choice" in argv  # required for tool calls
    if reasoning_parser:
        assert flag_value(argv, "--reasoning-parser") == reasoning_parser
    else:
        assert "--reasoning-parser" not in argv
    assert ("--trust-remote-code" in argv) is trust
    assert argv[-4:] == ["--host", "127.0.0.1", "--port", "8001"]
    assert flag_value(argv, "--max-model-len") == str(entry.max_model_len)
    assert "--pipeline-parallel-size" not in argv


def test_mimo_carries_its_recipe_flags():
    argv = vllm_argv("mimo-v2-flash", "mimo", 1)
    assert flag_value(argv, "--gpu-memory-utilization") == "0.9"
    assert flag_value(argv, "--generation-config") == "vllm"
    assert flag_value(argv, "--max-model-len") == "65536"


def test_pool_entries_fit_four_h200_and_small_ones_one_gpu():
    for e in CATALOG.values():
        assert e.min_vram_gb <= e.gpus * 141, e.name  # 141 GB per H200
    assert all(CATALOG[n].gpus == 1 for n in ("qwen3-8b", "qwen3-30b-a3b", "llama-3.1-8b-instruct"))


def test_lookup_by_name_hub_id_and_local_folder(tmp_path):
    assert find_entry("GLM-4.7-FP8").name == "glm-4.7-fp8"  # names are case-insensitive
    assert find_entry("someone/GLM-4.7-FP8") is None  # another hub repo: no catalog facts
    assert get_entry("zai-org/glm-4.7-fp8").name == "glm-4.7-fp8"  # case-insensitive hub id
    assert flag_value(vllm_argv("zai-org/glm-4.7-fp8", "g", 1), "--model") == "zai-org/GLM-4.7-FP8"
    folder = tmp_path / "MiniMax-M2.1"
    folder.mkdir()
    assert find_entry(str(folder)).name == "minimax-m2.1"
    argv = vllm_argv(str(folder), "mm", 2)
    assert flag_value(argv, "--model") == str(folder)
    assert flag_value(argv, "--tool-call-parser") == "minimax_m2"
    with pytest.raises(CatalogError, match="known:"):
        get_entry("gpt-5")
    assert issubclass(CatalogError, ConfigError)


def test_unknown_weights_get_a_generic_command_line():
    argv = vllm_argv("someone/tiny-model", "tiny", 3)
    assert flag_value(argv, "--model") == "someone/tiny-model"
    assert not {"--tool-call-parser", "--tensor-parallel-size", "--trust-remote-code"} & set(argv)


def test_overrides_replace_add_and_drop_flags():
    args = vllm_engine_args("minimax-m2.1", "mm", {
        "tensor-parallel-size": 8,  # dashed keys are accepted
        "enable_expert_parallel": True,
        "reasoning_parser": "minimax_m2",
        "trust_remote_code": None,  # None drops a catalog flag
        "speculative_config": {"method": "mtp", "num_speculative_tokens": 1},
        "enforce_eager": False,
    })
    assert args["tensor_parallel_size"] == 8 and gpus_needed(args) == 8
    assert "trust_remote_code" not in args
    argv = render_flags(args)
    assert "--enable-expert-parallel" in argv and "--enforce-eager" not in argv
    assert flag_value(argv, "--reasoning-parser") == "minimax_m2"
    assert json.loads(flag_value(argv, "--speculative-config"))["method"] == "mtp"
    assert render_flags({"allowed_origins": ["a", "b"]}) == ["--allowed-origins", "a", "b"]


def test_mimo_eight_h100_layout_needs_eight_gpus():
    args = vllm_engine_args("mimo-v2-flash", "mimo",
                            {"data_parallel_size": 2, "enable_expert_parallel": True})
    assert gpus_needed(args) == 8


@pytest.mark.parametrize("key", ["host", "port", "model", "--port"])
def test_reserved_keys_are_rejected(key):
    with pytest.raises(CatalogError, match="may not set"):
        vllm_engine_args("qwen3-8b", "q", {key: "x"})


def test_entries_validate_themselves():
    with pytest.raises(ValueError, match="native context"):
        CatalogEntry(name="x", hf_id="a/x", params="?", max_model_len=9000,
                     native_context=4096, min_vram_gb=1)
    with pytest.raises(ValueError, match="may not set"):
        CatalogEntry(name="x", hf_id="a/x", params="?", max_model_len=4096,
                     native_context=4096, min_vram_gb=1, extra_args={"port": 1})
    pp = CatalogEntry(name="big", hf_id="a/big", params="?", tensor_parallel_size=8,
                      pipeline_parallel_size=2, max_model_len=4096, native_context=4096,
                      min_vram_gb=1000)
    args = vllm_engine_args("a/big", "big", entry=pp)
    assert pp.gpus == 16 and gpus_needed(args) == 16
    assert args["distributed_executor_backend"] == "ray"  # multi-node runs on Ray


def test_markdown_table_lists_every_model():
    table = markdown_table()
    for e in CATALOG.values():
        assert e.hf_id in table
