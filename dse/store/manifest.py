"""Where a run keeps its manifest (the sidecar directory beside the dataset), what it says, and which
run a directory holds (dse.store)."""
from __future__ import annotations

import datetime as _dt
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from dse.errors import ConfigError

MANIFEST = "manifest.json"         # in the sidecar (legacy: inside the dataset)
SIDECAR_SUFFIX = ".dse"
STUDY_DATASET = "trials"           # a study run directory's dataset subdirectory
META_KEY = b"dse.manifest"
PART_RE = re.compile(r"^part-(\d{6,})\.(parquet|empty)$")
COMPRESSION = "zstd"
_OWN_SIDECAR = re.compile(r"^(part-\d{6,}\.(empty|ok)|\.part-\d{6,}\.ok\..*\.tmp|manifest\.json|\.manifest\.json\..*\.tmp|pareto\.parquet|\.lock)$")


# ----------------------------------------------------------------------------- manifest

def git_revision() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        r = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True,
                           text=True, timeout=5)
        if r.returncode == 0:
            rev = r.stdout.strip()
            dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=5)
            return rev + ("-dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return None


def package_versions() -> dict:
    from importlib import metadata
    out = {"python": sys.version.split()[0]}
    for name in ("numpy", "pandas", "pyarrow", "joblib", "dask", "distributed", "optuna", "PyYAML"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def make_manifest(space, chunk_size: int, evaluator: str) -> dict:
    from dse import __version__
    return {
        "dse_version": __version__,
        "space": {"name": space.name, "file": space.source, "hash": space.hash,
                  "content": space.canonical, "size": space.size, "exact": space.exact},
        "seed": space.seed,
        "evaluator": evaluator,
        "chunk_size": int(chunk_size),
        "n_chunks": space.n_chunks(chunk_size),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git_revision": git_revision(),
        "packages": package_versions(),
    }


def write_manifest(path, data: dict) -> None:
    """Write a JSON manifest atomically (temp file, then rename)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def sidecar(path) -> Path:
    """The sidecar directory of a dataset directory: `results/x` -> `results/x.dse`."""
    p = Path(path)
    return p.parent / (p.name + SIDECAR_SUFFIX)


def _load_json(f: Path) -> dict | None:
    if not f.is_file():
        return None
    try:
        return json.loads(f.read_text())
    except (json.JSONDecodeError, OSError):
        return None


def _is_study_run(p: Path) -> bool:
    m = _load_json(p / MANIFEST)
    return (m is not None and "study" in m) or (p / STUDY_DATASET).is_dir() or (p / "journal.log").is_file()


def dataset_dir(path) -> Path:
    """The dataset directory of `path`: a study run directory -> its `trials/`; else `path`."""
    p = Path(path)
    if p.is_dir() and (p / STUDY_DATASET).is_dir() and not _has_parts(p) and _is_study_run(p):
        return p / STUDY_DATASET
    return p


def _has_parts(p: Path) -> bool:
    return p.is_dir() and any(PART_RE.match(f.name) and f.name.endswith(".parquet") for f in p.iterdir())


def _manifest_file(d: Path) -> Path | None:
    """Where the manifest of dataset directory `d` is (sidecar, legacy inside, study run dir)."""
    for f in (sidecar(d) / MANIFEST, d / MANIFEST):
        if f.is_file():
            return f
    if d.name == STUDY_DATASET and (d.parent / MANIFEST).is_file():
        return d.parent / MANIFEST
    return None


def read_manifest(path) -> dict:
    """The manifest of a results directory (sidecar file, else the first part's metadata) or of
    one Parquet file (from its metadata)."""
    p = Path(path)
    if p.is_dir():
        d = dataset_dir(p)
        f = _manifest_file(d)
        if f is None and d.name == STUDY_DATASET and (d / MANIFEST).is_file():
            f = d / MANIFEST
        if f is not None:
            try:
                return json.loads(f.read_text())
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{f}: unreadable manifest ({exc.msg}); rerun with --overwrite") from None
        files = sorted(d.glob("part-*.parquet"))  # a copied dataset: the manifest its parts carry
        if files:
            return read_manifest(files[0])
        raise ConfigError(f"{p}: not a dse results directory (no manifest, no part files); run `dse sweep` first")
    if p.is_file():
        try:
            meta = pq.read_schema(p).metadata or {}
        except (pa.ArrowInvalid, OSError):
            raise ConfigError(f"{p}: not a Parquet file") from None
        if META_KEY in meta:
            return json.loads(meta[META_KEY])
        raise ConfigError(f"{p}: no dse manifest in the Parquet metadata")
    raise ConfigError(f"{p}: no such results directory or file")


def run_kind(manifest: dict | None) -> str | None:
    """'sweep' | 'study' | None (no manifest)."""
    if not manifest:
        return None
    return "study" if "study" in manifest else "sweep" if "space" in manifest else None
