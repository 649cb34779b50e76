"""Hugging Face configs as `model` (dse.catalog.hfconfig): every committed family config maps to the
published parameter count, evaluates through training and serving like its catalog row, and an
unknown family or an unrepresentable field is one ConfigError line naming the field.

The configs under tests/configs/<name>/config.json are copies of the published Hugging Face
config.json files; each names its source in a `_source` key (ignored by the mapping)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dse
from dse import catalog, resolve
from dse.catalog import hfconfig
from dse.errors import ConfigError
from dse.workload import Model

CONFIGS = Path(__file__).parent / "configs"
NAMES = sorted(p.name for p in CONFIGS.iterdir() if (p / "config.json").exists())


def config_path(name: str) -> str:
    return str(CONFIGS / name / "config.json")


def model_of(value) -> Model:
    cols = {"model": np.array([value], dtype=object)}
    resolve.model(cols)
    return Model({k: np.asarray(cols[k][:], dtype=float) for k in cols if k != "model"})


# (config, published figure, what it counts, source); "total" = all weights, "non_embedding" = without the
# input embedding and output layer, "active_no_embedding" = weights a token multiplies, embedding lookup left out
PUBLISHED = [
    ("llama3.1-8b", 8.0e9, "total", "Meta Llama 3.1 model card: 8B"),
    ("mistral-7b-v0.1", 7.3e9, "total", "Mistral AI, 'Announcing Mistral 7B' (Sep 2023): a 7.3B parameter model"),
    ("qwen2.5-7b", 7.61e9, "total", "Qwen2.5-7B-Instruct model card: 7.61B parameters"),
    ("qwen2.5-7b", 6.53e9, "non_embedding", "Qwen2.5-7B-Instruct model card: 6.53B non-embedding"),
    ("qwen2.5-32b", 32.5e9, "total", "Qwen2.5-32B-Instruct model card: 32.5B parameters"),
    ("qwen2.5-32b", 31.0e9, "non_embedding", "Qwen2.5-32B-Instruct model card: 31.0B non-embedding"),
    ("qwen3-8b", 8.2e9, "total", "Qwen3-8B model card: 8.2B parameters"),
    ("qwen3-8b", 6.95e9, "non_embedding", "Qwen3-8B model card: 6.95B non-embedding"),
    ("mixtral-8x7b", 46.7e9, "total", "Mistral AI, 'Mixtral of experts' (Dec 2023): 46.7B total"),
    ("qwen3-30b-a3b", 30.5e9, "total", "Qwen3-30B-A3B model card: 30.5B total"),
    ("qwen3-30b-a3b", 29.9e9, "non_embedding", "Qwen3-30B-A3B model card: 29.9B non-embedding"),
    ("deepseek-v3", 671e9, "total", "DeepSeek-V3 technical report (arXiv 2412.19437): 671B total parameters"),
    ("gpt-oss-120b", 116.83e9, "total", "OpenAI gpt-oss model card (arXiv 2508.10925) Table 1: 116.83B total"),
    ("gpt-oss-120b", 5.13e9, "active_no_embedding", "OpenAI gpt-oss model card Table 1: 5.13B active"),
    ("gpt-oss-20b", 20.91e9, "total", "OpenAI gpt-oss model card Table 1: 20.91B total"),
    ("gpt-oss-20b", 3.61e9, "active_no_embedding", "OpenAI gpt-oss model card Table 1: 3.61B active"),
    ("llama4-maverick", 400e9, "total", "Meta Llama 4 model card: Maverick 17B active, 400B total"),
    ("gemma3-27b", 27.016e9, "total", "Gemma 3 technical report (arXiv 2503.19786) Table 1: 1,416M embedding + 25,600M "
                                      "non-embedding (the 417M vision encoder is not modelled)"),
    ("gemma3-27b", 25.6e9, "non_embedding", "Gemma 3 technical report Table 1: 25,600M non-embedding"),
    ("nemotron-h-56b", 56e9, "total", "Nemotron-H (arXiv 2504.03624): Nemotron-H-56B-Base, 56B parameters"),
    ("nemotron3-nano-30b-a3b", 31.6e9, "total", "NVIDIA Nemotron 3 Nano 30B-A3B model card: 31.6B total parameters"),
    ("nemotron3-nano-30b-a3b", 3.6e9, "active", "NVIDIA Nemotron 3 Nano model card: 3.2B active, 3.6B including embeddings"),
    ("qwen3-next-80b-a3b", 80e9, "total", "Qwen3-Next-80B-A3B model card: 80B total, 3B activated"),
    ("qwen3.5-397b-a17b", 397e9, "total", "Qwen3.5-397B-A17B model card: 397B total, 17B activated (with its vision "
                                          "encoder, which dse does not model)"),
    ("qwen3.5-27b", 27e9, "total", "Qwen3.5-27B model card: 27B parameters (with its vision encoder)"),
    ("glm-5", 744e9, "total", "zai-org GLM-5 model card: 744B parameters, 40B active"),
    ("deepseek-v3.2", 671e9, "total", "DeepSeek-V3's 671B and the indexer's 0.85B (the DeepSeek-V3.2 card's 685B "
                                      "includes the 14B multi-token-prediction module, not counted here)"),
    ("deepseek-v4-flash", 284e9, "total", "DeepSeek-V4-Flash model card: 284B total parameters (the "
                                          "multi-token-prediction layer not counted, as DeepSeek-V3's 671B)"),
    ("qwen3-32b", 32.8e9, "total", "Qwen3-32B model card: 32.8B parameters"),
    ("qwen3-32b", 31.2e9, "non_embedding", "Qwen3-32B model card: 31.2B non-embedding"),
    ("minimax-m2.5", 230e9, "total", "MiniMax-M2 release (minimax.io/news/minimax-m2): 230B total parameters"),
    ("nemotron3-ultra-550b-a55b", 550e9, "total", "NVIDIA Nemotron 3 Ultra model name: 550B total, A55B active"),
    ("nemotron3-ultra-550b-a55b", 55e9, "active_no_embedding", "NVIDIA Nemotron 3 Ultra model name: A55B, the weights a token multiplies"),
    ("qwen3-coder-480b-a35b", 480e9, "total", "Qwen3-Coder-480B-A35B-Instruct model card: 480B total, 35B activated"),
    ("qwen3.5-122b-a10b", 122e9, "total", "Qwen3.5-122B-A10B model name: 122B total (with its vision encoder, not modelled)"),
    ("qwen3.5-35b-a3b", 35e9, "total", "Qwen3.5-35B-A3B model name: 35B total (with its vision encoder, not modelled)"),
    # safetensors headers of nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16 (as a public model-sheet parser's
    # tests tally them): 123,611,033,088 parameters, of which 2,942,324,736 are the multi-token-prediction
    # block (not part of the model counted here) and 20,992 FP32 router correction biases; 107,898,470,400
    # are the backbone's 490 inactive experts of each token
    ("nemotron3-super-120b-a12b", 123_611_033_088 - 2_942_324_736 - 20_992, "total",
     "Nemotron 3 Super checkpoint headers: 120,668,687,360 backbone parameters (LatentMoE experts on a 1024-wide latent)"),
    ("nemotron3-super-120b-a12b", 123_611_012_096 - 2_942_324_736 - 107_898_470_400, "active",
     "Nemotron 3 Super checkpoint headers: 12,770,216,960 parameters a token touches"),
]


def counted(m: Model, what: str) -> float:
    if what == "total":
        return float(m.total_params[0])
    if what == "non_embedding":
        return float(m.total_params[0] - m.embedding_params[0] - m.output_params[0])
    if what == "active":
        return float(m.active_params[0])
    return float(m.active_params[0] - m.embedding_params[0])


@pytest.mark.parametrize("name,figure,what,source", PUBLISHED, ids=[f"{p[0]}-{p[2]}" for p in PUBLISHED])
def test_parameters_equal_the_published_figure_within_1pct(name, figure, what, source):
    assert counted(model_of(config_path(name)), what) == pytest.approx(figure, rel=0.01), source


def test_deepseek_v4_parameters_against_their_rounded_published_figures():
    """The DeepSeek-V4 model cards round: Flash '13B activated', Pro '1.6T total' and '49B activated'.
    The configs' weights give 12.7B per Flash token without the embeddings, 1.57T for Pro and 48-50B
    per Pro token (without or with the embeddings), each within the cards' rounding."""
    flash, pro = model_of(config_path("deepseek-v4-flash")), model_of(config_path("deepseek-v4-pro"))
    assert counted(flash, "active_no_embedding") == pytest.approx(13e9, abs=0.5e9)
    assert counted(pro, "total") == pytest.approx(1.6e12, abs=0.05e12)
    assert counted(pro, "active_no_embedding") < 49.5e9 < counted(pro, "active") + 1e9


def test_kimi_k2_parameters_against_its_rounded_published_total():
    """Kimi K2's model card gives '1T total' (the tech report, arXiv 2507.20534, 1.04T): the config's
    weights sum to 1.026T, within the card's rounding; the 1.3% to the report's figure is not in the config
    (no multi-token-prediction layer: num_nextn_predict_layers 0)."""
    assert counted(model_of(config_path("kimi-k2")), "total") == pytest.approx(1.0e12, rel=0.03)


def test_minimax_m2_active_parameters_against_its_rounded_published_figure():
    """MiniMax's '10B active' (minimax.io/news/minimax-m2): 62 layers of attention and 8 of 256
    experts are 10.4B without the embedding lookup, within the figure's rounding."""
    assert counted(model_of(config_path("minimax-m2.5")), "active_no_embedding") == pytest.approx(10e9, rel=0.05)


def test_kimi_k25_text_decoder_maps_like_kimi_k2():
    """Kimi K2.5 wraps a Kimi K2 decoder (`text_config`) with a vision encoder dse does not model."""
    k25 = hfconfig.model_columns(config_path("kimi-k2.5"))
    assert k25 == hfconfig.model_columns(config_path("kimi-k2"))
    assert catalog.resolve_model("Kimi-K2.5") == "kimi-k2"


def test_qwen3_vl_text_decoder_maps_like_qwen3_moe():
    """Qwen3-VL-235B-A22B wraps a Qwen3-MoE decoder (`text_config`) of Qwen3-235B-A22B's dimensions
    (Qwen3-235B-A22B model card: 94 layers, 64 query and 4 KV heads, 128 experts, 8 activated) with a
    vision encoder dse does not model."""
    cols = hfconfig.model_columns(config_path("qwen3-vl-235b-a22b"))
    row = catalog.model("qwen3-235b-a22b")
    for name in ("layers", "hidden", "heads", "kv_heads", "experts", "top_k", "moe_ffn_hidden", "vocab"):
        assert cols[name] == row[name], name


def test_minimax_m2_lightning_attention_layers_are_refused():
    fields = json.loads(Path(config_path("minimax-m2.5")).read_text())
    fields["attn_type_list"] = [0, 1] * 31   # MiniMax-01/M1's lightning (linear) attention
    with pytest.raises(ConfigError, match="attn_type_list"):
        hfconfig.map_config(fields)


def test_llama4_scout_text_model_against_its_published_total():
    """Meta's 109B total includes the vision encoder, which dse does not model: the text model is 1-2% smaller."""
    text = counted(model_of(config_path("llama4-scout")), "total")
    assert 0.98 * 109e9 < text < 109e9


def test_every_family_has_a_committed_config():
    families = {hfconfig.family_of(json.loads(Path(config_path(n)).read_text()), n) for n in NAMES}
    assert families >= {"llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen3_moe", "deepseek_v3", "kimi_k2",
                        "gpt_oss", "llama4", "gemma3", "nemotron_h", "qwen3_next", "kimi_k25", "minimax_m2",
                        "qwen3_5", "qwen3_5_moe", "deepseek_v32", "glm_moe_dsa", "qwen3_vl_moe"}
    for name in NAMES:
        assert json.loads(Path(config_path(name)).read_text())["_source"], name


# ---- the layer types each family maps to -------------------------------------------------------
def test_layer_patterns_reduce_to_shares():
    gpt_oss = model_of(config_path("gpt-oss-120b"))
    assert float(gpt_oss.window_fraction[0]) == 0.5 and float(gpt_oss.window[0]) == 128 and bool(gpt_oss.sinks[0])
    gemma = model_of(config_path("gemma3-27b"))   # 62 layers, every 6th global: 10 global, 52 local
    assert float(gemma.window_fraction[0]) == pytest.approx(52 / 62) and float(gemma.window[0]) == 1024
    scout = model_of(config_path("llama4-scout"))  # every 4th layer NoPE full attention, the others chunked
    assert float(scout.chunk_fraction[0]) == 0.75 and float(scout.chunk[0]) == 8192
    maverick = model_of(config_path("llama4-maverick"))
    assert float(maverick.moe_layers[0]) == 24 and float(maverick.dense_layers[0]) == 24
    nemo = model_of(config_path("nemotron-h-56b"))  # 54 M, 10 *, 54 -
    assert float(nemo.mamba_fraction[0] * 118) == pytest.approx(54)
    assert float(nemo.attention_fraction[0] * 118) == pytest.approx(10)
    assert float(nemo.dense_layers[0]) == pytest.approx(54) and not bool(nemo.gated[0])
    ultra = model_of(config_path("nemotron3-ultra-550b-a55b"))  # transformers 5's layers_block_type, no num_hidden_layers
    assert float(ultra.layers[0]) == 108 and float(ultra.mamba_fraction[0] * 108) == pytest.approx(48)
    assert float(ultra.moe_layers[0]) == pytest.approx(48) and float(ultra.attention_fraction[0] * 108) == pytest.approx(12)
    nano = model_of(config_path("nemotron3-nano-30b-a3b"))  # 23 M, 6 *, 23 E; shared expert 3712 = 2 x 1856
    assert float(nano.moe_layers[0]) == pytest.approx(23) and float(nano.shared_experts[0]) == 2
    qnext = model_of(config_path("qwen3-next-80b-a3b"))
    assert float(qnext.linear_fraction[0]) == 0.75 and bool(qnext.output_gate[0])
    q35 = model_of(config_path("qwen3.5-397b-a17b"))   # Qwen3-Next's mixers in the VL wrapper's text_config
    assert float(q35.linear_fraction[0]) == 0.75 and float(q35.experts[0]) == 512 and float(q35.shared_experts[0]) == 1
    dense35 = model_of(config_path("qwen3.5-27b"))      # the dense member: a SwiGLU MLP on every layer, no experts
    assert float(dense35.linear_fraction[0]) == 0.75 and not bool(dense35.is_moe[0]) and float(dense35.ffn[0]) == 17408
    ds32 = model_of(config_path("deepseek-v3.2"))   # DeepSeek Sparse Attention on every MLA layer
    assert float(ds32.sparse_topk[0]) == 2048 and float(ds32.indexer_heads[0]) == 64 and bool(ds32.is_mla[0])
    glm5 = model_of(config_path("glm-5"))
    assert float(glm5.indexer_heads[0]) == 32 and float(glm5.v_head_dim[0]) == 256 and float(glm5.moe_layers[0]) == 75
    ds = model_of(config_path("deepseek-v3"))
    assert float(ds.kv_cache_dim[0]) == 576 and float(ds.head_dim[0]) == 192 and float(ds.moe_layers[0]) == 58
    mistral = model_of(config_path("mistral-7b-v0.1"))
    assert float(mistral.window_fraction[0]) == 1.0 and float(mistral.window[0]) == 4096


@pytest.mark.parametrize("name", NAMES)
def test_a_config_evaluates_through_training_and_serving(name):
    path = config_path(name)
    train = dse.evaluate_training(pd.DataFrame({"model": [path], "system": "h100-sxm", "gpus": 64, "tp": 1, "pp": 1,
                                                "global_batch": 64, "seq_len": 4096}))
    assert train["infeasible_code"].iloc[0] in (0, 12)  # feasible, or out of memory at this mapping
    assert np.isfinite(train["step_time_s"].iloc[0]) and 0 < train["mfu"].iloc[0] < 1
    serve = dse.evaluate_inference(pd.DataFrame({"model": [path], "system": "h100-sxm", "gpus": 8, "tp": 1, "dp": 8,
                                                 "batch": 8, "isl": 2048, "osl": 256}))
    assert serve["infeasible_code"].iloc[0] in (0, 12)
    assert np.isfinite(serve["ttft_s"].iloc[0]) and serve["tpot_s"].iloc[0] > 0 and serve["kv_cache_bytes"].iloc[0] > 0


CATALOG_TWINS = {"gpt-oss-120b": "gpt-oss-120b", "nemotron-h-56b": "nemotron-h-56b", "deepseek-v3": "deepseek-v3",
                 "qwen3-next-80b-a3b": "qwen3-next-80b-a3b", "gemma3-27b": "gemma3-27b", "llama4-scout": "llama4-scout",
                 "qwen3.5-397b-a17b": "qwen3.5-397b-a17b", "qwen3.5-27b": "qwen3.5-27b",
                 "deepseek-v3.2": "deepseek-v3.2", "glm-5": "glm-5", "nemotron3-ultra-550b-a55b": "nemotron3-ultra-550b-a55b",
                 "qwen3-coder-480b-a35b": "qwen3-coder-480b-a35b", "qwen3.5-122b-a10b": "qwen3.5-122b-a10b",
                 "qwen3.5-35b-a3b": "qwen3.5-35b-a3b", "deepseek-v4-flash": "deepseek-v4-flash",
                 "deepseek-v4-pro": "deepseek-v4-pro"}


@pytest.mark.parametrize("config,name", list(CATALOG_TWINS.items()))
def test_config_and_its_catalog_row_give_the_same_results(config, name):
    frame = pd.DataFrame({"model": [config_path(config), name], "system": "h100-sxm", "gpus": 64, "tp": 2,
                          "global_batch": 128, "seq_len": 4096})
    out = dse.evaluate_training(frame)
    assert out["step_time_s"].iloc[0] == pytest.approx(out["step_time_s"].iloc[1], rel=1e-6)
    assert out["mem_per_gpu_bytes"].iloc[0] == pytest.approx(out["mem_per_gpu_bytes"].iloc[1], rel=1e-6)


def test_a_config_may_be_a_path_a_directory_json_text_or_a_dict():
    path = config_path("qwen3-8b")
    fields = json.loads(Path(path).read_text())
    ways = [path, str(Path(path).parent), json.dumps(fields), fields]
    params = [float(dse.evaluate_training({"model": [w], "system": "h100-sxm", "gpus": 8, "global_batch": 8})["params"][0])
              for w in ways]
    assert params == [params[0]] * 4
    frame = pd.DataFrame({"model": [fields, "llama3.1-8b"], "system": "h100-sxm", "gpus": 8, "global_batch": 8})
    out = dse.evaluate_inference(frame)   # a DataFrame cell may hold the dict; rows mix configs and names
    assert out["params"].iloc[0] == pytest.approx(params[0]) and out["params"].iloc[1] != out["params"].iloc[0]


def test_explicit_columns_win_over_the_config():
    out = dse.evaluate_training({"model": config_path("llama3.1-8b"), "system": "h100-sxm", "gpus": 8,
                                 "seq_len": np.array([1024, 8192]), "global_batch": 8})
    assert out["tokens_per_step"][1] == 8 * out["tokens_per_step"][0]


def test_space_constants_read_a_config():
    row = catalog.model(config_path("nemotron3-nano-30b-a3b"))
    assert row["kv_heads"] == 2 and row["layers"] == 52


# ---- errors: one line naming the field -----------------------------------------------------------
def _one_line_error(value) -> str:
    with pytest.raises(ConfigError) as info:
        model_of(value)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_unknown_family_names_model_type():
    assert _one_line_error({"model_type": "bert", "hidden_size": 768}).startswith("model_type: unknown Hugging Face model family 'bert'")
    assert _one_line_error({"architectures": ["BertModel"]}).startswith("architectures: unknown")
    # an unknown model_type beside an unknown architecture still names model_type
    assert _one_line_error({"model_type": "bert", "architectures": ["BertModel"]}).startswith("model_type: unknown")


def test_a_known_architecture_names_the_family_when_model_type_is_an_engines_label():
    """SGLang's DeepSeek-V4 FP8 checkpoint configs label model_type 'deepseek_ref' beside
    architectures DeepseekV4ForCausalLM: the architecture decides, and the model is the published one."""
    fields = {**json.loads(Path(config_path("deepseek-v4-flash")).read_text()), "model_type": "deepseek_ref"}
    assert counted(model_of(fields), "total") == pytest.approx(counted(model_of(config_path("deepseek-v4-flash")), "total"))


def _broken(name: str, **changes) -> dict:
    fields = json.loads(Path(config_path(name)).read_text())
    for key, value in changes.items():
        fields[key] = value
    return fields


@pytest.mark.parametrize("name,changes,field", [
    ("llama3.1-8b", {"hidden_size": "wide"}, "hidden_size"),
    ("llama3.1-8b", {"num_hidden_layers": 31.5}, "num_hidden_layers"),
    ("llama3.1-8b", {"num_attention_heads": None}, "num_attention_heads"),
    ("gpt-oss-20b", {"layer_types": ["sparse_attention"] * 24}, "layer_types"),
    ("gpt-oss-20b", {"layer_types": ["full_attention"] * 3}, "layer_types"),
    ("nemotron-h-56b", {"hybrid_override_pattern": "M*X-" * 29 + "M*"}, "hybrid_override_pattern"),
    ("nemotron-h-56b", {"hybrid_override_pattern": "M*"}, "hybrid_override_pattern"),
    ("nemotron3-nano-30b-a3b", {"moe_shared_expert_intermediate_size": 3000}, "moe_shared_expert_intermediate_size"),
    ("deepseek-v3", {"kv_lora_rank": -1}, "kv_lora_rank"),
    ("qwen3-next-80b-a3b", {"linear_num_value_heads": None}, "linear_num_value_heads"),
    ("gemma3-27b", {"text_config": "none"}, "text_config"),
])
def test_an_unrepresentable_field_is_one_line_naming_it(name, changes, field):
    message = _one_line_error(_broken(name, **changes))
    assert message.split(":")[0].split(".")[-1] == field, message


def test_a_missing_or_unparsable_file_is_one_line(tmp_path):
    assert _one_line_error(str(tmp_path / "missing" / "config.json")).startswith("model: cannot read")
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    assert _one_line_error(str(bad)).startswith("model:")
    assert _one_line_error("gpt3-175x").startswith("model: unknown model")


def _dse(*args):
    return subprocess.run([sys.executable, "-m", "dse.cli", *args], capture_output=True, text=True,
                          cwd=Path(__file__).parents[1])


def test_cli_train_and_infer_take_a_config_path():
    r = _dse("train", "--model", "tests/configs/nemotron3-nano-30b-a3b/config.json", "--system", "h100-sxm",
             "--gpus", "16", "--ep", "8", "--global-batch", "64", "--seq-len", "4096", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["step_time_s"] > 0 and out["mfu"] > 0
    r = _dse("infer", "--model", "tests/configs/gpt-oss-120b", "--system", "h100-sxm", "--gpus", "4", "--tp", "4",
             "--batch", "8", "--isl", "1024", "--osl", "128")
    assert r.returncode == 0, r.stderr
    assert "ttft_s" in r.stdout


def test_cli_refuses_an_unknown_family_in_one_line(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model_type": "t5", "d_model": 512}))
    r = _dse("train", "--model", str(bad), "--system", "h100-sxm", "--gpus", "8")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("dse: error: model_type:")
