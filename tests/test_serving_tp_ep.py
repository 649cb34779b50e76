"""Expert parallelism inside the attention tensor-parallel group (TensorRT-LLM's moe_ep_size under
attention TP, vLLM and SGLang expert parallelism over TP): ep = dp x a divisor of tp spreads each
MoE layer's experts over the TP ranks, which hold the same tokens. Relationships, and the measured
AIConfigurator rows of that mapping."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dse
from dse.schema import REASON_CODE
from dse.validate import serving_results

SERVE = dict(model="deepseek-v3", system="b200", isl=1024, osl=1024, precision="fp8-block",
             kv_precision="fp8", framework="tensorrt-llm")
INFER = dict(model="qwen3-235b-a22b", system="h200", batch=32, isl=1024, osl=256, precision="fp8")


def _serve(*mappings, **extra):
    return dse.evaluate_serving(pd.DataFrame([dict(SERVE, **extra, **m) for m in mappings]))


def test_ep_over_the_tp_group_is_a_mapping_and_other_splits_are_not():
    out = _serve(dict(gpus=8, tp=8, ep=8), dict(gpus=8, tp=8, ep=2), dict(gpus=16, tp=8, ep=16),
                 dict(gpus=4, tp=4, ep=8), dict(gpus=8, tp=4, ep=8), dict(gpus=8, tp=4, ep=6), concurrency=16)
    assert out["fits"].tolist()[:3] == [True, True, True]
    assert (out["infeasible_code"].iloc[3:5] == [REASON_CODE["ep_dp"], 0]).all()   # 8 over 1 replica of tp 4: no
    assert out["infeasible_code"].iloc[5] in (REASON_CODE["ep_dp"], REASON_CODE["ep_experts"])


def test_the_experts_are_split_over_the_tp_group_either_way():
    # tp 8 with the experts tensor-parallel and tp 8 with them expert-parallel hold the same bytes;
    # attention data parallel 8 (tp 1) replicates the dense layers on every GPU
    out = _serve(dict(gpus=8, tp=8, ep=1), dict(gpus=8, tp=8, ep=8), dict(gpus=8, tp=1, ep=8), concurrency=16)
    tp_only, tp_ep, dp_ep = out["weights_bytes"]
    assert tp_ep == pytest.approx(tp_only, rel=1e-6)
    assert dp_ep > 1.05 * tp_ep


def test_no_all_to_all_inside_one_replica():
    # the TP ranks hold every token: the dispatcher choice cannot matter with one replica
    a = _serve(dict(gpus=8, tp=8, ep=8), concurrency=64, moe_dispatcher="alltoall")
    b = _serve(dict(gpus=8, tp=8, ep=8), concurrency=64, moe_dispatcher="flex")
    assert a["tpot_s"].iloc[0] == pytest.approx(b["tpot_s"].iloc[0], rel=1e-9)
    c = _serve(dict(gpus=16, tp=8, ep=16), concurrency=128, moe_dispatcher="alltoall")
    d = _serve(dict(gpus=16, tp=8, ep=16), concurrency=128, moe_dispatcher="flex")
    assert c["tpot_s"].iloc[0] != pytest.approx(d["tpot_s"].iloc[0], rel=1e-6)   # two replicas exchange


def test_inference_takes_the_same_mapping():
    out = dse.evaluate_inference(pd.DataFrame([dict(INFER, gpus=8, tp=8, ep=e) for e in (1, 8)]))
    assert out["fits"].all()
    assert np.isfinite(out["tpot_s"]).all() and (out["tpot_s"] > 0).all()
    # the same experts per GPU, full-width instead of sliced eight ways
    assert out["tpot_s"].iloc[1] == pytest.approx(out["tpot_s"].iloc[0], rel=0.5)


def test_aiconfigurator_rows_of_this_mapping():
    """AS390-AS408: TensorRT-LLM and SGLang with moe_ep_size inside the attention TP group, measured
    TPOT (dse/validation/README.md); dse sees the mapping only through ep."""
    res = serving_results().set_index("id").loc[[f"AS{i}" for i in range(390, 409)]]
    assert res["skipped"].eq("").all()
    assert res["error_pct"].abs().median() < 25.0


def test_the_serving_search_tries_expert_parallelism_over_the_tp_group():
    from dse import serve
    space = serve.space("qwen3-235b-a22b", ["h200"], [8], 1024, 1024, framework="tensorrt-llm", disaggregated=False)
    dp = space["gpus"] // (space["tp"] * space["pp"])
    folded = space[(space["ep"] > dp) & (space["tp"] == 8)]
    assert len(folded) and (folded["ep"] == 8).all()
    assert dse.evaluate_serving(folded)["fits"].any()


def test_of_equal_throughput_the_search_prefers_the_shorter_ttft():
    # offered beyond the KV capacity, requests only queue: the same throughput at a longer TTFT
    from dse import serve
    results = dse.evaluate_serving(serve.space("deepseek-v3", ["b200"], [8], 1024, 1024, disaggregated=False))
    top = serve.best(results).iloc[0]
    same = results[results["fits"] & np.isclose(results["output_tokens_per_s_per_gpu"], top["output_tokens_per_s_per_gpu"])]
    assert top["ttft_s"] == same["ttft_s"].min()
