"""Run the family fits over a kernel directory, summarise their error, and turn the fitted
parameters into the efficiency catalog (`dse/catalog/efficiency.csv`) with their provenance."""
from __future__ import annotations

from importlib import import_module
from pathlib import Path

import numpy as np
import pandas as pd

from dse.calibrate import FAMILIES, Fit, error_stats
from dse.calibrate.tables import KernelData
from dse.errors import ConfigError

CATALOG_COLUMNS = ["system", "kernels", "family", "precision", "parameter", "value",
                   "points", "median_abs_error_pct", "p90_abs_error_pct", "source"]


def calibrate(root, families=None, gpus=None) -> list[Fit]:
    """Every family's fits on every GPU folder of `root` (or the named subsets), in a fixed order."""
    data = KernelData(root)
    families = list(families or FAMILIES)
    for f in families:
        if f not in FAMILIES:
            raise ConfigError(f"--family: unknown family '{f}'; use one of {', '.join(FAMILIES)}")
    chosen = list(gpus or data.gpus)
    for g in chosen:
        if g not in data.gpus:
            raise ConfigError(f"--gpu: no kernel folder '{g}' under {data.root}; found {', '.join(data.gpus)}")
        data.system(g)  # a folder that names no catalog system is bad input: say so up front
    fits: list[Fit] = []
    for family in families:
        module = import_module(FAMILIES[family])
        for gpu in chosen:
            fits.extend(module.fit(data, gpu))
    return fits


def report(fits: list[Fit]) -> list[dict]:
    """Fit error per family and GPU over all the kernels fitted (all precisions and sub-ops pooled)."""
    groups: dict[tuple[str, str], list[Fit]] = {}
    for f in fits:
        groups.setdefault((f.family, f.gpu), []).append(f)
    rows = []
    for (family, gpu), group in groups.items():
        measured = np.concatenate([f.measured_s for f in group])
        predicted = np.concatenate([f.predicted_s for f in group])
        rows.append(error_stats(family, gpu, measured, predicted))
    return rows


def catalog_table(fits: list[Fit], root, data: KernelData | None = None) -> pd.DataFrame:
    """One row per fitted parameter: the catalog system it describes, the kernel folder it came from,
    its value, the fit's error on that precision, and the source (the kernel tables fitted)."""
    data = data or KernelData(root)
    rows = []
    for f in fits:
        stats = f.stats()
        system = data.system(f.gpu)["name"]
        source = f"dse calibrate on measured kernels {Path(root).name}/{f.gpu}/{f.family}" + (
            f" ({f.basis})" if f.basis else "")
        for name, value in f.params.items():
            rows.append({"system": system, "kernels": f.gpu, "family": f.family, "precision": f.precision,
                         "parameter": name, "value": float(value), "points": stats["points"],
                         "median_abs_error_pct": round(stats["median_abs_error_pct"], 2),
                         "p90_abs_error_pct": round(stats["p90_abs_error_pct"], 2), "source": source})
    return pd.DataFrame(rows, columns=CATALOG_COLUMNS)


def catalog_csv(table: pd.DataFrame) -> str:
    """The catalog as the exact text `--write` stores (so a test can compare it byte for byte)."""
    out = table.copy()
    out["value"] = out["value"].map(lambda v: f"{v:.3g}")
    return out.to_csv(index=False, lineterminator="\n")
