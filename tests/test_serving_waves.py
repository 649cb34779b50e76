"""A prefill-first engine (SGLang's scheduler: a prefill batch runs alone whenever one can be
formed) in a closed loop of equal-length requests serves in waves: the requests of a wave are
prefilled together, decode together and finish together, so a request's TPOT carries only the
prefill batches after its own (dse.perf.serving.waves)."""
from __future__ import annotations

import pandas as pd
import pytest

import dse

BASE = dict(model="qwen3-32b", system="h100-sxm", gpus=2, tp=2, osl=512, framework="sglang")


def serve(rows) -> pd.DataFrame:
    return dse.evaluate_serving(pd.DataFrame(rows))


def decode_step(row) -> float:
    """The decode-only step of c requests at the serving model's mean context."""
    batch = dict(row, batch=row["concurrency"])
    batch.pop("concurrency")
    return float(dse.evaluate_inference(pd.DataFrame([batch]))["tpot_s"].iloc[0])


def test_a_wave_prefilled_in_one_batch_decodes_at_the_decode_step():
    """4 prompts of 1,024 tokens fit one 8,192-token prefill batch: no request waits for another's
    prefill after its first token, so its TPOT is the decode step of the 4."""
    row = dict(BASE, concurrency=4, isl=1024)
    tpot = float(serve([row])["tpot_s"].iloc[0])
    assert tpot == pytest.approx(decode_step(row), rel=0.03)


def test_prompts_riding_along_cost_more_per_token_than_a_wave():
    """Off (vLLM's and TensorRT-LLM's in-flight batching) every decode step carries its share of the
    prompts that replace finished requests; prefill first, a request's steps carry only the prefill
    batches after its own, on average half of the wave's."""
    rows = [dict(BASE, concurrency=64, isl=isl, prefill_first=first) for isl in (1024, 4096) for first in (True, False)]
    out = serve(rows)
    tpot = out["tpot_s"].to_numpy()
    for wave, mixed, row in ((tpot[0], tpot[1], rows[0]), (tpot[2], tpot[3], rows[2])):
        decode = decode_step(dict(row, prefill_first=True))
        assert decode < wave < mixed
        assert wave - decode < 0.75 * (mixed - decode)
    assert tpot[2] > tpot[0]          # more prefill batches after a request's own


def test_a_wave_delivers_what_its_prefill_and_decode_take():
    """Requests per second = c / (all prefill batches + the decode steps after the first token)."""
    row = dict(BASE, concurrency=16, isl=2048)
    out = serve([row]).iloc[0]
    decode = decode_step(row)
    period = 16 / float(out["requests_per_s"])
    assert period > (512 - 1) * decode
    batches = 16 * 2048 / 8192                     # prefill batches of the token budget, one after another
    prefill_batch = float(out["ttft_s"]) / ((batches + 1) / 2)   # the mean request waits for half of them and its own
    assert period - (512 - 1) * decode == pytest.approx(batches * prefill_batch, rel=0.05)


@pytest.mark.parametrize("traffic", [dict(request_rate=2.0), dict(isl_std=256.0)])
def test_open_loops_and_mixed_lengths_do_not_stay_in_waves(traffic):
    """Arrivals at random or prompts of different lengths desynchronise the requests: every prefill
    then pauses someone's decoding, as the steady state with the prompts riding along counts it."""
    first, off = serve([dict(BASE, concurrency=16, isl=2048, prefill_first=p, **traffic) for p in (True, False)])["tpot_s"]
    assert first == pytest.approx(off, rel=1e-9)


def test_the_sglang_preset_is_prefill_first_and_the_others_are_not():
    from dse import catalog
    presets = catalog.frameworks()
    assert int(presets.loc["sglang", "prefill_first"]) == 1
    assert int(presets.loc["default", "prefill_first"]) == 0
    assert presets.loc[["vllm", "tensorrt-llm"], "prefill_first"].isna().all()   # the default's
