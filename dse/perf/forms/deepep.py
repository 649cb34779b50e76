"""Time of DeepEP's expert-parallel dispatch and combine inside one NVLink domain.

DeepEP moves each token's hidden vector to the GPUs holding its top-k experts (dispatch) and
brings the expert outputs back (combine). Two kernel families:

  normal (high throughput, prefill): a token goes once to each *rank* holding any of its
      experts (deduplicated); dispatch sends FP8 with one fp32 scale per 128 elements, combine
      sends bf16. It runs on the `sms` SMs it is given: one warp group per destination rank
      walks every token of its channel and copies those bound for that rank.
  low latency (decode): a token goes once per selected *expert* (no deduplication); dispatch
      sends FP8 plus scales and 16 bytes of metadata per selection, combine sends bf16. It runs
      one warp group per expert, on E SMs while E is below the SM count.

Per GPU, with n ranks in the EP group, E experts, k = topk, T tokens per rank, h hidden size:
  normal       bytes = T * ranks_hit * (n-1)/n * h * element_bytes, where ranks_hit =
               n * (1 - C(E - E/n, k)/C(E, k)) for uniform routing; items = T * (n-1) (token,
               destination-rank pairs the sender walks);
  low latency  bytes = T * k * (n-1)/n * bytes_per_selection; items = T * k * (n-1)/n.
(The share 1/n a GPU routes to itself is a local copy, not NVLink traffic.)

    moved = bytes + items * item_overhead_bytes
    time  = floor_s + max(moved / (efficiency * scale-up bandwidth), moved / (sms * sm_bytes_per_s))

How each parameter carries over to an accelerator derived from technology (no kernel data):
  floor_s             fixed cost per call (launch, rank handshake, barrier): seconds carry over.
  efficiency          fraction of the catalog scale-up (NVLink) bandwidth per GPU per direction
                      the kernel sustains when link-bound: carries over unchanged.
  sm_bytes_per_s      copy rate of one SM: scales with the SM's load/store bandwidth (clock x
                      width); carries over within a generation.
  item_overhead_bytes per-item bookkeeping (checks, indices, scales, flags) in byte-equivalents
                      of SM copy time: carries over unchanged.
"""
from __future__ import annotations

import numpy as np

FP8_ELEMENT_BYTES = 1.0 + 4.0 / 128      # e4m3 + one fp32 scale per 128 elements
BF16_ELEMENT_BYTES = 2.0
LL_SELECTION_META_BYTES = 16.0           # per low-latency selection: source index and routing info
MODES = ("normal", "low_latency")
DIRECTIONS = ("dispatch", "combine")
PARAMS = ("floor_s", "efficiency", "sm_bytes_per_s", "item_overhead_bytes")


def ranks_hit(topk, num_experts, num_ranks):
    """Expected distinct ranks holding at least one of a token's k distinct experts (uniform routing)."""
    topk, num_experts, num_ranks = np.broadcast_arrays(*(np.asarray(v, float) for v in (topk, num_experts, num_ranks)))
    miss = np.ones(topk.shape)
    others = num_experts - num_experts / num_ranks
    for i in range(int(np.max(topk, initial=0))):
        step = np.clip((others - i) / np.maximum(num_experts - i, 1.0), 0.0, 1.0)
        miss = np.where(i < topk, miss * step, miss)
    return num_ranks * (1.0 - miss)


def normal_traffic(num_tokens, hidden_size, topk, num_experts, num_ranks, element_bytes):
    """(bytes, items) one GPU sends to the other ranks in a normal-mode dispatch (or gets in combine)."""
    remote = (num_ranks - 1.0) / num_ranks
    sent = num_tokens * ranks_hit(topk, num_experts, num_ranks) * remote * hidden_size * element_bytes
    return sent, num_tokens * (num_ranks - 1.0)


def low_latency_traffic(num_tokens, hidden_size, topk, num_ranks, direction):
    """(bytes, items) one GPU sends to the other ranks in a low-latency dispatch or combine."""
    per_selection = np.where(np.asarray(direction) == "dispatch",
                             hidden_size * FP8_ELEMENT_BYTES + LL_SELECTION_META_BYTES,
                             hidden_size * BF16_ELEMENT_BYTES)
    items = num_tokens * topk * (num_ranks - 1.0) / num_ranks
    return items * per_selection, items


def deepep_time_s(bytes_sent, items, sms, scaleup_bandwidth_bytes_per_s, floor_s, efficiency,
                  sm_bytes_per_s, item_overhead_bytes):
    """Seconds of one dispatch or combine (see the module docstring). `sms`: the SMs a normal
    kernel is given (DeepSeek runs 20-24), or the expert count for low-latency kernels."""
    moved = bytes_sent + items * item_overhead_bytes
    link = moved / (efficiency * scaleup_bandwidth_bytes_per_s)
    copy = moved / (np.asarray(sms, float) * sm_bytes_per_s)
    return floor_s + np.maximum(link, copy)


def traffic(mode, direction, num_tokens, hidden_size, topk, num_experts, num_ranks):
    """(bytes, items, sms-equivalent lanes) of one dispatch or combine; the lanes of a normal
    kernel are the SMs it is given (passed to deepep_time_for), of a low-latency one its experts."""
    if mode == "normal":
        element = FP8_ELEMENT_BYTES if direction == "dispatch" else BF16_ELEMENT_BYTES
        sent, items = normal_traffic(num_tokens, hidden_size, topk, num_experts, num_ranks, element)
        return sent, items, None
    sent, items = low_latency_traffic(num_tokens, hidden_size, topk, num_ranks, direction)
    return sent, items, np.asarray(num_experts, float)


def deepep_time_for(mode, direction, num_tokens, hidden_size, topk, num_experts, num_ranks,
                    scaleup_bandwidth_bytes_per_s, params: dict, sms=24):
    """Seconds of one `mode` ("normal" or "low_latency") `direction` ("dispatch" or "combine")
    with a catalog row's fitted parameters, `params` keyed `<mode>_<direction>_<PARAMS>`; `sms`
    is the SM budget of normal kernels (ignored in low-latency mode)."""
    sent, items, lanes = traffic(mode, direction, num_tokens, hidden_size, topk, num_experts, num_ranks)
    p = [params[f"{mode}_{direction}_{n}"] for n in PARAMS]
    return deepep_time_s(sent, items, sms if lanes is None else lanes, scaleup_bandwidth_bytes_per_s, *p)
