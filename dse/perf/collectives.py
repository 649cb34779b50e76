"""Collective communication times (alpha-beta), per algorithm and topology. The only place
these formulas live.

Notation: n ranks, `message_bytes` M = the full buffer each rank holds (all-reduce input,
all-gather output, reduce-scatter input, all-to-all send buffer), alpha = per-step latency,
beta = achievable bandwidth per GPU per direction (link bandwidth x link efficiency).

    ring all-reduce      2(n-1) alpha + 2 (n-1)/n M / beta
    tree all-reduce      2 log2(n) alpha + 2 M / beta          (NCCL double binary tree)
    reduce-scatter / all-gather   (n-1) alpha + (n-1)/n M / beta
    all-to-all           (n-1) alpha + (n-1)/n M / beta        (full-bisection fabric)
    hierarchical         reduce-scatter in the scale-up domain, all-reduce of M/g across
                         domains, all-gather in the domain
    torus (k1 x k2 [x k3])  bidirectional rings per dimension, the message shrinking by k_d
                         after each dimension's reduce-scatter (and growing back in the all-gather)

Placement rule (documented and applied by the performance models): ranks are numbered with
TP innermost (consecutive GPUs, inside the scale-up domain), then CP, then EP, then PP, and DP
outermost; the expert layers fold those ranks again (Megatron-Core parallel folding): expert-
tensor-parallel (etp) innermost, then EP, so EP ranks sit etp GPUs apart. A group whose
members are `stride` GPUs apart has min(n, domain // stride) members in one scale-up domain (`ranks_per_domain`); the rest of the group is reached over the
scale-out network, where every GPU has its own NIC (rail-optimised fat tree), or over the torus
links. The `Network` methods take that in-domain count `g` directly, so a caller can compose
layouts of several levels (a DP group made of EP ranks and outer DP ranks).

Topologies (`topology` column, see `TOPOLOGIES`): `fat-tree` (NVSwitch-class scale-up domain,
rail-optimised fat-tree scale-out; the default), `torus2d` and `torus3d` (scale-up domains joined
as the nodes of a 2D or 3D torus whose links share the GPU's scale-out bandwidth).
"""
from __future__ import annotations

from functools import cached_property

import numpy as np

from dse import catalog
from dse.columns import real
from dse.perf.forms.collective import bus_efficiency, custom_all_reduce_s
from dse.perf.forms.deepep import PARAMS as DEEPEP_PARAMS, deepep_time_s

K = catalog.constants()

TOPOLOGIES = ("fat-tree", "torus2d", "torus3d")


def ranks_per_domain(n, stride, domain):
    """How many of a group's n members (spaced `stride` GPUs apart) share one scale-up domain."""
    stride = max(stride, 1) if isinstance(stride, (int, float)) else np.maximum(stride, 1)
    return np.minimum(np.maximum(np.floor(domain / stride), 1.0), np.maximum(n, 1))


def _ring(n, alpha, beta, message_bytes, steps_factor, volume_factor):
    n = np.maximum(n, 1)
    steps = n - 1  # zero for a group of one: no time
    return steps * (steps_factor * alpha + volume_factor / n * message_bytes / beta)


def ring_all_reduce_s(n, message_bytes, alpha, beta):
    return _ring(n, alpha, beta, message_bytes, 2.0, 2.0)


def tree_all_reduce_s(n, message_bytes, alpha, beta):
    n = np.maximum(n, 1)
    return (n > 1) * (2.0 * np.ceil(np.log2(n)) * alpha + 2.0 * message_bytes / beta)


def all_reduce_flat_s(n, message_bytes, alpha, beta):
    """NCCL picks the faster of ring and tree for each message size."""
    return np.minimum(ring_all_reduce_s(n, message_bytes, alpha, beta),
                      tree_all_reduce_s(n, message_bytes, alpha, beta))


def reduce_scatter_flat_s(n, message_bytes, alpha, beta):
    return _ring(n, alpha, beta, message_bytes, 1.0, 1.0)


all_gather_flat_s = reduce_scatter_flat_s


def torus_collective_s(n, message_bytes, alpha, beta_per_gpu, dims, factor):
    """Collective over n ranks on a k^dims torus (k = n^(1/dims), dims 2 or 3 per row): per
    dimension a bidirectional ring over the 2 of the GPU's 2*dims links in that dimension, the
    message shrinking by k after each dimension. factor 2 = all-reduce, 1 = reduce-scatter or
    all-gather."""
    n = np.maximum(n, 1)
    dims = real(dims)
    k = n ** (1.0 / dims)
    beta_dim = beta_per_gpu / dims
    total = 0.0
    m = message_bytes
    for d in range(3):
        active = d < dims
        total = total + np.where(active, factor * ((k - 1) * alpha + (k - 1) / k * m / beta_dim), 0.0)
        m = np.where(active, m / k, m)
    return np.where(n > 1, total, 0.0)


class Placement:
    """Where each parallel group's ranks sit: ranks are numbered TP innermost, then CP, then the
    DP ranks (EP carved out of them, innermost), then PP outermost for training, Megatron-Core's
    default order 'tp-cp-ep-dp-pp' (parallel_state.RankGenerator; DeepSpeed's PipeDataParallel
    topology also puts the pipeline outermost): a stage is a contiguous block of tp x cp x dp GPUs,
    so the data-parallel groups pack into the scale-up domains and pipeline neighbours sit a stage
    apart. A serving replica keeps its tp x pp GPUs contiguous (TensorRT-LLM, vLLM), stages tp x
    ep apart (`pp_outermost` False). For every group, how many of its members share one scale-up
    domain (`*_in`) and the stride between pipeline neighbours. The only place strides are computed."""

    def __init__(self, domain, tp, cp, ep, pp, dp, hierarchical=True, etp=None, pp_outermost=False):
        self.domain, self.tp, self.cp, self.ep, self.pp, self.dp = domain, tp, cp, ep, pp, dp
        self.etp = tp if etp is None else etp
        self.hierarchical = hierarchical
        self.cp_stride = tp
        self.pp_stride = tp * cp * dp if pp_outermost else tp * cp * ep
        self.pp_outermost = pp_outermost

    @cached_property
    def tp_in(self):
        return ranks_per_domain(self.tp, 1, self.domain)

    @cached_property
    def ep_in(self):
        # Megatron-Core's parallel folding: the expert layers regroup a pipeline stage's tp x cp x dp
        # ranks as etp x ep x edp (RankGenerator order tp-ep-dp-pp), so EP ranks sit etp apart
        return ranks_per_domain(self.ep, self.etp, self.domain)

    # Dense DP group = the cp x dp ranks (CP at stride tp, then the DP ranks); the expert DP group
    # is the stage's ranks over etp x ep. A framework that runs DP collectives as flat rings over
    # all ranks sends each GPU's traffic through its own NIC.
    @cached_property
    def dense_dp_in(self):
        if self.pp_outermost:
            packed = ranks_per_domain(self.cp * self.dp, self.tp, self.domain)
        else:
            stride = self.tp * self.cp * self.ep * self.pp
            outer = ranks_per_domain(self.dp / self.ep, stride, self.domain)
            packed = ranks_per_domain(self.cp * self.ep, self.tp, self.domain) * np.where(stride < self.domain, outer, 1.0)
        return np.where(self.hierarchical, packed, 1.0)

    @cached_property
    def expert_dp_in(self):
        # the stage's tp x cp x dp / (etp x ep) expert-DP ranks sit ep x etp apart
        edp = self.tp * self.cp * self.dp / (self.etp * self.ep)
        if self.pp_outermost:
            packed = ranks_per_domain(edp, self.ep * self.etp, self.domain)
        else:
            stride = self.tp * self.cp * self.ep * self.pp
            block = ranks_per_domain(self.tp * self.cp / self.etp, self.ep * self.etp, self.domain)
            packed = block * ranks_per_domain(self.dp / self.ep, stride, self.domain)
        return np.where(self.hierarchical, packed, 1.0)


COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
FLEX = 2          # moe_dispatcher code of the deduplicating exchange at NCCL's fitted rate (HybridEP)
DEEPEP = 3        # moe_dispatcher code of DeepEP's normal kernels at their own fit (dse.schema ENUMS)
LOW_LATENCY = 4   # expert_exchange_s's code for DeepEP's low-latency kernels (beside the moe_dispatcher codes 0-3)
CONSECUTIVE = 1   # moe_routing code: a token's k experts are consecutive expert ids


def remote_domains(domains, top_k, groups=0.0, group_top_k=0.0):
    """Expected number of other scale-up domains holding one of a token's top_k experts, the
    experts spread evenly over `domains` domains. Uniform routing reaches (D - 1)(1 - (1 - 1/D)^k)
    of them (DeepSeek-V3 report Sec. 3.2.2). Node-limited routing picks group_top_k = k_g of the
    experts' `groups` = G groups first, then the k experts inside them (DeepSeek-V3: G 8, k_g 4, 'each
    token is sent to at most 4 nodes'). With G >= D groups (G/D per domain) the chosen groups sit in
    D (1 - C(G - G/D, k_g) / C(G, k_g)) domains; with G < D each group spans D/G domains and the k
    experts fall in S (1 - (1 - 1/S)^k) of the S = k_g D/G domains of the chosen groups. A share
    (D - 1)/D of the domains reached are other domains."""
    def hit(slots, draws):   # share of equally likely slots that uniform draws hit at least once
        return -np.expm1(draws * np.log1p(-1.0 / np.maximum(slots, 1.0 + 1e-9)))

    d = np.maximum(domains, 1.0)
    uniform = (d - 1.0) * hit(d, top_k)
    limited = (groups > 1) & (group_top_k > 0) & (group_top_k < groups)
    if not np.any(limited):
        return uniform
    g = np.maximum(groups, 1.0)
    per_domain = g / d
    missed = 1.0   # probability that none of the chosen groups is in a given domain
    for i in range(int(np.max(np.where(limited, group_top_k, 0.0)))):
        step = np.clip((g - per_domain - i) / np.maximum(g - i, 1.0), 0.0, 1.0)
        missed = missed * np.where(i < group_top_k, step, 1.0)
    spans = np.maximum(group_top_k * d / g, 1.0)
    reached = np.where(g >= d, d * (1.0 - missed), spans * hit(spans, top_k))
    reached = np.where(spans <= 1.0, 1.0, reached) if np.any(g < d) else reached
    return np.where(limited, np.minimum(uniform, reached * (d - 1.0) / d), uniform)


def ranks_reached(ranks, top_k, groups, group_top_k, experts_per_rank, routing):
    """Expected other ranks (of `ranks`, each holding `experts_per_rank` experts) that hold one of a
    token's top_k experts: remote_domains for random routing; for consecutive expert ids (NeMo
    AutoModel's FakeBalancedGate) the k experts span 1 + (k - 1)/E_l ranks of E_l experts, on
    average over where the run starts, a share (R - 1)/R of them other ranks."""
    random = remote_domains(ranks, top_k, groups, group_top_k)
    if not np.any(routing == CONSECUTIVE):
        return random
    spanned = np.minimum(1.0 + (top_k - 1.0) / np.maximum(experts_per_rank, 1.0), ranks)
    return np.where(routing == CONSECUTIVE, spanned * (ranks - 1.0) / np.maximum(ranks, 1.0), random)


def overlapped_s(comm, window, sm_fraction):
    """Exposed seconds of communication `comm` run under computation `window` (another micro-batch's:
    Megatron-Core's 1F1B all-to-all overlap, DualPipe, SGLang's two-batch overlap): what the window
    cannot hide, plus the window's slowdown while the communication kernels hold `sm_fraction` of
    the SMs. Never more than `comm` itself."""
    return np.maximum(comm - window, 0.0) + np.minimum(comm, window) * sm_fraction / (1.0 - sm_fraction)


class Network:
    """Per-row network parameters, built once per evaluation from the hardware columns.

    Each collective op has its fitted parameters (`dse calibrate` on NCCL kernels; model columns
    `<op>_efficiency`, `<op>_floor_s`, `<op>_half_bytes`, `<op>_local_copy_fraction`): the achieved
    bandwidth is the link bandwidth times the op's large-message fraction times the shape of NCCL's
    bus efficiency (dse.perf.forms.collective: small messages and small groups do not fill the
    links). Across scale-up domains the same shape applies on the scale-out network, its efficiency
    `scaleout_efficiency` and its half-saturation size and local-copy fraction scaled by the
    bandwidth ratio (a time carries over; the own chunk never crosses the NIC).
    Every call of a group of more than one rank pays the op's fixed floor (launch, synchronisation),
    plus `overhead_s` where given and not NaN (a serving engine's own per-collective overhead)."""

    def __init__(self, cols: dict, overhead_s=None, custom_all_reduce=None):
        self.overhead = overhead_s
        # a serving engine's custom all-reduce inside the scale-up domain (fitted; 0 efficiency: none)
        self.custom = None if custom_all_reduce is None or not np.any(custom_all_reduce) else (
            np.asarray(custom_all_reduce, dtype=bool) & (real(cols["custom_allreduce_oneshot_efficiency"]) > 0),
            {p: real(cols[f"custom_allreduce_{p}"]) for p in ("floor_s", "oneshot_efficiency", "twoshot_efficiency")})
        self.domain = real(cols["scaleup_domain"])
        self.up_alpha = real(cols["scaleup_latency_s"])
        self.up_link = real(cols["scaleup_bandwidth_bytes_per_s"])
        self.out_alpha = real(cols["scaleout_latency_s"])
        self.out_link = real(cols["scaleout_bandwidth_bytes_per_s"])
        self.out_eff = real(cols["scaleout_efficiency"])
        self.eff = {op: real(cols[f"{op}_efficiency"]) for op in COLLECTIVE_OPS}
        self.floor = {op: real(cols[f"{op}_floor_s"]) for op in COLLECTIVE_OPS}
        self.half = {op: real(cols[f"{op}_half_bytes"]) for op in COLLECTIVE_OPS}
        self.copy = {op: real(cols[f"{op}_local_copy_fraction"]) for op in COLLECTIVE_OPS}
        self.topology = np.asarray(cols.get("topology_code", np.zeros_like(self.domain)), dtype=np.int8)
        # DeepEP's normal kernels as fitted on this part (NaN where it has no DeepEP tables)
        self.deepep = {d: [real(cols.get(f"deepep_{d}_{p}", np.nan)) for p in DEEPEP_PARAMS] for d in ("dispatch", "combine")}
        self.torus_dims = (2 + (self.topology == 2)).astype(self.domain.dtype)

    def up(self, op, n, message_bytes):
        """Achieved scale-up bandwidth per GPU of collective `op` over n ranks on `message_bytes`."""
        shape = bus_efficiency(n, np.maximum(message_bytes, 1.0), 1.0, self.half[op], self.copy[op])
        return self.up_link * self.eff[op] * shape

    def out(self, op, n, message_bytes):
        """Achieved scale-out bandwidth per GPU of collective `op` over n ranks on `message_bytes`."""
        # Both fitted sizes scale by the bandwidth ratio: the per-chunk overhead is a time, and each
        # rank's own chunk is copied on the scale-up path (NVLink loopback or HBM) alongside the NIC
        # transfer, so in NIC-chunk units it costs local_copy_fraction x B_out / B_up.
        ratio = self.out_link / self.up_link
        shape = bus_efficiency(n, np.maximum(message_bytes, 1.0), 1.0, self.half[op] * ratio, self.copy[op] * ratio)
        return self.out_link * self.out_eff * shape

    # -- collectives over a group of n ranks, g of them inside one scale-up domain ---------
    def _fixed(self, op):
        """The op's fitted floor, plus a serving engine's own per-collective overhead where set."""
        if self.overhead is None:
            return self.floor[op]
        return self.floor[op] + np.where(np.isnan(self.overhead), 0.0, self.overhead)

    def _plus_overhead(self, op, n, t):
        fixed = self._fixed(op)
        if isinstance(fixed, float) and fixed == 0.0:
            return t
        return np.where(n > 1, t + fixed, t)

    def all_reduce_s(self, n, g, message_bytes):
        t = self._plus_overhead("all_reduce", n, self._all_reduce_s(n, g, message_bytes))
        if self.custom is None:
            return t
        # inside one domain a serving engine's own kernel where it beats NCCL's (AUTO strategy)
        use, p = self.custom
        engine = 0.0 if self.overhead is None else np.where(np.isnan(self.overhead), 0.0, self.overhead)
        with np.errstate(divide="ignore", invalid="ignore"):
            custom = custom_all_reduce_s(n, message_bytes, self.up_link, fallback_s=t - engine, **p) + engine
        return np.where(use & (g >= n) & (n > 1), custom, t)

    def _all_reduce_s(self, n, g, message_bytes):
        op, within, across = "all_reduce", g >= n, n / g
        inside = (all_reduce_flat_s(n, message_bytes, self.up_alpha, self.up(op, n, message_bytes))
                  if within.any() else 0.0)
        inner = reduce_scatter_flat_s(g, message_bytes, self.up_alpha, self.up(op, g, message_bytes))
        out_beta = self.out(op, across, message_bytes / g)
        hierarchical = (2 * inner + all_reduce_flat_s(across, message_bytes / g, self.out_alpha, out_beta)
                        if not within.all() else 0.0)
        switched = np.where(within, inside, hierarchical)
        if not self.topology.any():
            return switched
        torus = 2 * inner + torus_collective_s(across, message_bytes / g, self.out_alpha, out_beta, self.torus_dims, 2.0)
        return np.where((self.topology == 0) | (g >= n), switched, torus)

    def reduce_scatter_s(self, n, g, message_bytes):
        """Reduce-scatter: inside the domain, then across domains on M/g."""
        return self._plus_overhead("reduce_scatter", n, self._scatter_gather_s("reduce_scatter", n, g, message_bytes))

    def all_gather_s(self, n, g, message_bytes):
        """All-gather: the reduce-scatter's steps in reverse, with its own fitted parameters."""
        return self._plus_overhead("all_gather", n, self._scatter_gather_s("all_gather", n, g, message_bytes))

    def _scatter_gather_s(self, op, n, g, message_bytes):
        across = n / g
        inner = reduce_scatter_flat_s(g, message_bytes, self.up_alpha, self.up(op, g, message_bytes))
        out_beta = self.out(op, across, message_bytes / g)
        outer_ring = reduce_scatter_flat_s(across, message_bytes / g, self.out_alpha, out_beta)
        if self.topology.any():
            outer_torus = torus_collective_s(across, message_bytes / g, self.out_alpha, out_beta,
                                             self.torus_dims, 1.0)
            outer_ring = np.where(self.topology == 0, outer_ring, outer_torus)
        return inner + np.where(g >= n, 0.0, outer_ring)

    def all_to_all_s(self, n, g, message_bytes):
        """Each rank sends M/n to every other rank; traffic leaving the domain uses the NIC."""
        return self._plus_overhead("all_to_all", n, self._all_to_all_s(n, g, message_bytes))

    def _all_to_all_s(self, n, g, message_bytes):
        n = np.maximum(n, 1)
        intra = (g - 1) / n * message_bytes / self.up("all_to_all", n, message_bytes)
        inter = (n - g) / n * message_bytes / self.out("all_to_all", n, message_bytes)
        alpha = np.where(g >= n, self.up_alpha, self.out_alpha)
        return np.where(n > 1, (n - 1) * alpha + np.maximum(intra, inter), 0.0)

    def expert_exchange_s(self, n, g, token_bytes, top_k, dispatcher, groups=0.0, group_top_k=0.0,
                          row_bytes=1.0, experts=1.0, routing=0):
        """Dispatch plus combine of one MoE layer's tokens over n expert-parallel ranks (g of them
        in one scale-up domain); `token_bytes` = this rank's tokens x hidden x element bytes.
        dispatcher 0 (all-to-all): every routed copy is sent, an all-to-all of top_k x token_bytes
        each way. 1 (all-gather): every rank gathers the group's tokens and reduce-scatters the
        outputs back. LOW_LATENCY (flex in a decode-only pass: DeepEP's low-latency kernels): every
        routed copy, each way, low_latency_exchange_s. 2 (flex: DeepEP, HybridEP): a token crosses
        to each other scale-up domain holding one of its experts once, over the NIC, and is forwarded inside it; under uniform
        routing it reaches (D - 1)(1 - (1 - 1/D)^top_k) of the other D - 1 domains (DeepSeek-V3
        report Sec. 3.2.2: IB sends deduplicated per node, NVLink forwards), fewer under node-limited
        routing (`groups`, `group_top_k`: remote_domains), while every routed copy still crosses the
        scale-up links once. DEEPEP: DeepEP's normal kernels as fitted (dse.perf.forms.deepep), a token
        once to each rank of the domain holding one of its experts (`experts` over the n ranks,
        `routing`: ranks_reached), at the copy rate of `deepep_num_sms` SMs or the fitted link rate,
        dispatch and combine each at its own fit (`row_bytes`: one token's bytes, for the per-item
        bookkeeping); across domains as flex; as flex on a part without DeepEP tables."""
        n = np.maximum(n, 1)
        routed = token_bytes * top_k
        a2a = 2 * self.all_to_all_s(n, g, routed) if np.any(dispatcher == 0) else 0.0
        gather = (self.all_gather_s(n, g, n * token_bytes) + self.reduce_scatter_s(n, g, n * token_bytes)
                  if np.any(dispatcher == 1) else 0.0)
        flex = (2 * self._flex_dispatch_s(n, g, token_bytes, top_k, groups, group_top_k, experts, routing)
                if np.any((dispatcher == FLEX) | (dispatcher == DEEPEP)) else 0.0)
        deepep = (self._deepep_exchange_s(n, g, token_bytes, top_k, groups, group_top_k, row_bytes, experts, routing, flex)
                  if np.any(dispatcher == DEEPEP) else 0.0)
        low = 2 * self.low_latency_exchange_s(n, g, routed) if np.any(dispatcher == LOW_LATENCY) else 0.0
        return np.select([dispatcher == 1, dispatcher == FLEX, dispatcher == DEEPEP, dispatcher == LOW_LATENCY],
                         [gather, flex, deepep, low], a2a)

    def low_latency_exchange_s(self, n, g, routed_bytes):
        """One direction of DeepEP's low-latency exchange (decode): every routed copy goes straight to
        its expert's GPU, no deduplication, with all peers written at once from the kernel's warps, so
        the peers' latencies overlap (one step, not n - 1 as in a ring of sends) and the NIC runs at
        the scale-out efficiency whatever the group (inside the domain, NCCL's fitted NVLink rate).
        DeepEP's published H800 runs (128 tokens, hidden 7168, top-8, EP 8-256: 77-194 us dispatch,
        114-369 us combine, 39-40 GB/s per NIC from EP 64 on; deepseek-ai/DeepEP docs/legacy.md):
        EP 16-256 within 10%, one node's EP 8 within 25% (tests/test_collectives.py)."""
        intra = (g - 1) / n * routed_bytes / self.up("all_to_all", n, routed_bytes)
        inter = np.maximum(n - g, 0.0) / n * routed_bytes / (self.out_link * self.out_eff)
        alpha = np.where(g >= n, self.up_alpha, self.out_alpha)
        return self._plus_overhead("all_to_all", n, np.where(n > 1, alpha + np.maximum(intra, inter), 0.0))

    def _across_domains_s(self, n, g, token_bytes, top_k, groups, group_top_k, experts, routing):
        """One direction of a deduplicating exchange over the NIC: a token once to each other scale-up
        domain holding one of its experts (`experts` over the n ranks, g to a domain)."""
        remote = ranks_reached(n / g, top_k, groups, group_top_k, experts / n * g, routing)
        return token_bytes * remote / self.out("all_to_all", n, token_bytes * top_k)

    def _flex_dispatch_s(self, n, g, token_bytes, top_k, groups, group_top_k, experts=1.0, routing=0):
        routed = token_bytes * top_k
        intra = (n - 1) / n * routed / self.up("all_to_all", n, routed)
        inter = self._across_domains_s(n, g, token_bytes, top_k, groups, group_top_k, experts, routing)
        alpha = np.where(g >= n, self.up_alpha, self.out_alpha)
        return self._plus_overhead("all_to_all", n, np.where(n > 1, (n - 1) * alpha + np.maximum(intra, inter), 0.0))

    def _deepep_exchange_s(self, n, g, token_bytes, top_k, groups, group_top_k, row_bytes, experts, routing, flex):
        """Dispatch + combine by DeepEP's normal kernels inside the domain, each no shorter than the
        token's crossing to the other domains (flex's term); `flex` where the part has no fit."""
        inside = np.minimum(n, g)
        sent = token_bytes * ranks_reached(inside, top_k, groups, group_top_k, experts / n, routing)
        items = token_bytes / np.maximum(row_bytes, 1.0) * (inside - 1.0)
        inter = np.where(g < n, self._across_domains_s(n, g, token_bytes, top_k, groups, group_top_k, experts, routing)
                         + (n - 1) * self.out_alpha, 0.0)
        sms = K["deepep_num_sms"]
        kernel = sum(np.maximum(deepep_time_s(sent, items, sms, self.up_link, *self.deepep[d]), inter)
                     for d in ("dispatch", "combine"))
        return np.where(np.isfinite(kernel) & (n > 1), kernel, flex)

    def p2p_s(self, stride, message_bytes):
        """Point-to-point between neighbours `stride` GPUs apart (pipeline stages, CP ring steps):
        a copy like one all-gather step, so its fitted message-size shape without the group term."""
        op, inside = "all_gather", stride < self.domain
        alpha = np.where(inside, self.up_alpha, self.out_alpha)
        half = self.half[op] * np.where(inside, 1.0, self.out_link / self.up_link)
        link = np.where(inside, self.up_link * self.eff[op], self.out_link * self.out_eff)
        beta = link * bus_efficiency(2.0, np.maximum(message_bytes, 1.0), 1.0, half, 0.0)
        return alpha + message_bytes / beta + self._fixed(op)
