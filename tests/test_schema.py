"""The column schema, framework presets and shared input handling of the evaluators."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dse
from dse import catalog, resolve, schema
from dse.cli import main
from dse.errors import ConfigError

TRAIN = dict(model="llama3.1-8b", system="h100-sxm", gpus=64, tp=2, pp=2, global_batch=256, micro_batch=1)
INFER = dict(model="llama2-70b", system="h100-sxm", gpus=4, tp=4, batch=8, isl=1024, osl=128)


def one(fn, **kw):
    return fn({k: np.array([v], dtype=object if isinstance(v, str) else None) for k, v in kw.items()})


def test_misspelled_column_is_an_error_with_the_closest_name():
    with pytest.raises(ConfigError, match=r"^micro_bach: unknown input column \(did you mean micro_batch"):
        one(dse.evaluate_training, **TRAIN, micro_bach=4)
    with pytest.raises(ConfigError, match="^bacth: .*did you mean batch"):
        one(dse.evaluate_inference, **INFER, bacth=4)
    with pytest.raises(ConfigError, match="^nodee: "):
        dse.evaluate_hardware({"nodee": ["n3"], "die_area_mm2": [800.0]})
    # a framework's name of a column (Megatron-LM's argument, misspelt or not) suggests dse's
    with pytest.raises(ConfigError, match=r"^tensor_paralel: .*did you mean tp\?"):
        one(dse.evaluate_training, **TRAIN, tensor_paralel=2)
    with pytest.raises(ConfigError, match=r"^pipeline_model_parallel_size: .*did you mean pp"):
        one(dse.evaluate_training, **TRAIN, pipeline_model_parallel_size=2)


def test_user_columns_pass_through_untouched():
    out = dse.evaluate_training(pd.DataFrame({**{k: [v] for k, v in TRAIN.items()}, "user_label": ["a"]}))
    assert list(out["user_label"]) == ["a"] and out["fits"].all()


@pytest.mark.parametrize("fn, base", [(dse.evaluate_training, TRAIN), (dse.evaluate_inference, INFER)])
def test_every_evaluator_accepts_the_shared_columns(fn, base):
    shared = dict(framework="default", precision="fp8", topology="fat-tree", ep=1, dp=base["gpus"] // base["tp"] // base.get("pp", 1),
                  lifetime_years=5.0, electricity_usd_per_kwh=0.1, pue=1.3, flash_attention=True)
    out = one(fn, **base, **shared)
    assert bool(out["fits"][0]) and int(out["infeasible_code"][0]) == 0
    assert np.isfinite(out["cost_per_million_tokens_usd"][0])


def _spelled_out(preset: str) -> dict:
    """The preset's settings as explicit columns (blank -> the default row; sp blank -> on with TP)."""
    table = catalog.frameworks()
    row, default = table.loc[preset], table.loc["default"]
    cols = {}
    for name in resolve.SETTINGS:
        v = row[name] if not pd.isna(row[name]) and row[name] != "" else default[name]
        if pd.isna(v):
            continue
        cols[name] = v if name in schema.ENUMS else float(v)
    return cols


TRAINING_PRESETS = [n for n, k in zip(catalog.frameworks()["name"], catalog.frameworks()["kind"]) if k != "inference"]
SERVING_PRESETS = [n for n, k in zip(catalog.frameworks()["name"], catalog.frameworks()["kind"]) if k != "training"]


@pytest.mark.parametrize("preset", TRAINING_PRESETS)
def test_training_preset_equals_its_columns_spelled_out(preset):
    frame = pd.DataFrame([{**TRAIN, "model": "mixtral-8x7b" if "mixtral-8x7b" in catalog.models().index else TRAIN["model"],
                           "ep": 1, "tp": tp} for tp in (1, 2, 4)])
    by_name = dse.evaluate_training(frame.assign(framework=preset))
    spelled = dse.evaluate_training(frame.assign(**_spelled_out(preset)))
    for col in ("step_time_s", "mem_per_gpu_bytes", "dp_comm_s", "tp_comm_s", "recompute_s"):
        np.testing.assert_array_equal(by_name[col].to_numpy(), spelled[col].to_numpy(), err_msg=f"{preset} {col}")


@pytest.mark.parametrize("preset", SERVING_PRESETS)
def test_serving_preset_equals_its_columns_spelled_out(preset):
    frame = pd.DataFrame([INFER, {**INFER, "batch": 64}])
    by_name = dse.evaluate_inference(frame.assign(framework=preset))
    spelled = dse.evaluate_inference(frame.assign(**{k: v for k, v in _spelled_out(preset).items()
                                                     if k in ("flash_attention", "gqa_kv_sharing", "launch_overhead_s",
                                                              "layer_overhead_s", "collective_overhead_s",
                                                              "custom_all_reduce")}))
    np.testing.assert_array_equal(by_name["tpot_s"].to_numpy(), spelled["tpot_s"].to_numpy())


def test_explicit_column_wins_over_the_preset():
    a = one(dse.evaluate_training, **TRAIN, framework="megatron-lm")
    b = one(dse.evaluate_training, **TRAIN, framework="megatron-lm", recompute="none")
    assert b["recompute_s"][0] == 0 < a["recompute_s"][0]  # megatron-lm recomputes fully unless told
    with pytest.raises(ConfigError, match="^framework: unknown framework 'megatron-xl'"):
        one(dse.evaluate_training, **TRAIN, framework="megatron-xl")


def test_preset_aliases_resolve_case_insensitively():
    a = one(dse.evaluate_training, **TRAIN, framework="NeMo 24.07")
    b = one(dse.evaluate_training, **TRAIN, framework="nemo")
    assert a["step_time_s"][0] == b["step_time_s"][0]


def test_inference_honours_the_topology_when_tp_leaves_the_scaleup_domain():
    # TP 16 on 8-GPU NVLink domains: the all-reduces cross the scale-out network, whose topology matters
    wide = {**INFER, "gpus": 16, "tp": 16, "batch": 16}
    tpot = {t: float(one(dse.evaluate_inference, **wide, topology=t)["tpot_s"][0]) for t in schema.ENUMS["topology"]}
    assert tpot["fat-tree"] != tpot["torus3d"] and tpot["fat-tree"] != tpot["torus2d"]
    # inside one scale-up domain the topology between domains plays no part
    inside = {t: float(one(dse.evaluate_inference, **INFER, topology=t)["tpot_s"][0]) for t in schema.ENUMS["topology"]}
    assert len(set(inside.values())) == 1


def test_reason_codes_are_unique_and_results_carry_them():
    assert len({r.code for r in schema.REASONS}) == len(schema.REASONS)
    assert all(r.field in schema.columns() for r in schema.REASONS if r.field)
    out = one(dse.evaluate_training, **{**TRAIN, "tp": 3, "gpus": 48})
    assert int(out["infeasible_code"][0]) == schema.REASON_CODE["tp_heads"]
    assert out["infeasible_reason"][0] == schema.REASON_TEXT[schema.REASON_CODE["tp_heads"]]


def test_domains():
    assert list(schema.out_of_domain("tp", [1, 2, 0, -1, 1.5, np.nan])) == [False, False, True, True, True, True]
    assert list(schema.out_of_domain("zero", [0, 3, 4])) == [False, False, True]
    assert list(schema.out_of_domain("memory_efficiency", [0.5, 1.0, 0.0, 1.2])) == [False, False, True, True]
    assert list(schema.out_of_domain("memory_capacity_bytes", [np.inf, 1.0, 0.0])) == [False, False, True]
    schema.check_value("tp", 8)
    with pytest.raises(ConfigError, match="^zero: 7 is outside"):
        schema.check_value("zero", 7)


def test_every_schema_column_has_a_unit_column_and_doc():
    for c in schema.columns().values():
        assert c.doc and c.dtype in ("name", "int", "float", "bool", "enum", "str"), c.name
        for suffix, unit in (("_s", "s"), ("_bytes", "bytes"), ("_usd", "USD"), ("_w", "W"), ("_mm2", "mm2")):
            if c.name.endswith(suffix) and "/" not in c.unit:
                assert c.unit == unit, c.name


def test_catalog_aliases_are_one_resolver_for_every_catalog():
    for kind in catalog.NAMED:
        index = catalog.aliases(kind)
        assert index and all(catalog.resolve(kind, a.upper()) == n for a, n in list(index.items())[:20])


@pytest.mark.parametrize("repo_id, model", [
    ("meta-llama/Llama-3.1-8B-Instruct", "llama3.1-8b"), ("nvidia/Llama-3.1-405B-Instruct-FP8", "llama3.1-405b"),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"), ("Qwen/Qwen3-30B-A3B-Instruct-2507", "qwen3-30b-a3b"),
    ("nvidia/DeepSeek-R1-NVFP4", "deepseek-v3"), ("google/gemma-3-27b-it", "gemma3-27b")])
def test_a_published_checkpoint_resolves_to_its_architecture(repo_id, model):
    # a Hugging Face repo id of a tuned or quantized release names the same layer shapes
    assert catalog.resolve_model(repo_id) == model
    with pytest.raises(ConfigError, match="unknown model"):
        catalog.resolve_model(repo_id.replace("/", "/Nope-"))


@pytest.mark.parametrize("spelling, model", [
    # as benchmark tables and papers print them: words apart, underscores, a release's own tags
    ("DeepSeek R1", "deepseek-v3"), ("Qwen3 235B A22B", "qwen3-235b-a22b"), ("Llama 2 70B", "llama2-70b"),
    ("Nemotron-H 56B", "nemotron-h-56b"), ("Nemotron 4 340B", "nemotron4-340b"), ("Grok 1", "grok-1"),
    ("GPT-OSS 120B", "gpt-oss-120b"), ("LLAMA3_70B", "llama3.1-70b"), ("Mixtral 8x7B Instruct v0.1", "mixtral-8x7b"),
    ("Llama 3.1 8B Instruct FP8", "llama3.1-8b"), ("DeepSeek-V3-0324", "deepseek-v3"), ("Kimi-K2-Thinking", "kimi-k2"),
    # a vendor's word heading the repo name (Hugging Face ids of Meta's and NVIDIA's releases)
    ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama3.1-8b"), ("Meta-Llama-3-70B", "llama3.1-70b"),
    ("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16", "nemotron3-super-120b-a12b"),
    ("Qwen/Qwen3.5-397B-A17B-FP8", "qwen3.5-397b-a17b"),
    # a minor version written with an underscore, as Megatron-Bridge's performance tables name models
    ("LLAMA3_1_405B", "llama3.1-405b"), ("Nemotron_3_5_Lightning", "nemotron3-nano-30b-a3b"),
    ("Qwen3_5_397B_a17B", "qwen3.5-397b-a17b"), ("DeepSeekV4 Flash", "deepseek-v4-flash"),
    ("Qwen3_235B_a22B", "qwen3-235b-a22b"), ("GPT3_5B", "gpt3-5b"),
    # NeMo's recipe names of Llama 4 (nemo/collections/llm/recipes/llama4_e16.py, llama4_e128.py) and
    # Megatron-Bridge 25.11's 'DeepSeekV3 (w/o MTP)' row label
    ("LLAMA4_E16", "llama4-scout"), ("LLAMA4_E128", "llama4-maverick"), ("DeepSeekV3 (w/o MTP)", "deepseek-v3"),
    # Megatron-Bridge's recipe names (scripts/performance/dump_perf_configs.py): llama31_405b
    ("llama31_405b", "llama3.1-405b"), ("llama33_70b", "llama3.1-70b"),
    # an MoE name without its active-parameter tail, where one catalog model has it
    ("Qwen3_Next_80B", "qwen3-next-80b-a3b"), ("Qwen3.5-397B", "qwen3.5-397b-a17b"), ("qwen3-30b", "qwen3-30b-a3b")])
def test_a_printed_model_name_resolves_whatever_its_separators(spelling, model):
    assert catalog.resolve_model(spelling) == model


def test_a_model_name_with_mtp_points_to_the_mtp_layers_column():
    with pytest.raises(ConfigError, match=r"^model: unknown model 'DeepSeekV3 \(w/ MTP\)'.*mtp_layers column"):
        catalog.resolve_model("DeepSeekV3 (w/ MTP)")


@pytest.mark.parametrize("spelling", ["DeepSeekV3 (w/ MTP)", "Qwen3-31B", "qwen3-a3b"])
def test_a_name_that_would_drop_a_setting_or_guess_a_size_stays_unknown(spelling):
    # '(w/ MTP)' is a mapping (mtp_layers), not a model: resolving it to DeepSeek-V3 would drop the
    # layer silently; a size no catalog model has is not the nearest one
    with pytest.raises(ConfigError):
        catalog.resolve_model(spelling)


def test_a_tail_two_models_share_resolves_to_neither():
    # were two catalog models 'x-80b-a3b' and 'x-80b-a12b', 'x-80b' would name neither
    from dse.catalog import ACTIVE_PARAMS, compact, unambiguous
    pairs = [("x-80b-a3b", "one"), ("x-80b-a12b", "two"), ("y-30b-a3b", "three")]
    index = unambiguous(pairs, lambda spelling: compact(ACTIVE_PARAMS.sub("", spelling)))
    assert index == {"y30b": "three"}


@pytest.mark.parametrize("kind, spelling, name", [
    ("framework", "megatron_bridge", "megatron-bridge"), ("framework", "TensorRT LLM", "tensorrt-llm"),
    ("framework", "Megatron Core", "megatron-core"), ("network", "ib ndr", "ib-ndr")])
def test_every_catalog_reads_spaces_and_underscores_as_hyphens(kind, spelling, name):
    assert catalog.resolve(kind, spelling) == name


@pytest.mark.parametrize("spelling", [
    "gpt-35b",              # a hyphen between two numbers separates them: not gpt3-5b
    "Nemotron Nano 9B v2",  # dropping its version tag leaves a model dse does not have
    "Llama 3.2 3B", "Qwen3-14B", "Metamorph 7B"])
def test_a_model_dse_does_not_have_stays_unknown(spelling):
    with pytest.raises(ConfigError, match="unknown model"):
        catalog.resolve_model(spelling)


@pytest.mark.parametrize("spelling, system", [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA HGX H200 SXM 141GB HBM3e", "h200"), ("B200 192GB", "b200"),
    ("NVIDIA B200", "b200"), ("A100 SXM4 40GB", "a100-40gb"), ("A100 80GB", "a100-80gb"), ("8x H100 80GB", "h100-sxm")])
def test_a_part_as_vendors_spell_it_resolves_and_a_memory_size_it_lacks_does_not(spelling, system):
    assert catalog.resolve_system(spelling) == system
    with pytest.raises(ConfigError, match="unknown system"):
        catalog.resolve_system(spelling.replace("B200", "B210").replace("H100", "H101").replace("H200", "H201")
                               .replace("A100", "A101"))
    with pytest.raises(ConfigError, match="unknown system"):   # H100 NVL's 94 GB is not the catalog's H100
        catalog.resolve_system("NVIDIA H100 94GB")


@pytest.mark.parametrize("spelling, system", [("8x H200", "h200"), ("4 x GB200", "gb200"), ("NVIDIA B300 SXM6 AC", "b300")])
def test_a_gpu_count_ahead_and_nvidia_smi_names_resolve(spelling, system):
    # a node's GPU count ahead of the part ('8x H100'), and nvidia-smi's name of the B300
    assert catalog.resolve_system(spelling) == system


@pytest.mark.parametrize("what", ["columns", "frameworks", "reasons"])
def test_dse_list(what, capsys):
    assert main(["list", what]) == 0
    text = capsys.readouterr().out
    assert {"columns": "micro_batch", "frameworks": "megatron-bridge", "reasons": "out_of_memory"}[what] in text


def test_space_and_study_files_refuse_bad_columns_when_they_load(tmp_path):
    from dse.space import Space
    from dse.study import load_study
    with pytest.raises(ConfigError, match=r"fixed\.zero: zero: 7 is outside its domain"):
        Space.from_dict({"name": "s", "fixed": {"model": "gpt3-175b", "zero": 7}, "axes": {"tp": [1, 2]}})
    with pytest.raises(ConfigError, match=r"axes\.tp: tp: 0 is outside"):
        Space.from_dict({"name": "s", "fixed": {"model": "gpt3-175b"}, "axes": {"tp": [0, 2]}})
    study = yaml_study()
    study["workload"]["fixed"]["micro_bach"] = 4
    with pytest.raises(ConfigError, match=r"workload\.fixed\.micro_bach: micro_bach: unknown study column \(did you mean micro_batch"):
        load_study(study)


def yaml_study() -> dict:
    return {"name": "t", "workload": {"kind": "training", "model": "llama3.1-8b", "train_tokens": 1e12,
                                      "fixed": {"global_batch": 512}},
            "outer": {"axes": {"system": ["h100-sxm", "b200"], "gpus": [64, 128]}},
            "inner": {"axes": {"tp": [1, 2], "dp": {"derive": "gpus / tp"}}},
            "objectives": [{"step_time_s": "min"}, {"cost_per_run_usd": "min"}], "budget": 4, "batch_size": 4}


def test_sweep_refuses_a_misspelled_column_before_any_work(tmp_path):
    space = tmp_path / "bad.yaml"
    space.write_text("name: bad\nfixed: {model: gpt3-175b, system: a100-80gb, gpus: 64, micro_bach: 4}\n"
                     "axes: {tp: [1, 2, 4, 8]}\n")
    assert main(["sweep", str(space), "--out", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()


def test_dse_train_takes_a_framework_and_prints_json(capsys):
    import json
    args = ["train", "--model", "gpt3-175b", "--system", "a100-80gb", "--gpus", "64", "--tp", "8", "--pp", "8",
            "--global-batch", "64", "--json"]
    assert main(args + ["--framework", "megatron-lm"]) == 0
    lm = json.loads(capsys.readouterr().out)
    assert main(args + ["--framework", "megatron-core"]) == 0
    core = json.loads(capsys.readouterr().out)
    assert lm["recompute_s"] > 0 == core["recompute_s"]       # Megatron-LM recomputes fully, Megatron-Core not
    assert lm["fits"] and lm["infeasible_reason"] is None
    assert main(["train", "--model", "gpt3-175b", "--system", "a100-80gb", "--gpus", "64", "--tp", "0"]) == 2
    assert capsys.readouterr().err.startswith("dse: error: tp: outside its domain")


def test_a_result_out_of_numeric_range_is_infeasible_not_nan():
    out = one(dse.evaluate_training, **{**TRAIN, "global_batch": 2.0 ** 125})
    assert not out["fits"][0] and int(out["infeasible_code"][0]) == schema.REASON_CODE["overflow"]


@pytest.mark.parametrize("column, spelling, value", [
    # as frameworks and tables print them: underscores, spaces and brackets are not part of a value
    ("precision", "FP8_CS", "fp8"), ("precision", "fp8 (block)", "fp8-block"), ("precision", "FP8-DS", "fp8"),
    ("precision", "tensorwise", "fp8"), ("precision", "blockwise", "fp8-block"), ("precision", "FP8-SC", "fp8-block"),
    ("moe_dispatcher", "All_to_All", "alltoall"),
    ("moe_dispatcher", "Hybrid EP", "flex"), ("pp_schedule", "dual_pipe", "dualpipe"), ("cp_comm", "a2a + p2p", "a2a+p2p")])
def test_an_enumeration_value_resolves_whatever_its_separators(column, spelling, value):
    assert schema.enum_code(column, spelling) == schema.ENUMS[column].index(value)


def test_an_unknown_enumeration_value_names_the_choices():
    with pytest.raises(ConfigError, match="precision: unknown value 'int8'; use one of bf16, fp8"):
        schema.enum_code("precision", "int8")
