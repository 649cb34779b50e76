"""`dse train`: one training design point, its step time, memory and breakdown.

Unlike a batch evaluation (where an impossible split is a row with fits=False), a single
request with an impossible split is refused with one line naming the field to change.
"""
from __future__ import annotations

import numpy as np

from dse.errors import ConfigError

INPUTS = (
    ("model", str, None), ("system", str, None), ("gpus", int, None), ("tp", int, 1), ("pp", int, 1),
    ("cp", int, 1), ("ep", int, 1), ("vp", int, 1), ("global_batch", int, None), ("micro_batch", int, 1),
    ("seq_len", int, None), ("recompute", str, "none"), ("zero", int, 0), ("precision", str, "bf16"),
)
FLAGS = ("sp", "flash_attention", "dp_overlap", "tp_overlap")


def run(args) -> int:
    import dse
    row = {name: getattr(args, name) for name, _, _ in INPUTS if getattr(args, name) is not None}
    for flag in FLAGS:
        value = getattr(args, flag)
        if value is not None:
            row[flag] = value == "on"
    out = dse.evaluate_training({k: np.array([v]) for k, v in row.items()})
    from dse.schema import REASON_CODE, REASONS
    code, reason = int(out["infeasible_code"][0]), str(out["infeasible_reason"][0])
    if code not in (0, REASON_CODE["out_of_memory"]):  # an impossible request: name the field to change
        raise ConfigError(f"{REASONS[code].field}: {reason}")
    time_cols = ["compute_s", "recompute_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s",
                 "dp_comm_s", "bubble_s", "optimizer_s"]
    mem_cols = ["weights_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes"]
    print(f"step_time_s        {out['step_time_s'][0]:.4f}")
    print(f"tokens_per_s       {out['tokens_per_s'][0]:,.0f}")
    print(f"mfu                {out['mfu'][0]:.3f}   hfu {out['hfu'][0]:.3f}")
    print(f"mem_per_gpu_bytes  {out['mem_per_gpu_bytes'][0] / 2**30:.2f} GiB   fits {bool(out['fits'][0])}"
          + (f" ({reason})" if reason else ""))
    print("time breakdown (exposed, s): " + ", ".join(f"{c[:-2]} {out[c][0]:.3f}" for c in time_cols))
    print("memory per GPU (GiB): " + ", ".join(f"{c[:-6]} {out[c][0] / 2**30:.2f}" for c in mem_cols))
    return 0


def register(sub) -> None:
    p = sub.add_parser("train", help="evaluate one training design point")
    for name, kind, default in INPUTS:
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=kind, default=default,
                       required=name in ("model", "system", "gpus"))
    for flag in FLAGS:
        p.add_argument(f"--{flag.replace('_', '-')}", dest=flag, choices=["on", "off"], default=None)
    p.set_defaults(func=run)
