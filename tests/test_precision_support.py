"""Training formats a GPU's tensor cores cannot multiply are infeasible points, not emulated ones:
Transformer Engine refuses FP8 before Ada/Hopper and MXFP8/NVFP4 before Blackwell
(quantization.py check_*_support), so a sweep over precisions must never pick them."""
from __future__ import annotations

import pandas as pd
import pytest

import dse
from dse.schema import REASON_CODE

JOB = dict(model="llama3.1-8b", gpus=8, tp=1, pp=1, global_batch=64, micro_batch=1, seq_len=4096, zero=1)
MOE = dict(model="qwen3-30b-a3b", gpus=8, ep=8, global_batch=64, micro_batch=1, seq_len=4096, precision="bf16")
UNSUPPORTED = REASON_CODE["precision_unsupported"]


def _codes(base, system, formats, column="precision"):
    frame = pd.DataFrame([dict(base, system=system, **{column: f}) for f in formats])
    return dict(zip(formats, dse.evaluate_training(frame)["infeasible_code"].astype(int)))


@pytest.mark.parametrize("system, refused, accepted", [
    ("a100-80gb", ["fp8", "fp8-block", "mxfp8", "nvfp4", "mxfp4"], ["bf16"]),
    ("h100-sxm", ["mxfp8", "nvfp4", "mxfp4"], ["bf16", "fp8", "fp8-block"]),
    ("mi325x", ["mxfp8", "nvfp4", "mxfp4"], ["bf16", "fp8"]),
    ("b200", [], ["bf16", "fp8", "fp8-block", "mxfp8", "nvfp4", "mxfp4"]),
])
def test_a_format_needs_tensor_cores_that_multiply_it(system, refused, accepted):
    codes = _codes(JOB, system, refused + accepted)
    assert all(codes[f] == UNSUPPORTED for f in refused)
    assert all(codes[f] != UNSUPPORTED for f in accepted)


def test_the_experts_format_is_checked_too():
    codes = _codes(MOE, "h100-sxm", ["bf16", "fp8", "mxfp8"], column="expert_precision")
    assert codes["mxfp8"] == UNSUPPORTED and codes["fp8"] != UNSUPPORTED and codes["bf16"] != UNSUPPORTED


def test_a_part_derived_from_technology_takes_every_format():
    part = dict(node="n4p", die_area_mm2=800.0, compute_dies=2, memory="hbm3e", memory_stacks=8,
                scaleup="nvlink5", package="cowos-l")
    frame = pd.DataFrame([dict(JOB, **part, precision=p) for p in ("fp8", "mxfp8", "nvfp4")])
    out = dse.evaluate_training(frame)
    assert out["fits"].all() and (out["infeasible_code"] != UNSUPPORTED).all()


def test_the_cli_names_the_field_and_the_fix(capsys):
    from dse.cli import main
    code = main(["train", "--model", "llama3.1-8b", "--system", "a100-80gb", "--gpus", "8", "--precision", "fp8"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "precision:" in err and "bf16" in err
