"""Activation offloading to host memory (Megatron-Core --cpu-offloading-num-layers): the memory it
frees, the host-link time it exposes, its feasibility, and the published recipes that use it."""
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dse
from dse.schema import REASON_CODE

# Megatron-Bridge's Llama-3 70B pre-training recipes under Megatron-FSDP (64 GPUs, global batch 128,
# seq 8192): scripts/performance/configs/llama/llama3_workload_base_configs.py at v0.3.0 (NeMo 26.02),
# LLAMA3_70B_PRETRAIN_CONFIG_<system>_<precision>_V1: (system, precision, micro_batch, cpu_offloading_num_layers)
RECIPES = [("gb300", "fp8", 2, 20), ("gb300", "bf16", 2, 30), ("gb200", "fp8", 2, 40), ("gb200", "bf16", 1, 20),
           ("b300", "fp8", 1, 0), ("b300", "bf16", 1, 0), ("b200", "fp8", 1, 5)]
FSDP = dict(model="llama3-70b", gpus=64, tp=1, pp=1, global_batch=128, zero=3, seq_len=8192, framework="megatron-bridge")


def train(rows) -> pd.DataFrame:
    return dse.evaluate_training(pd.DataFrame(rows))


def recipe(system, precision, micro_batch, offload):
    return dict(FSDP, system=system, precision=precision, micro_batch=micro_batch, offload_layers=offload)


def test_the_recipes_fit_with_the_layers_they_offload_and_not_without():
    out = train([recipe(*r) for r in RECIPES])
    assert out["fits"].all(), out[["mem_per_gpu_bytes", "infeasible_reason"]]
    # on the Grace parts every recipe that offloads needs to: without it the activations overflow
    grace = [r for r in RECIPES if r[0].startswith("gb")]
    assert not train([recipe(*r[:3], 0) for r in grace])["fits"].any()
    # and the two tightest need about all they offload: ten layers fewer overflow too
    tight = [r for r in RECIPES if r[:2] in (("gb300", "bf16"), ("gb200", "fp8"))]
    assert not train([recipe(*r[:3], r[3] - 10) for r in tight])["fits"].any()


def test_offloading_frees_each_layers_activations_and_hides_behind_the_layers_on_nvlink_c2c():
    rows = [recipe("gb200", "fp8", 2, k) for k in (0, 10, 40)]
    out = train(rows)
    freed = out["activations_bytes"].iloc[0] - out["activations_bytes"]
    assert freed.iloc[2] == pytest.approx(4 * freed.iloc[1], rel=1e-6)
    assert (out["offload_s"] == 0).all()           # 450 GB/s-class link: the copies hide
    assert out["step_time_s"].nunique() == 1


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 79), st.sampled_from(["b200", "gb200", "h100-sxm"]), st.floats(1e9, 1e12))
def test_offloading_never_speeds_a_step_and_a_slow_link_exposes_the_copies(offload, system, link):
    rows = [recipe(system, "fp8", 1, 0), recipe(system, "fp8", 1, offload),
            dict(recipe(system, "fp8", 1, offload), host_link_bandwidth_bytes_per_s=link)]
    out = train(rows)
    base, catalog_link, given_link = (float(out["step_time_s"].iloc[i]) for i in range(3))
    assert catalog_link >= base * (1 - 1e-6) and given_link >= base * (1 - 1e-6)
    assert float(out["activations_bytes"].iloc[1]) <= float(out["activations_bytes"].iloc[0])
    # the exposed copy time is the copies beyond the whole forward and backward, never negative
    assert (out["offload_s"] >= 0).all()
    if offload == 0:
        assert float(out["offload_s"].iloc[2]) == 0.0


def test_a_pcie_host_pays_where_a_grace_host_does_not():
    out = train([recipe("gb200", "fp8", 2, 40), recipe("b200", "fp8", 2, 40)])
    assert float(out["offload_s"].iloc[0]) == 0.0
    assert float(out["offload_s"].iloc[1]) > 0.0     # 64 GB/s PCIe: the copies outlast the layers


@pytest.mark.parametrize("change", [dict(pp=2), dict(recompute="full"), dict(offload_layers=80)])
def test_offloading_with_pipeline_recompute_or_every_layer_is_infeasible(change):
    out = train([dict(recipe("gb200", "fp8", 1, 10), **change)])
    assert int(out["infeasible_code"].iloc[0]) == REASON_CODE["offload"]
    assert np.isfinite(out["step_time_s"].iloc[0])


def test_cli_offload_layers(capsys):
    from dse.cli import main
    args = ["train", "--model", "llama3-70b", "--system", "gb200", "--gpus", "64", "--global-batch", "128",
            "--micro-batch", "2", "--zero", "3", "--precision", "fp8", "--seq-len", "8192"]
    assert main(args + ["--offload-layers", "40"]) == 0
    assert "offload" in capsys.readouterr().out
    assert main(args + ["--offload-layers", "-3"]) == 2
    err = capsys.readouterr().err
    assert "offload_layers" in err and len(err.strip().splitlines()) == 1


# Fine-grained activation offloading (Megatron-Core --offload-modules): the ModelZoo's Qwen3-235B GB200
# recipe (yanring/Megatron-MoE-ModelZoo best_practice/qwen3, row MZ016: 256 GPUs, PP 4 x VP 6, EP 64,
# micro-batch 3, selective recompute of moe_act and layernorm, --offload-modules expert_fc1 moe_act)
MZ_GB200 = dict(model="qwen3-235b-a22b", system="gb200", gpus=256, tp=1, pp=4, vp=6, ep=64, micro_batch=3,
                global_batch=3072, seq_len=4096, recompute="selective", recompute_modules="moe_act,layernorm",
                framework="megatron-core")
ALL_MODULES = "attn_norm,qkv_linear,core_attn,attn_proj,mlp_norm,expert_fc1,moe_act"


def test_the_modelzoo_recipe_fits_with_the_modules_it_offloads_and_not_without():
    out = train([MZ_GB200, dict(MZ_GB200, offload_modules="expert_fc1,moe_act")])
    assert list(out["fits"]) == [False, True]
    # the experts' inputs are most of what a fine-grained MoE layer stores
    assert out["activations_bytes"][1] < 0.5 * out["activations_bytes"][0]


def test_each_offloaded_module_frees_memory_and_a_blank_list_offloads_nothing():
    lists = ["", "expert_fc1", "expert_fc1,moe_act", "core_attn,attn_proj,expert_fc1,moe_act", ALL_MODULES]
    out = train([MZ_GB200] + [dict(MZ_GB200, offload_modules=v) for v in lists])
    stored = out["activations_bytes"].to_numpy()
    assert stored[1] == stored[0]
    assert np.all(np.diff(stored[1:]) < 0) and stored[-1] > 0


def test_expert_modules_of_a_dense_model_and_modules_of_full_recompute_offload_nothing():
    dense = dict(model="llama3.1-8b", system="h100-sxm", gpus=8, tp=1, pp=1, micro_batch=1, global_batch=8,
                 recompute="selective")
    out = train([dense, dict(dense, offload_modules="expert_fc1,moe_act"),
                 dict(dense, recompute="full"), dict(dense, recompute="full", offload_modules=ALL_MODULES)])
    assert out["activations_bytes"][1] == out["activations_bytes"][0]
    assert out["activations_bytes"][3] == out["activations_bytes"][2]
    assert (out["offload_s"][[1, 3]] == 0).all()


def test_the_copies_hide_behind_the_layers_on_nvlink_c2c_and_not_on_pcie():
    # GB200's 450 GB/s NVLink-C2C carries the experts' inputs while the layers compute; H100's PCIe
    # Gen5 x16 (64 GB/s per direction) does not, and a slower link exposes more
    rows = [dict(MZ_GB200, offload_modules="expert_fc1,moe_act"),
            dict(MZ_GB200, offload_modules="expert_fc1,moe_act", system="h100-sxm"),
            dict(MZ_GB200, offload_modules="expert_fc1,moe_act", system="h100-sxm", host_link_bandwidth_bytes_per_s=32e9)]
    exposed = train(rows)["offload_s"].to_numpy()
    assert exposed[0] == 0 and 0 < exposed[1] < exposed[2]


def test_an_unknown_offload_module_is_refused_by_name():
    with pytest.raises(dse.ConfigError, match="offload_modules: unknown module 'moe_fc1'"):
        train([dict(MZ_GB200, offload_modules="moe_fc1")])
