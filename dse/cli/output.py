"""Printing shared by the commands: text tables and `--json` (one JSON object on stdout; NaN and
infinities become null, numpy scalars plain numbers, categories their strings)."""
from __future__ import annotations

import json
import math
import sys

JSON_HELP = "print the result as one JSON object instead of text"


def lead(doc: str) -> str:
    """A command's description for its --help: the first paragraph of its module docstring, joined
    into one line (argparse rewraps it); a first line alone could stop mid-sentence."""
    return " ".join(doc.strip().split("\n\n")[0].split())


def print_table(df, limit: int | None = None) -> None:
    """A text table; a missing value (a fitting row's infeasible_reason, a cost without its input) is '-'."""
    import pandas as pd
    with pd.option_context("display.width", 250, "display.max_columns", 40, "display.max_rows", limit or 200,
                           "display.float_format", "{:.6g}".format):
        print(df.to_string(index=False, na_rep="-") if len(df) else "(no rows)")


def plain(value):
    """A value JSON can hold: numpy scalars as Python numbers, NaN/inf as None, containers walked."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    try:
        import pandas as pd
        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        pass
    return str(value)


def records(df) -> list[dict]:
    """Rows of a DataFrame as a list of {column: value} (categorical columns as strings)."""
    cols = list(df.columns)
    return [plain(dict(zip(cols, row))) for row in df.itertuples(index=False, name=None)]


def emit_json(obj) -> None:
    json.dump(plain(obj), sys.stdout, allow_nan=False)
    sys.stdout.write("\n")
