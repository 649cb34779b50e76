"""Time of DeepEP's expert-parallel dispatch and combine inside one NVLink domain.

DeepEP moves each token's hidden vector to the GPUs holding its top-k experts (dispatch) and
brings the expert outputs back (combine). Two kernel families:

  normal (high throughput, prefill): a token goes once to each *rank* holding any of its
      experts (deduplicated); dispatch sends FP8 with one fp32 scale per 128 elements, combine
      sends bf16. The kernel runs on `sms` streaming multiprocessors (channels of 2 SMs), so
      its copy rate is limited by both the SMs given and the NVLink bandwidth.
  low latency (decode): a token goes once per selected *expert* (no deduplication); dispatch
      sends FP8 plus scales and 16 bytes of metadata per selection, combine sends bf16.

Bytes each GPU sends to the other ranks of its EP group (n = ep ranks, E experts, k = topk,
T = tokens per rank, h = hidden size):
  normal       T * ranks_hit * (n-1)/n * h * element_bytes, ranks_hit = n * (1 - P(a rank holds
               none of the token's k experts)), P = C(E - E/n, k)/C(E, k) for uniform routing;
  low latency  T * k * (n-1)/n * bytes_per_selection.
(The share 1/n a GPU routes to itself is a local copy, not NVLink traffic.)

    time = floor_s + bytes / (efficiency * scale-up bandwidth) [+ bytes / (sms * sm_bytes_per_s)]

the last term for normal mode only: a byte is copied by the SMs and crosses NVLink, so the two
rates add in series (few SMs: SM-bound; many: link-bound).

How each parameter carries over to an accelerator derived from technology (no kernel data):
  floor_s        fixed cost per call (launch, rank handshake/notify, barrier): seconds carry over.
  efficiency     fraction of the catalog scale-up (NVLink) bandwidth per GPU per direction the
                 kernel sustains: carries over unchanged.
  sm_bytes_per_s copy throughput of one SM in the normal kernels: scales with the SM's
                 load/store bandwidth (clock x width); carry over within a generation.
"""
from __future__ import annotations

import numpy as np

FP8_ELEMENT_BYTES = 1.0 + 4.0 / 128      # e4m3 + one fp32 scale per 128 elements
BF16_ELEMENT_BYTES = 2.0
LL_SELECTION_META_BYTES = 16.0           # per selection: source index and routing metadata


def ranks_hit(topk, num_experts, num_ranks):
    """Expected distinct ranks holding at least one of a token's top-k (distinct, uniform) experts."""
    topk, num_experts, num_ranks = np.broadcast_arrays(*(np.asarray(v, float) for v in (topk, num_experts, num_ranks)))
    miss = np.ones(topk.shape)
    others = num_experts - num_experts / num_ranks
    for i in range(int(np.max(topk, initial=0))):
        step = np.clip((others - i) / np.maximum(num_experts - i, 1.0), 0.0, 1.0)
        miss = np.where(i < topk, miss * step, miss)
    return num_ranks * (1.0 - miss)


def normal_bytes(num_tokens, hidden_size, topk, num_experts, num_ranks, element_bytes):
    """Bytes one GPU sends to the other ranks in a normal-mode dispatch (or receives in combine)."""
    remote = (num_ranks - 1.0) / num_ranks
    return num_tokens * ranks_hit(topk, num_experts, num_ranks) * remote * hidden_size * element_bytes


def low_latency_bytes(num_tokens, hidden_size, topk, num_ranks, direction):
    """Bytes one GPU sends to the other ranks in a low-latency dispatch or combine."""
    per_selection = np.where(np.asarray(direction) == "dispatch",
                             hidden_size * FP8_ELEMENT_BYTES + LL_SELECTION_META_BYTES,
                             hidden_size * BF16_ELEMENT_BYTES)
    return num_tokens * topk * (num_ranks - 1.0) / num_ranks * per_selection


def deepep_time_s(bytes_sent, copies_sent, scaleup_bandwidth_bytes_per_s, floor_s, efficiency,
                  sms=np.inf, sm_bytes_per_s=np.inf, copy_overhead_bytes=0.0):
    """Seconds of one dispatch or combine moving `bytes_sent` per GPU in `copies_sent` token copies."""
    moved = bytes_sent + copies_sent * copy_overhead_bytes
    link = moved / (efficiency * scaleup_bandwidth_bytes_per_s)
    copy = moved / (np.asarray(sms, float) * sm_bytes_per_s)
    return floor_s + np.maximum(link, copy)
