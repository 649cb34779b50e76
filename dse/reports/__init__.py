"""dse.reports: the seed studies as ready-to-run reports (`dse report NAME|all`).

Each study is one small module here with `NAME`, `TITLE`, `GALLERY` (the figure file the README
gallery shows) and `build(report, quick=False)`, which evaluates its design points with the public
API (`dse.evaluate_training`, `dse.evaluate_inference`, `dse.roofline_table`,
`dse.evaluate_hardware`) in a few vectorized calls, and fills a `Report` (dse.reports.common) with
text, tables, PNG figures and the comparison with the published figure it reproduces, with the
error. `run_report(name)` writes results/<name>/report.md (+ figures, + tables as CSV).

`quick=True` is for tests: smaller mapping spaces and fewer points, same code paths.
"""
from __future__ import annotations

import shutil
import time
from importlib import import_module
from pathlib import Path

from dse.errors import ConfigError

# study name -> module (order = `dse report all` order and gallery order)
REPORTS = {
    "memory-recompute": "dse.reports.memory_recompute",
    "gpu-generations": "dse.reports.gpu_generations",
    "tech-scaling": "dse.reports.tech_scaling",
    "inference-roofline": "dse.reports.inference_roofline",
    "dram-scaling": "dse.reports.dram_scaling",
    "moe-ep": "dse.reports.moe_ep",
    "serving": "dse.reports.serving",
    "network-topology": "dse.reports.network_topology",
    "chiplet-cost": "dse.reports.chiplet_cost",
}

RESULTS_DIR = Path("results")
GALLERY_DIR = Path(__file__).resolve().parents[2] / "docs" / "gallery"


def module(name: str):
    if name not in REPORTS:
        raise ConfigError(f"report: unknown study '{name}'; use one of {', '.join(REPORTS)} or all")
    return import_module(REPORTS[name])


def run_report(name: str, out=None, quick: bool = False, gallery: bool = False):
    """Build study `name` into `out` (default results/<name>/); returns the Report.

    gallery=True also copies the study's gallery figure to docs/gallery/<name>.png."""
    from dse.reports.common import Report
    mod = module(name)
    out = Path(out) if out is not None else RESULTS_DIR / name
    report = Report(name, mod.TITLE, out)
    t0 = time.perf_counter()
    mod.build(report, quick=quick)
    report.elapsed_s = time.perf_counter() - t0
    report.write()
    if gallery and getattr(mod, "GALLERY", None):
        GALLERY_DIR.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / mod.GALLERY, GALLERY_DIR / f"{name}.png")
    return report
