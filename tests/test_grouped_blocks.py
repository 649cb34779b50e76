"""Evaluation by catalog entry (dse.columns.blockwise) and once per distinct row (dse.perf.distinct):
a row's results do not depend on which rows share its block, on the order the blocks take the rows,
or on whether a pass was timed once per distinct row."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse import columns
from dse.bench import as_user_frame, random_inference_points, random_training_points
from dse.evaluate import evaluate_inference, evaluate_training
from dse.perf import distinct


def _frame(points):
    """Mostly six (model, system) pairs, whose rows make uniform blocks, and a tenth of other pairs,
    which share mixed blocks."""
    frame = as_user_frame(points(6000, seed=4))
    rng = np.random.default_rng(4)
    common = rng.random(len(frame)) < 0.9
    frame.loc[common, "model"] = rng.choice(["llama3.1-8b", "mixtral-8x7b", "nemotron-h-56b"], common.sum())
    frame.loc[common, "system"] = rng.choice(["h100-sxm", "b200"], common.sum())
    return frame


@pytest.mark.parametrize("max_share", [0.25, 1.0])
@pytest.mark.parametrize("evaluate, points", [(evaluate_training, random_training_points),
                                              (evaluate_inference, random_inference_points)])
def test_grouped_blocks_give_the_same_answer_as_one_pass(monkeypatch, evaluate, points, max_share):
    frame = _frame(points)
    whole = evaluate(frame)   # one block: no grouping, nothing timed per distinct row
    monkeypatch.setattr(columns, "UNIFORM_ROWS", 300)
    monkeypatch.setattr(columns.blockwise, "__defaults__", (400,))
    monkeypatch.setattr(distinct.distinct, "__defaults__", (8, max_share))
    grouped = evaluate(frame)
    assert list(grouped.columns) == list(whole.columns)
    for name in whole.columns:
        a, b = whole[name], grouped[name]
        assert a.dtype == b.dtype, name
        if isinstance(a.dtype, pd.CategoricalDtype):
            assert a.astype(object).equals(b.astype(object)), name
        else:
            np.testing.assert_array_equal(a.to_numpy(), b.to_numpy(), err_msg=name)


def test_a_uniform_block_reads_a_catalog_column_as_one_value(monkeypatch):
    monkeypatch.setattr(columns, "UNIFORM_ROWS", 3)
    codes = np.array([1, 0, 1, 1, 0])
    work = {"x": columns.CatalogColumn(codes, np.array([5.0, 7.0]), np.ones(2, dtype=bool)), "y": np.arange(5.0)}
    order, blocks = columns.row_groups(work, 5, 4)
    assert blocks == [(0, 3, True), (3, 5, False)]   # entry 1 has 3 rows, entry 0 only 2
    rows = columns.Reordered(work, order)
    uniform, mixed = (columns.Block(rows, slice(a, b), u) for a, b, u in blocks)
    np.testing.assert_array_equal(uniform["x"], [7.0])
    np.testing.assert_array_equal(uniform["y"], [0.0, 2.0, 3.0])
    np.testing.assert_array_equal(mixed["x"], [5.0, 5.0])
    np.testing.assert_array_equal(mixed["y"], [1.0, 4.0])
