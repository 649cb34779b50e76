"""NeMo AutoModel as a framework preset: FSDP2 (ZeRO-3) on BF16 parameters, DTensor tensor parallelism
without Transformer Engine's userbuffers overlap, DeepEP, GPT-OSS's clamps and YaRN RoPE compiled or
fused; its validation rows name the preset and state only what their runs chose."""
import pandas as pd

import dse
from dse import catalog, validate

FRAMEWORK_SETTINGS = ("dse_zero", "dse_moe_dispatcher", "dse_expert_clamp_unfused", "dse_yarn_rope_unfused")


def test_automodel_rows_run_the_preset_and_state_no_framework_behaviour():
    table = validate._read_csv("new_families_training.csv")
    rows = table[table["id"].str.startswith("AM")]
    assert len(rows) == 15 and (rows["dse_framework"] == "nemo-automodel").all()
    for column in FRAMEWORK_SETTINGS:
        assert (rows[column].fillna("") == "").all(), column
    # the MoE benchmarks replace the router by FakeBalancedGate: an even load, consecutive experts
    moe = rows[rows["dse_moe_routing"].fillna("") != ""]
    assert len(moe) == 8 and (moe["dse_moe_routing"] == "consecutive").all() and (moe["dse_routing"] == "balanced").all()
    assert (validate.routing_imbalance(moe["dse_routing"]) == 1.0).all()


def test_the_preset_is_fsdp2_without_userbuffers_overlap():
    preset = catalog.frameworks().loc["nemo-automodel"]
    assert preset["zero"] == 3 and preset["tp_overlap"] == 0 and preset["moe_dispatcher"] == "deepep"
    job = dict(model="llama3.1-70b", system="h100-sxm", gpus=8, tp=8, global_batch=8, micro_batch=1, seq_len=8192,
               sp=True, precision="bf16", recompute="full")
    out = dse.evaluate_training(pd.DataFrame([{**job, "framework": "nemo-automodel"},
                                              {**job, "framework": "megatron-bridge", "zero": 3}]))
    automodel, bridge = out.itertuples()
    # the same TP collectives, exposed under DTensor, mostly hidden under Transformer Engine's overlap
    assert automodel.tp_comm_s > 2 * bridge.tp_comm_s
    # without the overlap's chunks the forward GEMMs run whole: no more compute than the overlapped run
    assert automodel.compute_s <= bridge.compute_s


def test_gpt_oss_under_automodel_pays_neither_eager_clamps_nor_eager_yarn_rope():
    job = dict(model="gpt-oss-120b", system="h100-sxm", gpus=64, ep=64, global_batch=128, micro_batch=2, precision="bf16")
    out = dse.evaluate_training(pd.DataFrame([{**job, "framework": "nemo-automodel"},
                                              {**job, "framework": "nemo-automodel", "expert_clamp_unfused": True,
                                               "yarn_rope_unfused": True}]))
    assert out["step_time_s"].iloc[0] < out["step_time_s"].iloc[1]
