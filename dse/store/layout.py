"""A dataset directory's lifecycle: refusal checks, creation, resume, finishing (dse.store)."""
from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path

from dse.errors import ConfigError
from dse.store.verify import torn_parts
from dse.store.manifest import (
    _OWN_SIDECAR,
    MANIFEST,
    PART_RE,
    SIDECAR_SUFFIX,
    _has_parts,
    _is_study_run,
    _load_json,
    _manifest_file,
    make_manifest,
    read_manifest,
    run_kind,
    sidecar,
    write_manifest,
)

# ----------------------------------------------------------------------------- directory lifecycle

def part_files(path, include_empty: bool = False) -> list[Path]:
    """Finished part files of a dataset directory, in chunk order (with include_empty, also the
    .empty markers of chunks without rows, from the sidecar and from legacy directories)."""
    p = Path(path)
    parts = []
    dirs = [p] + ([sidecar(p)] if include_empty else [])
    for d in dirs:
        if not d.is_dir():
            continue
        for f in d.iterdir():
            m = PART_RE.match(f.name)
            if m and (m.group(2) == "parquet" and d == p or include_empty and m.group(2) == "empty"):
                parts.append((int(m.group(1)), f))
    return [f for _, f in sorted(parts)]


def done_chunks(path) -> set[int]:
    return {int(PART_RE.match(f.name).group(1)) for f in part_files(path, include_empty=True)}


def _temp_files(p: Path) -> list[Path]:
    pre = f".{p.name}.part-"
    out = [f for f in p.parent.iterdir() if f.name.startswith(pre) and f.name.endswith(".tmp")] if p.parent.is_dir() else []
    if p.is_dir():  # legacy temp names inside the directory
        out += [f for f in p.iterdir() if f.name.startswith(".part-") and f.name.endswith(".tmp")]
    return out


def _remove_own_files(p: Path, only_temp: bool = False) -> None:
    for f in _temp_files(p):
        f.unlink(missing_ok=True)
    if sidecar(p).is_dir():  # half-written receipts
        for f in sidecar(p).glob(".part-*.ok.*.tmp"):
            f.unlink(missing_ok=True)
    if only_temp:
        return
    for d, own in ((p, PART_RE), (sidecar(p), _OWN_SIDECAR)):
        if d.is_dir():
            for f in d.iterdir():
                if f.is_file() and (own.match(f.name) or d == p and f.name == MANIFEST):
                    f.unlink(missing_ok=True)


def check_output(path, space, overwrite: bool = False) -> dict | None:
    """Raise ConfigError (one line) if `path` cannot receive `space`'s results; touches nothing.

    Returns the existing manifest when the directory holds a run of the same space (resume).
    A study's run directory (or its dataset) is refused even with overwrite.
    """
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{p}: exists and is not a directory; give --out a directory path")
    mf = _manifest_file(p) if p.is_dir() else (sidecar(p) / MANIFEST if (sidecar(p) / MANIFEST).is_file() else None)
    old = _load_json(mf) if mf is not None else None
    if old is None and _has_parts(p):
        try:
            old = read_manifest(part_files(p)[0])
        except ConfigError:
            old = None
    if run_kind(old) == "study" or p.name.endswith(SIDECAR_SUFFIX) or (p.is_dir() and _is_study_run(p)):
        what = f"study '{old['study'].get('name')}'" if run_kind(old) == "study" else "a study or a sidecar"
        raise ConfigError(f"{p}: holds the results of {what}, not a sweep; choose another --out")
    if not (p.is_dir() and any(p.iterdir())) and old is None:
        return None
    if old is not None and old.get("space", {}).get("hash") == space.hash and not overwrite:
        return old
    if overwrite:
        return None
    if old is None:
        raise ConfigError(f"{p}: not empty and holds no dse run (no manifest); "
                          "choose another --out or pass --overwrite")
    other = old.get("space", {})
    raise ConfigError(f"{p}: holds results of another space ('{other.get('name')}', hash "
                      f"{str(other.get('hash'))[:12]}), not '{space.name}' ({space.hash[:12]}); "
                      "choose another --out or pass --overwrite to replace them")


def _migrate_legacy(p: Path) -> None:
    """Move an earlier version's manifest and .empty markers out of the dataset into the sidecar."""
    side = sidecar(p)
    side.mkdir(parents=True, exist_ok=True)
    for f in list(p.iterdir()):
        if f.name == MANIFEST or (PART_RE.match(f.name) and f.name.endswith(".empty")):
            os.replace(f, side / f.name)


def prepare_output(path, space, overwrite: bool = False, chunk_size: int | None = None,
                   evaluator: str = "training") -> tuple[dict, set[int]]:
    """Validate or create a results directory for `space`. Returns (manifest, finished chunk ids).

    Raises ConfigError (before touching anything) if the directory holds another space's run,
    a study, or foreign files, unless overwrite; a run of the same space resumes.
    """
    p = Path(path)
    old = check_output(p, space, overwrite)
    if old is not None:
        _remove_own_files(p, only_temp=True)  # a killed run's half-written temp files
        if p.is_dir():
            _migrate_legacy(p)
            for part in torn_parts(part_files(p)):  # truncated, emptied or overwritten: redo its chunk
                part.unlink(missing_ok=True)
        if not (sidecar(p) / MANIFEST).is_file():   # a copied dataset: manifest from its parts
            sidecar(p).mkdir(parents=True, exist_ok=True)
            write_manifest(sidecar(p) / MANIFEST, old)
        return old, done_chunks(p)
    if overwrite:
        _remove_own_files(p)
    p.mkdir(parents=True, exist_ok=True)
    sidecar(p).mkdir(parents=True, exist_ok=True)
    manifest = make_manifest(space, chunk_size or space.chunk_size, evaluator)
    write_manifest(sidecar(p) / MANIFEST, manifest)
    return manifest, set()


def finish(path, rows: int, wall_s: float) -> dict:
    """Mark a run complete in its manifest (rows, wall time of the last session)."""
    p = Path(path)
    m = read_manifest(p)
    mf = _manifest_file(p) or sidecar(p) / MANIFEST
    m["complete"] = True
    m["rows"] = int(rows)
    m["finished"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    m["last_session_wall_s"] = round(float(wall_s), 3)
    write_manifest(mf, m)
    return m
