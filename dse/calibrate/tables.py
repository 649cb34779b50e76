"""Kernel tables in the layout `<gpu>/<family>/<framework>/<version>/<table>.parquet`.

A GPU folder is named after the part (`h100_sxm`, `gb200`, ...): it must resolve to a catalog
system (`dse.catalog.resolve`; the AIConfigurator folder names are aliases), because efficiencies
are fractions of that system's catalog peaks and bandwidths. Where a family has several versions
of one framework's table, the newest version wins for the shapes it measured and older versions
supply the rest (the `reuse.yaml` convention of AIConfigurator's database).
"""
from __future__ import annotations

from functools import cached_property, lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from dse import catalog
from dse.errors import ConfigError

# Columns that carry provenance rather than what was measured (op, kernel and shape are keys).
NOT_KEYS = {"framework", "version", "device", "latency"}


def _version_key(version: str):
    """Sort key for versions like 1.3.0rc20 / 0.24.0 / 2.29.2 (release after its candidates)."""
    parts = []
    for piece in version.replace("rc", ".-1.").split("."):
        try:
            parts.append(int(piece))
        except ValueError:
            parts.append(0)
    return parts


class KernelData:
    """One directory of kernel tables, per GPU folder."""

    def __init__(self, root):
        self.root = Path(root)
        if not self.root.is_dir():
            raise ConfigError(f"kernels: {self.root} is not a directory (expected <gpu>/<family>/<framework>/<version>/*.parquet)")

    @cached_property
    def gpus(self) -> list[str]:
        found = sorted(p.name for p in self.root.iterdir() if p.is_dir() and any(p.glob("*/*/*/*.parquet")))
        if not found:
            raise ConfigError(f"kernels: no <gpu>/<family>/<framework>/<version>/*.parquet under {self.root}")
        return found

    def system(self, gpu: str) -> pd.Series:
        """The catalog system of a GPU folder (its peaks, bandwidths and generation)."""
        return catalog.systems().loc[catalog.resolve("system", gpu, f"kernels folder {gpu}")]

    def frameworks(self, gpu: str, family: str) -> list[str]:
        base = self.root / gpu / family
        return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []

    def table(self, gpu: str, family: str, name: str, framework: str | None = None) -> pd.DataFrame:
        """All measured rows of `<name>.parquet` for one GPU and family (one framework, or the
        first that has it in name order), newest version first on duplicate shapes; empty if absent.
        `latency_s` is added in seconds (the tables store milliseconds)."""
        return _read_table(str(self.root), gpu, family, name, framework).copy()


@lru_cache(maxsize=64)
def _read_table(root: str, gpu: str, family: str, name: str, framework: str | None) -> pd.DataFrame:
    base = Path(root) / gpu / family
    frameworks = [framework] if framework else sorted(p.name for p in base.iterdir()) if base.is_dir() else []
    for fw in frameworks:
        versions = sorted((p for p in (base / fw).glob("*") if (p / f"{name}.parquet").exists()),
                          key=lambda p: _version_key(p.name), reverse=True)
        if not versions:
            continue
        parts = []
        for v in versions:
            try:
                parts.append(pd.read_parquet(v / f"{name}.parquet"))
            except Exception as exc:  # a malformed file is bad input: name it
                raise ConfigError(f"kernels: cannot read {v / (name + '.parquet')} ({exc})") from None
        t = pd.concat(parts, ignore_index=True)
        keys = [c for c in t.columns if c not in NOT_KEYS]
        t = t.drop_duplicates(subset=keys, keep="first").reset_index(drop=True)
        if "latency" in t.columns:
            t["latency_s"] = t["latency"].astype(float) * 1e-3
        t = t[np.isfinite(t.get("latency_s", pd.Series(1.0, index=t.index))) &
              (t.get("latency_s", pd.Series(1.0, index=t.index)) > 0)]
        return t.reset_index(drop=True)
    return pd.DataFrame()
