"""dse: design-space exploration for the systems that train and serve large language models.

Public API (each a pure function over columns, or a thin driver around one):
    evaluate_training(frame)   training step time, memory and breakdowns per design point
    evaluate_inference(frame)  prefill / decode latency, throughput, KV cache per design point
    evaluate_hardware(frame)   accelerator specs and cost derived from technology
    load_space(path), sweep(...), read_results(path), run_study(...)
"""
from importlib import import_module

__version__ = "0.1.0"

_API = {
    "evaluate_training": "dse.perf.training",
    "evaluate_inference": "dse.perf.inference",
    "roofline_table": "dse.perf.inference",
    "evaluate_hardware": "dse.hardware",
    "load_space": "dse.space",
    "sweep": "dse.sweep",
    "read_results": "dse.store",
    "load_study": "dse.study",
    "run_study": "dse.study",
    "ConfigError": "dse.errors",
}


def __getattr__(name):  # lazy: importing dse stays cheap, and each stage loads what it needs
    if name in _API:
        return getattr(import_module(_API[name]), name)
    raise AttributeError(f"module 'dse' has no attribute {name!r}")


__all__ = sorted(_API) + ["__version__"]
