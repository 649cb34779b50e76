"""dse: design-space exploration for the systems that train and serve large language models.

Public API (each a pure function over columns, or a thin driver around one):
    evaluate_training(frame)   training step time, memory and breakdowns per design point
    evaluate_inference(frame)  prefill / decode latency, throughput, KV cache per design point
    evaluate_serving(frame)    continuous-batching serving: TTFT, TPOT, tokens/s per GPU and per user
    evaluate_hardware(frame)   accelerator specs and cost derived from technology
    load_space(path), sweep(...), read_results(path), run_study(...)
"""
from importlib import import_module
from typing import TYPE_CHECKING

__version__ = "0.1.0"

_API = {
    "evaluate_training": "dse.evaluate",
    "evaluate_inference": "dse.evaluate",
    "evaluate_serving": "dse.evaluate",
    "evaluate_hardware": "dse.evaluate",
    "roofline_table": "dse.optable",
    "op_table": "dse.optable",
    "load_space": "dse.space",
    "sweep": "dse.sweep",
    "read_results": "dse.store",
    "load_study": "dse.study",
    "run_study": "dse.study",
    "ConfigError": "dse.errors",
}


if TYPE_CHECKING:  # static analysers and IDEs follow the lazy names
    from dse.errors import ConfigError  # noqa: F401
    from dse.evaluate import evaluate_hardware, evaluate_inference, evaluate_serving, evaluate_training  # noqa: F401
    from dse.optable import op_table, roofline_table  # noqa: F401
    from dse.space import load_space  # noqa: F401
    from dse.store import read_results  # noqa: F401
    from dse.study import load_study, run_study  # noqa: F401
    from dse.sweep import sweep  # noqa: F401


def __getattr__(name):  # lazy: importing dse stays cheap, and each stage loads what it needs
    if name in _API:
        return getattr(import_module(_API[name]), name)
    raise AttributeError(f"module 'dse' has no attribute {name!r}")


__all__ = sorted(_API) + ["__version__"]
