"""The legacy power-law routing of AIConfigurator's MoE collector (TensorRT-LLM before 1.3, A100's
1.0.0 collection), replayed: the measured GPU's load (routed pairs, experts touched) per shape, and
the MoE form's time at a known load (dse.calibrate.moe fits its layer parameters there; its module
docstring says what the generator did)."""
from __future__ import annotations

import numpy as np

from dse.perf.forms import moe as form

LEGACY_DRAWS = 16       # draws of that generator averaged per shape (the collector timed 5)


def legacy_power_law_loads(num_tokens, num_experts: int, topk: int, ep_size: int, alpha: float,
                           draws: int = LEGACY_DRAWS) -> tuple[np.ndarray, np.ndarray]:
    """(routed pairs, distinct experts) on the measured GPU under the legacy generator (module
    docstring), shape (token counts, draws); seeded by the layer shape. Ties sort in expert order."""
    E, k, ep = int(num_experts), int(topk), int(ep_size)
    tokens = np.asarray(num_tokens, np.int64)
    T = np.repeat(tokens, draws)  # one row per (token count, draw)
    local = max(E // ep, 1)
    rng = np.random.default_rng([E, k, ep, round(alpha * 1000)])
    big = T * k > E
    lo, hi = np.where(big, 1.0, 0.01)[:, None], np.where(big, 0.8 * T, 2.0)[:, None]
    a = 1.0 - alpha  # inverse CDF of the power law between lo and hi
    shares = ((hi ** a - lo ** a) * rng.random((len(T), E)) + lo ** a) ** (1.0 / a)
    counts = np.round(shares / shares.sum(1, keepdims=True) * (T * k)[:, None]).astype(np.int64)
    order = np.argsort(-counts, axis=1, kind="stable")
    rank = np.empty_like(order)  # each expert's place in that order
    np.put_along_axis(rank, order, np.broadcast_to(np.arange(E), order.shape), axis=1)
    delta = T * k - counts.sum(1)
    more = np.maximum(delta, 0)  # missing selections: one each to the first experts in order, cycling
    counts += (more // E)[:, None] + (rank < (more % E)[:, None])
    # too many: walking up from the last in order, one less from each expert that has any, and
    # one less from the largest (first in expert order) for each that has none
    less, empty = np.maximum(-delta, 0), (counts == 0).sum(1)
    from_top = np.minimum(less, empty)
    counts -= (rank >= E - less[:, None]) & (counts > 0) & (rank < E - empty[:, None])
    for step in range(int(from_top.max(initial=0))):
        rows = np.flatnonzero(from_top > step)
        counts[rows, np.argmax(counts[rows], axis=1)] -= 1
    by_rank = counts.reshape(len(T), ep, local)
    busiest = np.argmax(by_rank.sum(2), axis=1)
    mine = by_rank[np.arange(len(T)), busiest]  # the busiest rank's experts, moved onto the measured GPU
    routed, touched = mine.sum(1).astype(float), (mine > 0).sum(1).astype(float)
    for d in np.flatnonzero(counts.max(1) > T):  # an expert drawn more often than there are tokens
        c = by_rank[d].copy()
        c[[0, busiest[d]]] = c[[busiest[d], 0]]
        routed[d], touched[d] = _surplus_load(c.ravel(), int(T[d]), k, local)
    return routed.reshape(len(tokens), draws), touched.reshape(len(tokens), draws)


def _surplus_load(counts: np.ndarray, T: int, k: int, local: int) -> tuple[float, float]:
    """(pairs, distinct experts) on experts 0..local-1 when an expert has more draws than tokens:
    draws in descending count order are dealt column-wise (token t gets draws t, T+t, ...), so an
    expert covers a cyclic run of tokens (all if it has T or more); a token short of k distinct
    experts takes, by top-k ties, the lowest-numbered it lacks. Counted per stretch between runs."""
    ranked = np.argsort(-counts, kind="stable")
    held, full = counts[ranked], counts >= T
    first = (np.cumsum(held) - held) % T
    part = (held > 0) & (held < T)
    lo, hi, who = first[part], first[part] + held[part], ranked[part]
    wrap = hi > T  # a run past the last token continues at the first
    lo, hi, who = (np.concatenate([lo, np.zeros(wrap.sum(), np.int64)]),
                   np.concatenate([np.minimum(hi, T), hi[wrap] - T]), np.concatenate([who, who[wrap]]))
    edges = np.unique(np.concatenate([[0, T], lo, hi]))
    width, start, stop = np.diff(edges), np.searchsorted(edges, lo), np.searchsorted(edges, hi)
    mine = who < local
    distinct = np.cumsum(np.bincount(start, minlength=len(edges)) - np.bincount(stop, minlength=len(edges)))[:-1]
    distinct0 = np.cumsum(np.bincount(start[mine], minlength=len(edges))
                          - np.bincount(stop[mine], minlength=len(edges)))[:-1]
    distinct, distinct0 = distinct + full.sum(), distinct0 + full[:local].sum()
    fills = np.minimum(k - distinct, local - distinct0)  # top-k ties: the lowest numbers, 0..local-1 first
    pairs = float((width * (distinct0 + fills)).sum())
    if (counts[:local] > 0).all():
        return pairs, float(local)
    # which idle experts of 0..local-1 the ties reach: per stretch, the lowest-numbered it lacks
    runs = np.zeros((len(edges), local), np.int64)
    np.add.at(runs, (start[mine], who[mine]), 1)
    np.add.at(runs, (stop[mine], who[mine]), -1)
    has = (np.cumsum(runs, axis=0)[:-1] > 0) | full[None, :local]
    lacks = ~has
    got = has | (lacks & (np.cumsum(lacks, axis=1) <= (k - distinct)[:, None]))
    return pairs, float(got[width > 0].any(0).sum())


def time_at_load(shapes: dict, hw: dict, layer: dict, routed, touched) -> np.ndarray:
    """`moe_time_s` at a known load: `routed` pairs on `touched` experts, one column per routing
    draw, averaged over the draws (the form's terms; a test holds them equal at its own load)."""
    s = {k: np.asarray(v, float)[:, None] for k, v in shapes.items()}
    local = np.maximum(s["num_experts"] / s["ep_size"], 1.0)
    inter_local, mats = s["inter_size"] / s["tp_size"], s["gated"] + 1.0
    bw = hw["memory_bandwidth_bytes_per_s"] * layer["memory_efficiency"]
    tokens, h = s["num_tokens"], s["hidden_size"]
    activations = (form.TOKEN_IO_BYTES * tokens + layer["routed_bytes_per_element"] * routed) * h / bw
    weights = touched * mats * h * inter_local * hw["weight_bytes"] / bw
    x = routed / touched
    compute = 2.0 * routed * h * mats * inter_local / (
        hw["peak_flops_per_s"] * layer["efficiency_max"] * x / (x + form.HALF_TOKENS))
    fixed = (layer["floor_s"] + layer["routing_step_s"] * s["topk"]
             + layer["routing_s_per_selection"] * tokens * s["topk"]
             + layer["expert_overhead_s"] * touched + layer["local_expert_overhead_s"] * local)
    return (fixed + activations + np.maximum(weights, compute)).mean(axis=1)
