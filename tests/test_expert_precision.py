"""`expert_precision`: the routed experts in their own number format (NVFP4 / MXFP4 expert
checkpoints beside BF16 or FP8 attention; torchao's MXFP8 grouped GEMMs), in training, inference
and serving: relationships, not numbers copied from the model."""
from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dse
from dse.catalog.precision import CODE, ELEMENT_BYTES
from dse.validate import serving_results

PROPERTY = settings(max_examples=12, deadline=None, derandomize=True)
FORMATS = ["bf16", "fp8", "mxfp8", "nvfp4"]
SERVE = dict(model="deepseek-v3", system="b200", gpus=8, tp=1, ep=8, isl=1024, osl=1024, concurrency=2048,
             framework="tensorrt-llm", kv_precision="fp8")
INFER = dict(model="deepseek-v3", system="b200", gpus=8, tp=1, ep=8, batch=1024, isl=1024, osl=512)
TRAIN = dict(model="qwen3-30b-a3b", system="gb200", gpus=8, ep=8, global_batch=64, micro_batch=4)


def _rows(base, pairs):
    return pd.DataFrame([dict(base, precision=p, **({} if e is None else {"expert_precision": e})) for p, e in pairs])


@PROPERTY
@given(st.sampled_from(FORMATS))
def test_experts_in_the_same_format_change_nothing(precision):
    for evaluate, base in ((dse.evaluate_training, TRAIN), (dse.evaluate_inference, INFER),
                           (dse.evaluate_serving, SERVE)):
        out = evaluate(_rows(base, [(precision, None), (precision, precision), (precision, "")]))
        numbers = out.select_dtypes("number")
        pd.testing.assert_frame_equal(numbers.iloc[[1]].reset_index(drop=True), numbers.iloc[[0]].reset_index(drop=True))
        pd.testing.assert_frame_equal(numbers.iloc[[2]].reset_index(drop=True), numbers.iloc[[0]].reset_index(drop=True))


def test_a_dense_model_ignores_the_experts_format():
    dense = dict(INFER, model="llama3.1-8b", ep=1)
    out = dse.evaluate_inference(_rows(dense, [("fp8", None), ("fp8", "nvfp4")])).select_dtypes("number")
    pd.testing.assert_frame_equal(out.iloc[[1]].reset_index(drop=True), out.iloc[[0]].reset_index(drop=True))


def test_weights_are_the_dense_part_at_precision_and_the_routed_experts_at_theirs():
    # (d a + e b) + (d b + e a) = (d + e)(a + b): exact whatever the split of the parameters
    out = dse.evaluate_inference(_rows(INFER, [("bf16", "nvfp4"), ("nvfp4", "bf16"), ("bf16", None), ("nvfp4", None)]))
    w = out["weights_bytes"].to_numpy(float)
    assert w[0] + w[1] == pytest.approx(w[2] + w[3], rel=1e-6)
    # the routed experts are most of DeepSeek-V3's weights, even per GPU where they are split over
    # ep 8 and the rest is replicated: NVFP4 experts beside BF16 attention are closer to all-NVFP4
    assert w[3] < w[0] < w[2] and (w[0] - w[3]) < 0.5 * (w[2] - w[3])
    nvfp4, bf16 = float(ELEMENT_BYTES[CODE["nvfp4"]]), float(ELEMENT_BYTES[CODE["bf16"]])
    assert w[2] / w[3] < bf16 / nvfp4   # the vocabulary matrices stay 16-bit in both


def test_quantized_checkpoints_keep_the_vocabulary_matrices_in_16_bits():
    # Llama 3.1 8B (config.json: vocab 128,256, hidden 4,096, untied): of its 8.03B parameters the
    # embedding and the LM head stay BF16 in FP8 and NVFP4 checkpoints (ModelOpt excludes lm_head)
    rows = [dict(INFER, model="llama3.1-8b", ep=1, gpus=1, tp=1, batch=1, precision=p) for p in ("bf16", "nvfp4")]
    bf16_bytes, nvfp4_bytes = dse.evaluate_inference(pd.DataFrame(rows))["weights_bytes"].to_numpy(float)
    params = bf16_bytes / 2.0
    vocab = params - (bf16_bytes - nvfp4_bytes) / (2.0 - float(ELEMENT_BYTES[CODE["nvfp4"]]))
    assert vocab == pytest.approx(2 * 128256 * 4096, rel=1e-6)
    assert params == pytest.approx(8.03e9, rel=0.01)


def test_block_scaled_fp8_weights_carry_one_scale_per_128_by_128_block():
    # DeepSeek-V3's FP8 checkpoint: an FP32 scale per 128 x 128 weight block (its report, Sec. 3.3),
    # 4 bytes per 16,384 weights, where activations carry one per 128 (1 + 4/128 bytes an element)
    out = dse.evaluate_inference(_rows(INFER, [("fp8", None), ("fp8-block", None), ("mxfp8", None)]))
    per_tensor, block, mx = out["weights_bytes"].to_numpy(float)
    # the scales' bytes over those of MX weights (an E8M0 byte per 32): the 16-bit vocabulary cancels
    assert (block - per_tensor) / (mx - per_tensor) == pytest.approx((4 / 128**2) / (1 / 32), rel=1e-4)
    assert float(ELEMENT_BYTES[CODE["fp8-block"]]) == pytest.approx(1 + 4 / 128)


@pytest.mark.parametrize("evaluate, base, metric", [
    (dse.evaluate_inference, dict(INFER, batch=2048), "output_tokens_per_s"),
    (dse.evaluate_serving, SERVE, "output_tokens_per_s_per_gpu"),
    (dse.evaluate_training, TRAIN, "tokens_per_s")])
def test_a_faster_expert_format_sits_between_the_two_uniform_formats(evaluate, base, metric):
    out = evaluate(_rows(base, [("bf16", None), ("bf16", "mxfp8"), ("mxfp8", None)]))
    slow, mixed, fast = out[metric].to_numpy(float)
    assert slow < mixed < fast


def test_tensorrt_llm_deepseek_r1_fp4_rows_state_their_expert_format():
    # NVIDIA's NVFP4 DeepSeek-R1 checkpoints: NVFP4 experts, BF16 attention
    rows = serving_results().set_index("id").loc[["S006", "S007"]]
    assert (rows["skipped"] == "").all()
    assert (rows["error_pct"].abs() < 25).all(), rows[["measured", "predicted", "error_pct"]]


def test_cli_rejects_an_unknown_expert_format():
    r = subprocess.run([sys.executable, "-m", "dse.cli", "infer", "--model", "deepseek-v3", "--system", "b200",
                        "--gpus", "8", "--ep", "8", "--expert-precision", "fp5"], capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "expert_precision" in r.stderr and "nvfp4" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_training_saves_the_experts_inputs_in_their_own_format():
    # Transformer Engine keeps a GEMM's quantized input for the weight gradient: NVFP4 experts beside
    # MXFP8 attention store less than all-MXFP8 and more than all-NVFP4; weights and optimizer
    # states (16-bit / FP32 masters) do not depend on the GEMM format
    out = dse.evaluate_training(_rows(TRAIN, [("mxfp8", None), ("mxfp8", "nvfp4"), ("nvfp4", None)]))
    act = out["activations_bytes"].to_numpy(float)
    assert act[2] < act[1] < act[0]
    assert out["optimizer_bytes"].nunique() == 1
