"""A framework named with its release resolves to the preset of the releases it falls in
(dse.catalog.versions): benchmark tables and cluster logs name 'NeMo 25.04' or 'TensorRT-LLM 0.19',
and an unknown-framework error there would lose the row."""
from __future__ import annotations

import pandas as pd
import pytest

import dse
from dse import catalog
from dse.catalog.versions import release, start
from dse.errors import ConfigError


@pytest.mark.parametrize("spelling, preset", [
    # NeMo containers before Megatron-Bridge (24.07 preset) and from 25.11 on (Megatron-Bridge's)
    ("NeMo 25.04", "nemo"), ("nemo:25.02", "nemo"), ("NeMo 23.08", "nemo"),
    ("NeMo 26.06", "megatron-bridge"), ("Megatron-Bridge 26.04", "megatron-bridge"),
    # TensorRT-LLM: the 2023 engine-builder preset up to 0.6.1 (and 0.7, before the >=0.8 preset starts)
    ("TensorRT-LLM v0.5", "tensorrt-llm-0.6"), ("TensorRT-LLM 0.7", "tensorrt-llm-0.6"),
    ("TensorRT-LLM 0.19", "tensorrt-llm"), ("TRT-LLM 1.2.0rc6", "tensorrt-llm"),
    ("vLLM v0.8.3", "vllm"), ("SGLang 0.5.4.post1", "sglang"), ("Megatron-LM 2021", "megatron-lm")])
def test_a_release_picks_the_preset_that_covers_it(spelling, preset):
    assert catalog.resolve("framework", spelling) == preset


@pytest.mark.parametrize("family, preset", [("TensorRT-LLM", "tensorrt-llm"), ("NeMo", "megatron-bridge")])
def test_a_preset_takes_its_first_release_and_not_the_one_before(family, preset):
    first = start(catalog.frameworks().loc[preset, "version"])
    assert first
    before = ".".join(str(p) for p in (*first[:-1], first[-1] - 1))
    assert catalog.resolve("framework", f"{family} {'.'.join(map(str, first))}") == preset
    assert catalog.resolve("framework", f"{family} {before}") != preset


@pytest.mark.parametrize("text, base, version", [
    ("TensorRT-LLM 1.2.0rc6", "TensorRT-LLM", (1, 2, 0)), ("nemo:26.02", "nemo", (26, 2)),
    ("vLLM v0.10.1.post1", "vLLM", (0, 10, 1)), ("sglang", "sglang", None), ("25.04", "25.04", None)])
def test_release_splits_a_name_from_its_release(text, base, version):
    assert release(text) == (base, version)


def test_an_unknown_framework_with_a_release_is_still_an_error():
    with pytest.raises(ConfigError, match="^framework: unknown framework 'Foo 1.0'"):
        catalog.resolve("framework", "Foo 1.0")


def test_a_row_naming_a_release_evaluates_as_its_preset():
    row = dict(model="llama3.1-70b", system="gb200", gpus=64, tp=2, pp=4, micro_batch=1, global_batch=128,
               seq_len=8192, precision="fp8")
    out = dse.evaluate_training(pd.DataFrame([dict(row, framework="NeMo 26.04"), dict(row, framework="megatron-bridge")]))
    assert out["step_time_s"].iloc[0] == out["step_time_s"].iloc[1]
