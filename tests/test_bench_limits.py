"""trtllm-bench's own engine limits (dse.perf.bench_limits): the published rule of
tensorrt_llm/bench/tuning/heuristics.py, worked by hand here, and how serving uses it."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import dse
from dse.perf.bench_limits import finetune
from dse.schema import REASON_CODE

ROW = dict(model="llama3.1-8b", system="h200", gpus=1, tp=1, isl=128, osl=128, precision="fp8", kv_precision="fp8")


@pytest.mark.parametrize("requests, isl, osl, pp, batch, tokens", [
    (1300.0, 2048, 128, 1, 256 * math.ceil(1300 / 256), 1024 * math.ceil(1300 * 17 / 1024)),  # 1,536 and 22,528
    (40.0, 1024, 1024, 1, 64, 2048),                        # the floors: batch 64, 2,048 tokens
    (300.0, 1024, 1024, 2, 32 * math.ceil(150 / 32), 2048),  # per stage: 150 -> 160; 300 tokens -> 2,048
    (9000.0, 128, 128, 1, 4096, 8192),                       # capped at 4,096 requests
    (5000.0, 32768, 128, 1, 4096, 32768),                    # and 32,768 tokens
])
def test_finetune_is_the_published_rounding(requests, isl, osl, pp, batch, tokens):
    b, t = finetune(np.array([requests]), isl, osl, pp, np.array([False]))
    assert (b[0], t[0]) == (batch, tokens)


def test_hybrid_models_round_the_batch_down_to_even():
    b, _ = finetune(np.array([301.0]), 1024, 1024, 1, np.array([True]))
    assert b[0] == 300


def _serve(**kw):
    return dse.evaluate_serving(pd.DataFrame([dict(ROW, **kw)]))


def test_the_preset_runs_more_short_requests_than_the_llm_api_defaults():
    # Llama 3.1 8B FP8 on one H200: KV room for far more than 4,096 requests of 256 tokens, so
    # trtllm-bench sets batch 4,096 where the LLM API's max_batch_size is 2,048
    bench, api = _serve(framework="trtllm-bench"), _serve(framework="tensorrt-llm")
    assert bench["batch"].iloc[0] == 4096 and api["batch"].iloc[0] == 2048
    assert bench["output_tokens_per_s"].iloc[0] >= api["output_tokens_per_s"].iloc[0]


def test_stated_limits_win_and_zero_asks_for_the_heuristic():
    assert _serve(framework="trtllm-bench", max_num_seqs=256)["batch"].iloc[0] == 256
    assert _serve(framework="tensorrt-llm", max_num_seqs=0)["batch"].iloc[0] == 4096


def test_long_prompts_get_the_small_budget_the_rule_gives():
    # 405B FP8 on 8 H200 at 32K + 2K: under a hundred requests fit, so the budget is the 2,048
    # floor and a prompt takes 16 chunks instead of the LLM API default's 4 (8,192 tokens)
    long = dict(model="llama3.1-405b", gpus=8, tp=8, isl=32768, osl=2048)
    bench, api = _serve(framework="trtllm-bench", **long), _serve(framework="tensorrt-llm", **long)
    assert bench["batch"].iloc[0] < 96
    assert bench["ttft_s"].iloc[0] > api["ttft_s"].iloc[0]


def test_a_negative_limit_is_out_of_domain():
    assert _serve(framework="trtllm-bench", max_num_tokens=-1)["infeasible_code"].iloc[0] == REASON_CODE["domain"]
