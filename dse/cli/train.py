"""`dse train`: one training design point, its step time, memory and breakdown.

Unlike a batch evaluation (where an impossible split is a row with fits=False), a single
request with an impossible split is refused with one line naming the field to change.
"""
from __future__ import annotations

import json

import numpy as np

from dse.cli.output import lead
from dse.errors import ConfigError

# Options: schema columns (their doc, default and domain make the help text). Absent options take
# the schema default or, for software settings, the framework preset's value.
INPUTS = ("model", "system", "framework", "gpus", "tp", "pp", "cp", "ep", "vp", "global_batch", "micro_batch",
          "seq_len", "recompute", "recompute_modules", "recompute_layers", "zero", "precision", "expert_precision", "adapter", "adapter_rank",
          "offload_layers", "offload_modules", "train_tokens")
FLAGS = ("sp", "flash_attention", "fp8_attention", "dp_overlap", "tp_overlap", "tp_overlap_aggregate", "dp_hierarchical")
REQUIRED = ("model", "system", "gpus")
TIME_COLUMNS = ("compute_s", "recompute_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "host_wait_s", "offload_s", "pp_comm_s", "dp_comm_s",
                "bubble_s", "optimizer_s")
MEMORY_COLUMNS = ("weights_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes")


def request_row(args, inputs, flags) -> dict:
    """The options given on the command line, as one row of inputs."""
    row = {name: getattr(args, name) for name in inputs if getattr(args, name) is not None}
    row.update({flag: getattr(args, flag) == "on" for flag in flags if getattr(args, flag) is not None})
    return row


SPLIT_DEGREES = ("tp", "pp", "cp")


def refuse_impossible(out, row: dict) -> str:
    """The infeasible reason of a one-row result ('' when it fits); an impossible request (anything
    but running out of memory) is a ConfigError naming the field to change."""
    from dse.schema import REASON_CODE, REASONS
    code = int(np.asarray(out["infeasible_code"])[0])
    reason = "" if code == 0 else str(np.asarray(out["infeasible_reason"])[0])
    if code in (0, REASON_CODE["out_of_memory"]):
        return reason
    if code == REASON_CODE["domain"]:  # the reason starts with the column
        raise ConfigError(reason)
    if code in (REASON_CODE["split"], REASON_CODE["not_integer"]) and _split_fault(row):
        raise ConfigError(_split_message(row))
    raise ConfigError(f"{REASONS[code].field}: {reason}")


def _split_fault(row: dict) -> bool:
    """True when the degrees given do not divide the GPU count."""
    if "gpus" not in row:
        return False
    return int(row["gpus"]) % int(np.prod([int(row.get(n, 1)) for n in SPLIT_DEGREES])) != 0


def _split_message(row: dict) -> str:
    """The GPU count and the degree that first stops tp*pp*cp dividing it (in the order tp, pp, cp)."""
    gpus, product, field = int(row["gpus"]), 1, None
    for name in SPLIT_DEGREES:
        product *= int(row.get(name, 1))
        if name in row and gpus % product and field is None:
            field = name
    total = int(np.prod([int(row.get(n, 1)) for n in SPLIT_DEGREES]))
    given = "*".join(n for n in SPLIT_DEGREES if n in row) or "tp*pp*cp"
    fault = (f" (the product stops dividing gpus at {field} = {row[field]}); change {field} or gpus" if field
             else "; change the degrees or gpus")
    return f"gpus: {gpus} is not a multiple of {given} = {total}{fault}"


def run(args) -> int:
    import dse
    row = request_row(args, INPUTS, FLAGS)
    out = dse.evaluate_training({k: np.array([v]) for k, v in row.items()})
    reason = refuse_impossible(out, row)
    if args.json:
        keys = ["step_time_s", "tokens_per_s", "mfu", "hfu", "mem_per_gpu_bytes", "fits", "infeasible_code",
                *TIME_COLUMNS, *MEMORY_COLUMNS, "cost_per_million_tokens_usd", "cost_per_run_usd"]
        print(json.dumps({k: (None if isinstance(v, float) and np.isnan(v) else v)
                          for k, v in ((k, np.asarray(out[k])[0].item()) for k in keys)} | {"infeasible_reason": reason or None}))
        return 0
    print(f"step_time_s        {out['step_time_s'][0]:.4f}")
    print(f"tokens_per_s       {out['tokens_per_s'][0]:,.0f}")
    print(f"mfu                {out['mfu'][0]:.3f}   hfu {out['hfu'][0]:.3f}")
    print(f"mem_per_gpu        {out['mem_per_gpu_bytes'][0] / 2**30:.2f} GiB   fits {bool(out['fits'][0])}"
          + (f" ({reason})" if reason else ""))
    print("time breakdown (exposed, s): " + ", ".join(f"{c[:-2]} {out[c][0]:.3f}" for c in TIME_COLUMNS))
    print("memory per GPU (GiB): " + ", ".join(f"{c[:-6]} {out[c][0] / 2**30:.2f}" for c in MEMORY_COLUMNS))
    return 0


def option_help(name: str, required: bool = False) -> str:
    """The schema's one-line doc, with the default (or 'required') and the allowed values."""
    from dse import schema
    c = schema.columns()[name]
    default = {"": "unset", "framework": "the framework preset", "precision": "as --precision"}.get(c.default, c.default)
    if c.default.startswith("catalog:"):
        default = "from the catalog"
    allowed = (f"; one of {', '.join(schema.ENUMS[name])}" if name in schema.ENUMS
               else f"; see `dse list {c.domain.split(':')[1]}s`" if c.domain.startswith("catalog:")
               else f"; domain {c.domain}" if c.domain and c.domain != "bool" else "")
    return f"{c.doc} ({'required' if required else f'default: {default}'}{allowed})"


def add_schema_options(p, inputs, flags, required) -> None:
    """One option per schema column (type, doc, default and allowed values from dse.schema)."""
    from dse import schema
    for name in inputs:
        c = schema.columns()[name]
        kind = {"int": int, "float": float}.get(c.dtype, str)
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=kind, default=None,  # enums: the library
                       required=name in required, help=option_help(name, name in required))  # takes aliases
    for flag in flags:
        p.add_argument(f"--{flag.replace('_', '-')}", dest=flag, choices=["on", "off"], default=None,
                       help=option_help(flag) + "; on or off")


def register(sub) -> None:
    p = sub.add_parser("train", help="evaluate one training design point",
                       description=lead(__doc__))
    add_schema_options(p, INPUTS, FLAGS, REQUIRED)
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.set_defaults(func=run)
