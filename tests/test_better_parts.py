"""The same job is never slower on a strictly better part of the same generation's line: H200 over
H100 (same die, more and faster HBM), B200 over H200 (more of everything), GB200 over B200 and GB300 over B300 (same GPU in an NVL72
rack), B300 over B200 and GB300 over GB200 (same BF16/FP8 peak, more memory). A model whose fitted
per-GPU parameters or stage layouts leak into places they do not belong breaks this: the two
bugs it found were a host-bound step counted on the GPU-slowest stage (which flips between parts)
and NVLink's small-group copy cost charged on NIC traffic (which differs between generations).
The same holds one hardware column at a time (peaks, HBM bandwidth, link bandwidths and latencies)."""
from __future__ import annotations

import itertools

import pandas as pd
import pytest

import dse

PAIRS = [("h200", "h100-sxm"), ("b200", "h200"), ("gb200", "b200"), ("b300", "b200"), ("gb300", "gb200"), ("gb300", "b300"), ("vr200", "gb300")]
MODELS = ["llama3.1-70b", "qwen3-235b-a22b", "minimax-m2.5", "deepseek-v3", "mixtral-8x7b", "gpt-oss-120b",
          "nemotron3-super-120b-a12b"]


def _ratio(frame: pd.DataFrame, key: list, column: str, better: str, worse: str) -> pd.Series:
    wide = frame[frame["fits"]].pivot_table(index=key, columns="system", values=column)
    return (wide[better] / wide[worse]).dropna()


@pytest.mark.parametrize("better,worse", PAIRS)
def test_training_step_is_never_longer_on_the_better_part(better, worse):
    mappings = [(64, 1, 1, 8), (64, 2, 4, 8), (256, 4, 8, 8), (256, 8, 8, 1), (512, 8, 16, 32)]
    rows = [dict(model=m, system=s, precision=p, gpus=g, tp=tp, pp=pp, ep=ep, micro_batch=mb,
                 framework="megatron-bridge", global_batch=1024, seq_len=4096)
            for m, s, p, (g, tp, pp, ep), mb in itertools.product(MODELS, (better, worse), ("bf16", "fp8"),
                                                                     mappings, (1, 2))]
    out = dse.evaluate_training(pd.DataFrame(rows))
    ratio = _ratio(out, ["model", "precision", "gpus", "tp", "pp", "ep", "micro_batch"], "step_time_s", better, worse)
    assert len(ratio) > 20
    assert ratio.max() <= 1.02, ratio.sort_values().tail(3)


@pytest.mark.parametrize("better,worse", PAIRS)
def test_serving_throughput_is_never_lower_on_the_better_part(better, worse):
    mappings = [(8, 8, 1), (8, 8, 8), (16, 8, 16), (4, 4, 4)]
    rows = [dict(model=m, system=s, precision="fp8", framework=fw, gpus=g, tp=tp, ep=ep, concurrency=c,
                 isl=isl, osl=1024)
            for m, s, fw, (g, tp, ep), c, isl in itertools.product(MODELS, (better, worse), ("vllm", "tensorrt-llm"),
                                                                  mappings, (16, 128), (1024, 8192))]
    out = dse.evaluate_serving(pd.DataFrame(rows))
    ratio = _ratio(out, ["model", "framework", "gpus", "tp", "ep", "concurrency", "isl"], "output_tokens_per_s",
                   worse, better)
    assert len(ratio) > 20
    assert ratio.max() <= 1.05, ratio.sort_values().tail(3)


# One hardware column made better at a time, everything else the catalog part's own: the same
# job is never slower. The catalog holds fitted values (the scale-up latency is NCCL's fitted
# alpha, not the datasheet's), so each column is scaled from the resolved catalog value.
BETTER_COLUMNS = [("peak_bf16_flops_per_s", 1.3), ("peak_fp8_flops_per_s", 1.3), ("memory_bandwidth_bytes_per_s", 1.3),
                  ("scaleup_bandwidth_bytes_per_s", 1.3), ("scaleout_bandwidth_bytes_per_s", 1.5),
                  ("scaleup_latency_s", 0.5), ("scaleout_latency_s", 0.5)]
ONE_COLUMN_SYSTEMS = ["h100-sxm", "b200", "gb200"]


def _with_better(frame: pd.DataFrame, column: str, factor: float) -> pd.DataFrame:
    from dse import catalog
    parts = catalog.systems()
    better = frame.copy()
    better[column] = parts.loc[frame["system"], column].to_numpy(dtype=float) * factor
    return better


def _both_fit(before: pd.DataFrame, after: pd.DataFrame):
    ok = before["fits"].to_numpy() & after["fits"].to_numpy()
    assert ok.sum() > 50
    return ok


@pytest.mark.parametrize("column,factor", BETTER_COLUMNS)
def test_training_step_is_never_longer_with_one_better_hardware_column(column, factor):
    mappings = [(64, 8, 2, 1), (64, 4, 4, 4), (128, 1, 8, 16), (64, 1, 1, 8)]
    rows = [dict(model=m, system=s, precision=p, framework=fw, gpus=g, tp=tp, pp=pp, ep=ep, micro_batch=mb,
                 global_batch=1024, seq_len=4096, recompute="selective", adapter=a)
            for m, s, p, fw, (g, tp, pp, ep), mb, a in itertools.product(
                MODELS, ONE_COLUMN_SYSTEMS, ("bf16", "fp8"), ("megatron-core", "megatron-bridge"), mappings, (1, 2),
                ("none", "lora"))]
    frame = pd.DataFrame(rows)
    before, after = dse.evaluate_training(frame), dse.evaluate_training(_with_better(frame, column, factor))
    ok = _both_fit(before, after)
    ratio = after["step_time_s"].to_numpy()[ok] / before["step_time_s"].to_numpy()[ok]
    assert ratio.max() <= 1.002, frame[ok][ratio > 1.002].head(3)
    assert ratio.min() < 0.999   # the column matters somewhere in the grid


@pytest.mark.parametrize("column,factor", BETTER_COLUMNS)
def test_serving_is_never_slower_with_one_better_hardware_column(column, factor):
    mappings = [(8, 8, 1), (8, 8, 8), (16, 8, 16), (4, 4, 1)]
    rows = [dict(model=m, system=s, precision=p, framework=fw, gpus=g, tp=tp, ep=ep, concurrency=c, isl=isl, osl=osl)
            for m, s, p, fw, (g, tp, ep), c, (isl, osl) in itertools.product(
                MODELS, ONE_COLUMN_SYSTEMS, ("bf16", "fp8"), ("vllm", "tensorrt-llm", "sglang"), mappings, (8, 128),
                ((1024, 1024), (8192, 512)))]
    frame = pd.DataFrame(rows)
    before, after = dse.evaluate_serving(frame), dse.evaluate_serving(_with_better(frame, column, factor))
    ok = _both_fit(before, after)
    for metric, worst in (("output_tokens_per_s", lambda r: r.min() >= 0.998), ("tpot_s", lambda r: r.max() <= 1.002),
                          ("ttft_s", lambda r: r.max() <= 1.002)):
        ratio = after[metric].to_numpy()[ok] / before[metric].to_numpy()[ok]
        assert worst(ratio), (metric, frame[ok].assign(ratio=ratio).sort_values("ratio").iloc[[0, -1]])
