"""`dse infer`: one inference design point (dse.evaluate_inference), its latency, throughput and cost.

Prints time to first token, time per output token, throughput (per deployment and per GPU), KV
cache and memory per GPU, the prefill/decode breakdown and the cost per million tokens.

A single request with an impossible split is refused with one line naming the field to change
(in a batch evaluation it would be a row with fits=False). `--json` prints one object with the keys
of JSON_KEYS, NaN as null.
"""
from __future__ import annotations

import numpy as np

from dse.cli.output import JSON_HELP, emit_json, lead, plain
from dse.cli.train import add_schema_options, refuse_impossible, request_row

INPUTS = ("model", "system", "framework", "gpus", "tp", "pp", "ep", "batch", "isl", "osl", "precision",
          "expert_precision", "kv_precision")
REQUIRED = ("model", "system", "gpus")
PREFILL_COLUMNS = ("prefill_compute_s", "prefill_memory_s", "prefill_comm_s", "prefill_overhead_s")
DECODE_COLUMNS = ("decode_compute_s", "decode_memory_s", "decode_comm_s", "decode_overhead_s")
JSON_KEYS = ("ttft_s", "tpot_s", "e2e_latency_s", "output_tokens_per_s", "output_tokens_per_s_per_gpu",
             "kv_cache_bytes", "mem_per_gpu_bytes", "weights_bytes", "activations_bytes", "fits",
             "infeasible_code", "infeasible_reason", "prefill_bound", "decode_bound", *PREFILL_COLUMNS,
             *DECODE_COLUMNS, "cost_per_million_tokens_usd", "system_capex_usd", "energy_j")
GIB = 2**30


def run(args) -> int:
    import dse
    row = request_row(args, INPUTS, ())
    out = dse.evaluate_inference({k: np.array([v]) for k, v in row.items()})
    reason = refuse_impossible(out, row)
    result = {k: plain(np.asarray(out[k])[0]) for k in JSON_KEYS if k in out and k != "infeasible_reason"}
    result["output_tokens_per_s_per_gpu"] = result["output_tokens_per_s"] / args.gpus
    result["infeasible_reason"] = reason or None
    if args.json:
        emit_json({k: result.get(k) for k in JSON_KEYS})
        return 0
    r = result
    print(f"ttft_s               {r['ttft_s']:.4f}   (time to first token; prefill {r['prefill_bound']}-bound)")
    print(f"tpot_s               {r['tpot_s']:.5f}  (time per output token; decode {r['decode_bound']}-bound)")
    print(f"e2e_latency_s        {r['e2e_latency_s']:.3f}")
    print(f"output tokens/s      {r['output_tokens_per_s']:,.0f}   ({r['output_tokens_per_s_per_gpu']:,.1f} per GPU)")
    print(f"kv_cache per GPU     {r['kv_cache_bytes'] / GIB:.2f} GiB")
    print(f"mem_per_gpu          {r['mem_per_gpu_bytes'] / GIB:.2f} GiB   fits {bool(r['fits'])}"
          + (f" ({reason})" if reason else ""))
    print("prefill (s): " + ", ".join(f"{c[8:-2]} {r[c]:.4f}" for c in PREFILL_COLUMNS))
    print("decode step (s): " + ", ".join(f"{c[7:-2]} {r[c]:.5f}" for c in DECODE_COLUMNS))
    cost = r.get("cost_per_million_tokens_usd")
    print(f"cost per Mtoken      {'n/a' if cost is None or np.isnan(cost) else f'${cost:,.2f}'}"
          "   (assumptions: `dse list assumptions`)")
    return 0


def register(sub) -> None:
    p = sub.add_parser("infer", help="evaluate one inference design point", description=lead(__doc__))
    add_schema_options(p, INPUTS, (), REQUIRED)
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.set_defaults(func=run)
