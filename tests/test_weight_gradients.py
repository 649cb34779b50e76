"""Weight gradients in training: each linear layer's wgrad is a GEMM of its own shape, reducing over
the micro-batch's tokens into the gradient buffer it accumulates in (dse.perf.roofline.wgrad_s,
expert_wgrad_s)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dse
from dse.perf import roofline
from dse.perf.layer import Op
from dse.perf.roofline import Rates

PROPERTY = settings(max_examples=30, deadline=None, derandomize=True)
PEAK, BW = 1e15, 3e12
P = roofline.GemmParams(efficiency_max=0.8, tiles_per_wave=64.0, k_ramp=50.0, split_k_min_depth=3000.0,
                        floor_s=3e-6, memory_efficiency=0.85)


def rates(grad_bytes):
    return Rates(peak_gemm=PEAK, peak_bf16=PEAK, bandwidth=BW, memory_efficiency=0.9, gemm=P, gemm_bf16=P,
                 attention_efficiency=0.6, wgrad_output_bytes=grad_bytes)


def linear(tokens, n=4096.0, k=4096.0):
    return Op("g", "gemm", "gemm", tokens, n, k, operand_bytes=2.0)


def test_wgrad_is_the_transposed_gemm_written_into_the_gradient_buffer():
    op, r = linear(2048.0, 14336.0, 4096.0), rates(8.0)
    expected = roofline.gemm_time_s(4096.0, 14336.0, 2048.0, 1.0, 2.0, PEAK, BW, P, output_bytes=8.0)
    assert roofline.wgrad_s(op, r) == pytest.approx(expected, rel=1e-12)
    _, memory = roofline.gemm_compute_memory_s(4096.0, 14336.0, 2048.0, 1.0, 2.0, PEAK, BW, P)
    # the accumulated gradient (k x n, FP32 read and written) replaces the 16-bit output's traffic
    grown = (8.0 - roofline.OUTPUT_BYTES) * 4096.0 * 14336.0 / (BW * P.memory_efficiency)
    sides = roofline._gemm_sides_s(4096.0, 14336.0, 2048.0, 1.0, 2.0, PEAK, BW, P, 8.0)
    assert sides[1] == pytest.approx(memory + grown, rel=1e-12)


def test_many_tokens_make_wgrad_the_forwards_time_and_few_make_it_slower():
    """Dense layers reduce over thousands of tokens: their wgrad is compute-bound like the forward.
    A routed expert receives a few hundred: its wgrad is bound by the FP32 gradient's traffic."""
    r = rates(8.0)
    dense = linear(16384.0)
    assert roofline.wgrad_s(dense, r) / roofline.op_time_s(dense, r) == pytest.approx(1.0, abs=0.03)
    expert = linear(128.0, 2048.0, 7168.0)
    assert roofline.wgrad_s(expert, r) > 1.5 * roofline.op_time_s(expert, r)


@PROPERTY
@given(tokens=st.sampled_from([64.0, 512.0, 4096.0, 32768.0]), n=st.sampled_from([768.0, 4096.0, 28672.0]),
       k=st.sampled_from([2048.0, 7168.0]))
def test_a_wider_gradient_buffer_is_never_faster(tokens, n, k):
    op = linear(tokens, n, k)
    assert roofline.wgrad_s(op, rates(8.0)) >= roofline.wgrad_s(op, rates(4.0)) >= roofline.wgrad_s(op, rates(2.0))


def _step(model, **kw):
    row = dict(model=model, system="h100-sxm", gpus=8, seq_len=4096, micro_batch=1, global_batch=64) | kw
    return dse.evaluate_training(pd.DataFrame([row]))


def test_fp32_main_gradients_cost_moe_layers_more_than_dense_ones():
    """BF16 main gradients (Megatron-Bridge's grad_reduce_in_fp32 False) halve the accumulation
    traffic: the MoE model, whose experts each see few tokens, gains more compute time than the
    dense one, whose weights each see the whole micro-batch."""
    def compute_gain(model, **kw):
        fp32 = _step(model, main_grad_bytes=4, **kw)["compute_s"].iloc[0]
        bf16 = _step(model, main_grad_bytes=2, **kw)["compute_s"].iloc[0]
        assert fp32 >= bf16
        return fp32 / bf16 - 1.0
    dense = compute_gain("llama3.1-8b")
    moe = compute_gain("qwen3-30b-a3b", ep=8)
    assert moe > 1.5 * dense and moe > 0.005, (moe, dense)
    assert np.isfinite(dense)
