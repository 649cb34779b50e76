"""Every committed part has a receipt in the sidecar (`part-NNNNNN.ok`: rows, bytes, sha256), written
after the part is complete and before it is renamed into the dataset. A part whose receipt is
missing or disagrees with it (truncated, emptied, overwritten, written by someone else) is torn:
resume redoes its chunk, and every reader names the file in one line instead of reading it.

Readers check rows and size (the Parquet footer and a stat: cheap); resume also checks the sha256.
Datasets written before receipts existed (no receipt at all) are read as they are.
"""
from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path

import pyarrow.parquet as pq

from dse.errors import ConfigError
from dse.store.manifest import sidecar

RECEIPT = "part-{:06d}.ok"


def file_sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_receipt(dataset, chunk_id: int, part_tmp: Path, rows: int) -> None:
    """The receipt of a part still at its temporary name (called before the rename)."""
    side = sidecar(dataset)
    side.mkdir(parents=True, exist_ok=True)
    receipt = {"rows": int(rows), "bytes": part_tmp.stat().st_size, "sha256": file_sha256(part_tmp)}
    tmp = side / f".{RECEIPT.format(chunk_id)}.{uuid.uuid4().hex[:8]}.tmp"
    tmp.write_text(json.dumps(receipt))
    os.replace(tmp, side / RECEIPT.format(chunk_id))


def _chunk_id(part: Path) -> int:
    return int(part.name.split("-")[1].split(".")[0])


def has_receipts(dataset) -> bool:
    """Whether the dataset was written with receipts (datasets of earlier versions were not)."""
    side = sidecar(dataset)
    return side.is_dir() and any(f.name.endswith(".ok") for f in side.iterdir())


def part_problem(part: Path, deep: bool = False, receipts_expected: bool = True) -> str | None:
    """Why a part cannot be trusted (None: it can). deep also compares the sha256."""
    receipts = sidecar(part.parent) / RECEIPT.format(_chunk_id(part))
    if not receipts.is_file():
        return "no receipt for this part (written by another program, or torn)" if receipts_expected else None
    try:
        want = json.loads(receipts.read_text())
    except (OSError, json.JSONDecodeError):
        return "its receipt is unreadable"
    size = part.stat().st_size
    if size != want["bytes"]:
        return f"{size:,} bytes, its receipt says {want['bytes']:,} (truncated or overwritten)"
    try:
        rows = pq.read_metadata(part).num_rows
    except Exception:  # noqa: BLE001 - any Arrow error: the file is not the Parquet part it was
        return "not a readable Parquet file"
    if rows != want["rows"]:
        return f"{rows:,} rows, its receipt says {want['rows']:,}"
    if deep and file_sha256(part) != want["sha256"]:
        return "its content differs from its receipt (checksum)"
    return None


def check_parts(parts: list[Path]) -> None:
    """ConfigError naming the first part that is torn (readers: `show`, `top`, `pareto`, read_results)."""
    expected = bool(parts) and has_receipts(parts[0].parent)
    for part in parts:
        problem = part_problem(part, receipts_expected=expected)
        if problem:
            raise ConfigError(f"{part}: torn or altered part: {problem}; rerun the same `dse sweep` to "
                              "redo its chunk")


def torn_parts(parts: list[Path]) -> list[Path]:
    """The parts resume must redo (checked to the checksum)."""
    expected = bool(parts) and has_receipts(parts[0].parent)
    return [p for p in parts if part_problem(p, deep=True, receipts_expected=expected)]
