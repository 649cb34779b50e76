"""Time of one collective (NCCL-class ring kernels, TensorRT-LLM's custom all-reduce).

Notation: n ranks, M = `message_bytes`, the full buffer each rank holds (all-reduce input,
all-gather output, reduce-scatter input, all-to-all send buffer: the nccl-tests `size`),
B = `bandwidth_bytes_per_s`, the catalog link bandwidth per GPU per direction.

    time = floor_s + steps(n) * step_latency_s + volume(n) * M / (B * efficiency(n, M))

    steps(n)   2(n-1) for all-reduce (ring reduce-scatter + all-gather), n-1 otherwise
    volume(n)  2(n-1)/n for all-reduce, (n-1)/n otherwise          (algorithm physics, not fitted)
    efficiency(n, M) = efficiency_max * (n-1)/(n-1+local_copy_fraction) / (1 + sqrt(half_bytes/M))

Why this efficiency:
  * message size: a collective is a pipeline of chunks over n-1 steps. With a per-chunk overhead
    the best chunk size grows as sqrt(M), which leaves an excess time growing as sqrt(M) (the
    classic optimal-pipelining result): efficiency_max / (1 + sqrt(half_bytes/M)). The common
    M/(M+half) curve would only add a constant to the time - the same as the floor - and cannot
    follow the measured slow approach to full bandwidth between 1 MB and 512 MB.
  * group size: the measured busbw of 2-rank groups is 15-30% below 8-rank ones at every size.
    The time behaves as if each rank also moved a fraction `local_copy_fraction` of its own
    chunk (M/n) through the same copy engine (SM-driven copies of the local chunk): bytes moved
    (n-1+c)/n M instead of (n-1)/n M, written as the factor (n-1)/(n-1+c) on the efficiency so
    the volume factors stay the algorithm's. c = 0: pure ring; c = 1: own chunk costs a full
    chunk (NCCL's all-to-all on Blackwell sends to itself), time independent of n.

How each parameter carries over (to another network, or an accelerator derived from technology):
  floor_s            kernel launch + NCCL proxy/sync of one call on the scale-up fabric (seconds).
                     Scale-up specific; over InfiniBand/Ethernet it is a lower bound (the kernel
                     side), the network adds its own latency per step.
  step_latency_s     per ring step (a hop through NVSwitch plus a flag handshake). Scale-up
                     specific; over a scale-out network use the catalog `scaleout_latency_s`.
  efficiency_max     fraction of the catalog link bandwidth a large message reaches: carries over
                     to another NVLink-class fabric unchanged; for IB/Ethernet the catalog
                     `scaleout_efficiency` plays this role.
  half_bytes         message size at which the pipeline runs at half efficiency. It is the
                     per-chunk overhead times the bandwidth, so the TIME half_bytes/(B*efficiency_max)
                     carries over: on a link of bandwidth B' use half_bytes * B'/B.
  local_copy_fraction  property of the collective implementation (copy engine), not the link:
                     carries over unchanged to another scale-up fabric. Across a scale-out network
                     the own chunk still moves on the scale-up path, beside the NIC transfer: in
                     units of the slower link it shrinks by B_out/B_up (dse.perf.collectives).
  The curve shape (exponent 1/2, local_copy_fraction) is what carries across networks; floor and
  step latency are the scale-up fabric's.

All-reduce and NVLS: on NVSwitch, NCCL's NVLS algorithm reduces inside the switch and each rank
moves M instead of the ring's 2(n-1)/n M, so its busbw (ring-normalised) can exceed the link
bandwidth. The Hopper bf16 8-GPU runs show it (0.96-0.99 of the link at 256 MiB, against 0.72
for ring kernels and for int8, which NVLS does not reduce); one curve per op cannot follow a jump
at n = 8 only, so the fitted all_reduce efficiency_max reaches ~1.0 there and an 8-GPU bf16 all-
reduce of >= 64 MiB is predicted ~13% slow. Blackwell gains less from NVLS (0.73 vs 0.69).

TensorRT-LLM custom all-reduce (`custom_all_reduce_s`, decode's all-reduce): the fastest of
  one-shot   floor_s + (n-1) M / (B * oneshot_efficiency)    (every rank reads all peers' buffers)
  two-shot   2 floor_s + 2(n-1)/n M / (B * twoshot_efficiency)  (reduce-scatter then all-gather)
  NCCL       the NCCL all-reduce above (TensorRT-LLM's AUTO strategy falls back to it for large M)
Its floor (2.5-5 us) is what a decode step pays per all-reduce; it carries over in seconds.
"""
from __future__ import annotations

import numpy as np

OPS = ("all_reduce", "all_gather", "reduce_scatter", "alltoall")
PARAMS = ("floor_s", "step_latency_s", "efficiency_max", "half_bytes", "local_copy_fraction")
CUSTOM_PARAMS = ("floor_s", "oneshot_efficiency", "twoshot_efficiency")
CUSTOM_PREFIX = "custom_allreduce_"
SATURATION_EXPONENT = 0.5  # optimal pipelining: excess time grows as sqrt(M); fixed, not fitted


def _check(op):
    if op not in OPS:
        raise ValueError(f"collective: unknown op '{op}'; use one of {', '.join(OPS)}")


def volume_factor(op, n):
    """Bytes each rank sends per byte of its buffer, for the ring algorithm (zero for n <= 1)."""
    _check(op)
    n = np.maximum(np.asarray(n, dtype=float), 1.0)
    return (2.0 if op == "all_reduce" else 1.0) * (n - 1.0) / n


def step_count(op, n):
    """Sequential latency steps of the ring algorithm."""
    _check(op)
    n = np.maximum(np.asarray(n, dtype=float), 1.0)
    return (2.0 if op == "all_reduce" else 1.0) * (n - 1.0)


def bus_efficiency(n, message_bytes, efficiency_max, half_bytes, local_copy_fraction):
    """Achieved fraction of link bandwidth relative to the ring volume (busbw / B). Zero for an
    empty message (it moves nothing)."""
    # a group of one moves nothing; avoid 0/0 (a Python float for a scalar n: an np.float64 would
    # promote the caller's float32 arrays)
    n = max(float(n), 2.0) if np.ndim(n) == 0 else np.maximum(n, 2.0)
    m = np.asarray(message_bytes)
    live = np.asarray(m > 0)
    every = live.all()
    size = 1.0 / (1.0 + np.sqrt(half_bytes / (m if every else np.where(live, m, 1.0))))  # SATURATION_EXPONENT = 1/2
    if not every:
        size = np.where(live, size, 0.0)
    return efficiency_max * (n - 1.0) / (n - 1.0 + local_copy_fraction) * size


def collective_s(op, n, message_bytes, bandwidth_bytes_per_s, floor_s, step_latency_s,
                 efficiency_max, half_bytes, local_copy_fraction):
    """Seconds of one collective `op` over n ranks of buffer `message_bytes` each (see module
    docstring). Zero for a group of one or an empty message (no call is made)."""
    n = np.asarray(n, dtype=float)
    m = np.asarray(message_bytes, dtype=float)
    active = (n > 1) & (m > 0)
    eff = bus_efficiency(n, m, efficiency_max, half_bytes, local_copy_fraction)
    transfer = volume_factor(op, n) * m / (bandwidth_bytes_per_s * np.where(active, eff, 1.0))
    return np.where(active, floor_s + step_count(op, n) * step_latency_s + transfer, 0.0)


def collective_params(params: dict, op: str) -> dict:
    """The keyword arguments of `collective_s` for `op` from a fit's flat parameter dict
    (names `<op>_floor_s`, `<op>_efficiency_max`, ...)."""
    _check(op)
    return {p: params[f"{op}_{p}"] for p in PARAMS}


def custom_all_reduce_s(n, message_bytes, bandwidth_bytes_per_s, floor_s, oneshot_efficiency,
                        twoshot_efficiency, fallback_s):
    """Seconds of TensorRT-LLM's all-reduce (AUTO strategy): the fastest of one-shot, two-shot
    and `fallback_s`, the NCCL all-reduce time for the same n and M (`collective_s`). Zero for a
    group of one or an empty message."""
    n = np.asarray(n, dtype=float)
    m = np.asarray(message_bytes, dtype=float)
    active = (n > 1) & (m > 0)
    nn = np.maximum(n, 1.0)
    oneshot = floor_s + (nn - 1.0) * m / (bandwidth_bytes_per_s * oneshot_efficiency)
    twoshot = 2.0 * floor_s + 2.0 * (nn - 1.0) / nn * m / (bandwidth_bytes_per_s * twoshot_efficiency)
    return np.where(active, np.minimum(np.minimum(oneshot, twoshot), fallback_s), 0.0)


def custom_params(params: dict) -> dict:
    """The keyword arguments of `custom_all_reduce_s` (except n, M, B, fallback_s) from a fit's
    flat parameter dict (names `custom_allreduce_<param>`)."""
    return {p: params[CUSTOM_PREFIX + p] for p in CUSTOM_PARAMS}
