"""`dse serve`: the best serving configurations of a model on some GPUs of some systems.

Evaluates every mapping (tp x pp, ep for MoE), aggregated and disaggregated (prefill on 1/8, 1/4
or 1/2 of the GPUs), at 1 to 1024 requests in flight per replica and at as many as fit, in one
vectorized call (dse.serve, dse.evaluate_serving). Prints, per system and GPU count, the
configuration with the most output tokens/s per GPU whose mean TTFT and TPOT meet the targets,
and writes to --out the Pareto front of output tokens/s per GPU against tokens/s per user
(front.parquet, front.png) and every evaluated point (points.parquet).
"""
from __future__ import annotations

import json
from pathlib import Path

from dse.cli.output import lead
from dse.errors import ConfigError

MARK = "serve.json"   # names the run an output directory holds


def _targets(args):
    ttft = None if args.ttft_ms is None else args.ttft_ms / 1e3
    tpot = None if args.tpot_ms is None else args.tpot_ms / 1e3
    for name, v in (("--ttft-ms", ttft), ("--tpot-ms", tpot)):
        if v is not None and not v > 0:
            raise ConfigError(f"{name}: give a positive number of milliseconds")
    return ttft, tpot


def _mapping(r) -> str:
    ep = f" ep{int(r['ep'])}" if r["ep"] > 1 else ""
    if r["disaggregated"]:
        return (f"disagg: prefill {int(r['prefill_gpus'])} GPUs (tp{int(r['prefill_tp'])}), "
                f"decode {int(r['decode_gpus'])} GPUs (tp{int(r['tp'])} pp{int(r['pp'])}{ep})")
    return f"tp{int(r['tp'])} pp{int(r['pp'])}{ep} x{int(r['gpus'] // (r['tp'] * r['pp']))}"


def _out_dir(path: str, request: dict) -> Path:
    out = Path(path)
    if out.exists() and any(out.iterdir()):
        mark = out / MARK
        if not mark.exists():
            raise ConfigError(f"--out {out}: holds files of another run; give an empty or new directory")
    out.mkdir(parents=True, exist_ok=True)
    (out / MARK).write_text(json.dumps(request, indent=1, default=str) + "\n")
    return out


def _plot(front, path: Path, title: str) -> None:
    from dse import plotstyle
    fig, ax = plotstyle.figure(1, 1)
    for i, (system, group) in enumerate(front.groupby("system", observed=True)):
        color = plotstyle.SYSTEM.get(system, plotstyle.SERIES[i % len(plotstyle.SERIES)])
        for disagg, marker in ((False, "o"), (True, "^")):
            part = group[group["disaggregated"].astype(bool) == disagg]
            if len(part):
                ax.plot(part["output_tokens_per_s_per_user"], part["output_tokens_per_s_per_gpu"], marker=marker,
                        ls="-" if not disagg else "--", color=color,
                        label=f"{system} {'disaggregated' if disagg else 'aggregated'}")
    ax.set_xlabel("output tokens/s per user (1 / TPOT)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.set_title(title)
    ax.legend(fontsize="small")
    plotstyle.save(fig, path)


def _closest(results, system, gpus) -> str:
    """How near the targets a system's GPUs come: the lowest TTFT and TPOT of its configurations that fit."""
    mine = results[(results["system"].astype(str) == system) & (results["gpus"] == gpus) & results["fits"].astype(bool)]
    if not len(mine):
        return " (none fits in memory)"
    return f" (lowest reached: TTFT {mine['ttft_s'].min() * 1e3:.1f} ms, TPOT {mine['tpot_s'].min() * 1e3:.2f} ms)"


def run(args) -> int:
    import dse
    from dse import serve
    ttft, tpot = _targets(args)
    systems = [s.strip() for s in args.system.split(",") if s.strip()]
    try:
        gpus = [float(g) for g in args.gpus.split(",") if g.strip()]
    except ValueError:
        raise ConfigError(f"--gpus {args.gpus}: give GPU counts separated by commas, e.g. 8,16,32,64") from None
    if not systems or not gpus:
        raise ConfigError("--system, --gpus: give at least one of each")
    frame = serve.space(args.model, systems, gpus, args.isl, args.osl, args.framework, args.precision,
                        args.kv_precision, disaggregated=not args.aggregated_only,
                        expert_precision=args.expert_precision)
    if args.eplb:   # redundant experts placed by a load balancer: even expert loads, not the preset's skew
        frame["moe_imbalance"] = 1.0
    results = dse.evaluate_serving(frame)
    chosen = serve.best(results, ttft, tpot).groupby(["system", "gpus"], observed=True).head(1)
    print(f"{args.model}, isl {args.isl}, osl {args.osl}: {len(results):,} configurations evaluated; "
          f"targets: TTFT {'-' if ttft is None else f'{ttft * 1e3:g} ms'}, TPOT {'-' if tpot is None else f'{tpot * 1e3:g} ms'}")
    header = f"{'system':<10}{'GPUs':>5}  {'mapping':<58}{'in flight':>10}{'TTFT ms':>9}{'TPOT ms':>9}{'tok/s/GPU':>11}{'tok/s/user':>11}{'$/Mtok':>8}"
    print(header)
    for _, r in chosen.sort_values(["system", "gpus"]).iterrows():
        pool = r["decode_gpus"] if r["disaggregated"] else r["gpus"]
        print(f"{r['system']:<10}{int(r['gpus']):>5}  {_mapping(r):<58}{r['batch'] * pool / (r['tp'] * r['pp']):>10.0f}"
              f"{r['ttft_s'] * 1e3:>9.1f}{r['tpot_s'] * 1e3:>9.2f}{r['output_tokens_per_s_per_gpu']:>11,.0f}"
              f"{r['output_tokens_per_s_per_user']:>11.1f}{r['cost_per_million_tokens_usd']:>8.3f}")
    missing = {(s, g) for s in {catalog_name(s) for s in systems} for g in gpus} - set(zip(chosen["system"], chosen["gpus"]))
    for s, g in sorted(missing):
        print(f"{s:<10}{int(g):>5}  no configuration meets the targets{_closest(results, s, g)}")
    if args.out:
        out = _out_dir(args.out, vars(args) | {"func": None})
        front = serve.front(results)
        front.to_parquet(out / "front.parquet", index=False)
        results.to_parquet(out / "points.parquet", index=False)
        _plot(front, out / "front.png", f"{args.model}: isl {args.isl}, osl {args.osl}")
        print(f"front: {len(front)} points -> {out / 'front.parquet'}, {out / 'front.png'}; all points -> {out / 'points.parquet'}")
    return 0


def catalog_name(system: str) -> str:
    from dse import catalog
    return catalog.resolve_system(system)


def register(sub) -> None:
    p = sub.add_parser("serve", help="search serving configurations: best per system and the Pareto front",
                       description=lead(__doc__))
    p.add_argument("model", help="catalog model (dse list models) or a Hugging Face config.json")
    p.add_argument("--system", required=True, help="catalog systems, comma-separated (dse list systems)")
    p.add_argument("--gpus", required=True, help="GPU counts, comma-separated (e.g. 8,16,32,64)")
    p.add_argument("--isl", type=int, default=1024, help="input (prompt) tokens per request (default 1024)")
    p.add_argument("--osl", type=int, default=1024, help="output tokens per request (default 1024)")
    p.add_argument("--ttft-ms", type=float, help="target mean time to first token, ms")
    p.add_argument("--tpot-ms", type=float, help="target mean time per output token, ms")
    p.add_argument("--framework", help="serving framework preset (dse list frameworks): vllm, sglang, tensorrt-llm")
    p.add_argument("--precision", help="GEMM number format (dse list precisions), e.g. fp8")
    p.add_argument("--expert-precision", help="the routed experts' number format where it differs from --precision, "
                                              "e.g. nvfp4 (an NVFP4 expert checkpoint beside FP8 attention)")
    p.add_argument("--kv-precision", help="KV-cache number format, e.g. fp8")
    p.add_argument("--aggregated-only", action="store_true", help="skip disaggregated prefill/decode splits")
    p.add_argument("--eplb", action="store_true",
                   help="an expert-parallel load balancer (redundant experts) evens the MoE expert loads "
                        "(moe_imbalance 1; default: the preset's skewed serving routing)")
    p.add_argument("--out", help="directory for front.parquet, front.png and points.parquet")
    p.set_defaults(func=run)
