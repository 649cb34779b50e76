"""dse.perf.collectives: alpha-beta collective times against the published formulas (REFERENCES.md),
rank placement against hand-worked layouts, and monotonicity properties."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dse.perf import collectives as C
from dse.perf.collectives import Network, Placement

PROPERTY = settings(max_examples=25, deadline=None, derandomize=True)

ALPHA_UP, BETA_UP = 2e-6, 400e9        # scale-up link: latency (s), bandwidth (bytes/s)
ALPHA_OUT, BETA_OUT = 8e-6, 50e9       # scale-out NIC
M = 256e6                              # a large buffer (bytes): ring beats tree


def ring_ar(n, m, a, b):
    """Ring all-reduce, REFERENCES.md: 2(n-1)a + 2(n-1)/n m/b."""
    return 2 * (n - 1) * a + 2 * (n - 1) / n * m / b


def ring_rs(n, m, a, b):
    """Reduce-scatter or all-gather, REFERENCES.md: (n-1)a + (n-1)/n m/b."""
    return (n - 1) * a + (n - 1) / n * m / b


def tree_ar(n, m, a, b):
    """NCCL double binary tree: 2 ceil(log2 n) a + 2 m/b."""
    return 2 * np.ceil(np.log2(n)) * a + 2 * m / b


def fitted(rows, eff=1.0, floor=0.0, half_bytes=0.0, copy=0.0) -> dict:
    """Per-op fitted collective columns, the same for every op."""
    out = {}
    for op in C.COLLECTIVE_OPS:
        out.update({f"{op}_efficiency": np.full(rows, eff), f"{op}_floor_s": np.full(rows, floor),
                    f"{op}_half_bytes": np.full(rows, half_bytes), f"{op}_local_copy_fraction": np.full(rows, copy)})
    return out


def net(domain=8.0, topology=0, overhead=0.0, up_eff=1.0, out_eff=1.0, up_alpha=ALPHA_UP, up_beta=BETA_UP,
        out_alpha=ALPHA_OUT, out_beta=BETA_OUT, half_bytes=0.0, copy=0.0):
    """A network whose fitted bus-efficiency shape is off (half_bytes 0, no local copy): the
    alpha-beta formulas exactly, unless a test turns the shape on."""
    cols = {**fitted(1, eff=up_eff, half_bytes=half_bytes, copy=copy),
            "scaleup_domain": np.array([domain]), "scaleup_latency_s": np.array([up_alpha]),
            "scaleup_bandwidth_bytes_per_s": np.array([up_beta]),
            "scaleout_latency_s": np.array([out_alpha]),
            "scaleout_bandwidth_bytes_per_s": np.array([out_beta]),
            "scaleout_efficiency": np.array([out_eff]), "topology_code": np.array([topology])}
    return Network(cols, overhead) if overhead else Network(cols)


def f(x):
    return np.asarray(x, dtype=float)


# ---- flat algorithms ---------------------------------------------------------------------------
@pytest.mark.parametrize("n", [2, 3, 4, 8, 16, 72, 1024])
@pytest.mark.parametrize("m", [1e3, 1e6, 1e9])
def test_flat_ring_formulas(n, m):
    assert C.ring_all_reduce_s(f(n), m, ALPHA_UP, BETA_UP) == pytest.approx(ring_ar(n, m, ALPHA_UP, BETA_UP), rel=1e-12)
    assert C.reduce_scatter_flat_s(f(n), m, ALPHA_UP, BETA_UP) == pytest.approx(ring_rs(n, m, ALPHA_UP, BETA_UP), rel=1e-12)
    assert C.all_gather_flat_s(f(n), m, ALPHA_UP, BETA_UP) == pytest.approx(ring_rs(n, m, ALPHA_UP, BETA_UP), rel=1e-12)
    assert C.tree_all_reduce_s(f(n), m, ALPHA_UP, BETA_UP) == pytest.approx(tree_ar(n, m, ALPHA_UP, BETA_UP), rel=1e-12)
    # NCCL picks the faster algorithm for each size
    assert C.all_reduce_flat_s(f(n), m, ALPHA_UP, BETA_UP) == pytest.approx(
        min(ring_ar(n, m, ALPHA_UP, BETA_UP), tree_ar(n, m, ALPHA_UP, BETA_UP)), rel=1e-12)


def test_nccl_picks_tree_for_small_and_ring_for_large_messages():
    # ring - tree = 2(n-1-ceil(log2 n)) alpha - 2 M/(n beta): the tree wins below M = n beta (n-1-log2 n) alpha
    n = 16
    crossover = n * BETA_UP * (n - 1 - np.log2(n)) * ALPHA_UP
    small, large = crossover / 10, crossover * 10
    assert C.all_reduce_flat_s(f(n), small, ALPHA_UP, BETA_UP) == pytest.approx(tree_ar(n, small, ALPHA_UP, BETA_UP))
    assert C.all_reduce_flat_s(f(n), large, ALPHA_UP, BETA_UP) == pytest.approx(ring_ar(n, large, ALPHA_UP, BETA_UP))
    assert ring_ar(n, small, ALPHA_UP, BETA_UP) > tree_ar(n, small, ALPHA_UP, BETA_UP)
    assert ring_ar(n, large, ALPHA_UP, BETA_UP) < tree_ar(n, large, ALPHA_UP, BETA_UP)


def test_group_of_one_costs_nothing():
    one = f([1.0])
    for fn in (C.ring_all_reduce_s, C.tree_all_reduce_s, C.all_reduce_flat_s, C.reduce_scatter_flat_s,
               C.all_gather_flat_s):
        assert fn(one, M, ALPHA_UP, BETA_UP)[0] == 0.0, fn.__name__
    for dims in (2.0, 3.0):
        assert C.torus_collective_s(one, M, ALPHA_OUT, BETA_OUT, np.array([dims]), 2.0)[0] == 0.0
    nw = net(overhead=5e-6)
    for method in (nw.all_reduce_s, nw.reduce_scatter_s, nw.all_gather_s, nw.all_to_all_s):
        assert method(one, one, M)[0] == 0.0, method.__name__  # no overhead either


def test_vectorised_rows_are_independent():
    n = f([1, 2, 8, 64])
    out = C.ring_all_reduce_s(n, M, ALPHA_UP, BETA_UP)
    for i, ni in enumerate(n):
        assert out[i] == pytest.approx(C.ring_all_reduce_s(f([ni]), M, ALPHA_UP, BETA_UP)[0], rel=1e-15)


# ---- the Network: scale-up, hierarchical, all-to-all -----------------------------------------------
def test_all_reduce_inside_one_domain_uses_the_scaleup_link_only():
    nw = net(domain=8)
    for n in (2, 4, 8):
        t = nw.all_reduce_s(f([n]), f([n]), M)[0]
        assert t == pytest.approx(min(ring_ar(n, M, ALPHA_UP, BETA_UP), tree_ar(n, M, ALPHA_UP, BETA_UP)), rel=1e-12)
    # the scale-out link plays no part
    slow_nic = net(domain=8, out_beta=1e6, out_alpha=1.0)
    assert slow_nic.all_reduce_s(f([8]), f([8]), M)[0] == pytest.approx(nw.all_reduce_s(f([8]), f([8]), M)[0])


def test_link_efficiency_scales_bandwidth():
    a = net(up_eff=0.5).all_reduce_s(f([8]), f([8]), M)[0]
    b = net(up_beta=BETA_UP * 0.5).all_reduce_s(f([8]), f([8]), M)[0]
    assert a == pytest.approx(b, rel=1e-12)
    a = net(out_eff=0.8).all_reduce_s(f([64]), f([8]), M)[0]
    b = net(out_beta=BETA_OUT * 0.8).all_reduce_s(f([64]), f([8]), M)[0]
    assert a == pytest.approx(b, rel=1e-12)


@pytest.mark.parametrize("n,g", [(16, 8), (64, 8), (512, 8), (16, 4), (144, 72)])
def test_hierarchical_all_reduce_is_rs_in_domain_plus_all_reduce_of_m_over_g_across_plus_ag(n, g):
    nw = net(domain=g)
    across = n / g
    expected = (ring_rs(g, M, ALPHA_UP, BETA_UP)                        # reduce-scatter in the domain
                + min(ring_ar(across, M / g, ALPHA_OUT, BETA_OUT),       # all-reduce of M/g across domains
                      tree_ar(across, M / g, ALPHA_OUT, BETA_OUT))
                + ring_rs(g, M, ALPHA_UP, BETA_UP))                      # all-gather in the domain
    assert nw.all_reduce_s(f([n]), f([g]), M)[0] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("n,g", [(16, 8), (64, 8), (32, 4)])
def test_hierarchical_reduce_scatter_and_all_gather(n, g):
    nw = net(domain=g)
    expected = ring_rs(g, M, ALPHA_UP, BETA_UP) + ring_rs(n / g, M / g, ALPHA_OUT, BETA_OUT)
    assert nw.reduce_scatter_s(f([n]), f([g]), M)[0] == pytest.approx(expected, rel=1e-12)
    assert nw.all_gather_s(f([n]), f([g]), M)[0] == pytest.approx(expected, rel=1e-12)
    # inside one domain: the flat ring on the scale-up link
    assert nw.reduce_scatter_s(f([g]), f([g]), M)[0] == pytest.approx(ring_rs(g, M, ALPHA_UP, BETA_UP), rel=1e-12)


def test_one_rank_per_domain_is_a_flat_ring_on_the_nic():
    # g = 1: every member in its own domain -> the plain scale-out collective
    nw = net(domain=8)
    n = 32
    assert nw.reduce_scatter_s(f([n]), f([1]), M)[0] == pytest.approx(ring_rs(n, M, ALPHA_OUT, BETA_OUT), rel=1e-12)
    assert nw.all_reduce_s(f([n]), f([1]), M)[0] == pytest.approx(
        min(ring_ar(n, M, ALPHA_OUT, BETA_OUT), tree_ar(n, M, ALPHA_OUT, BETA_OUT)), rel=1e-12)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_all_to_all_inside_one_domain_uses_only_the_scaleup_link(n):
    expected = (n - 1) * ALPHA_UP + (n - 1) / n * M / BETA_UP   # REFERENCES.md, full bisection
    assert net(domain=8).all_to_all_s(f([n]), f([n]), M)[0] == pytest.approx(expected, rel=1e-12)
    # neither the NIC's bandwidth nor its latency matters
    other = net(domain=8, out_beta=1.0, out_alpha=1.0)
    assert other.all_to_all_s(f([n]), f([n]), M)[0] == pytest.approx(expected, rel=1e-12)


def test_all_to_all_across_domains_one_rank_per_domain_is_the_flat_formula_on_the_nic():
    n = 16
    expected = (n - 1) * ALPHA_OUT + (n - 1) / n * M / BETA_OUT
    assert net(domain=8).all_to_all_s(f([n]), f([1]), M)[0] == pytest.approx(expected, rel=1e-12)


def test_all_to_all_across_domains_is_paced_by_the_slower_of_its_two_links():
    n, g = 64, 8
    intra = (g - 1) / n * M / BETA_UP
    inter = (n - g) / n * M / BETA_OUT
    expected = (n - 1) * ALPHA_OUT + max(intra, inter)
    assert net(domain=g).all_to_all_s(f([n]), f([g]), M)[0] == pytest.approx(expected, rel=1e-12)


def test_p2p_inside_and_across_the_domain():
    nw = net(domain=8)
    assert nw.p2p_s(f([4]), M)[0] == pytest.approx(ALPHA_UP + M / BETA_UP, rel=1e-12)
    assert nw.p2p_s(f([8]), M)[0] == pytest.approx(ALPHA_OUT + M / BETA_OUT, rel=1e-12)


# ---- overhead ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("topology", [0, 1, 2])
def test_overhead_is_added_once_per_collective_of_more_than_one_rank(topology):
    overhead = 7e-6
    plain, slow = net(topology=topology), net(topology=topology, overhead=overhead)
    n = f([1, 2, 8, 64, 512])
    g = np.minimum(n, 8.0)
    for name in ("all_reduce_s", "reduce_scatter_s", "all_gather_s", "all_to_all_s"):
        diff = getattr(slow, name)(n, g, M) - getattr(plain, name)(n, g, M)
        np.testing.assert_allclose(diff, np.where(n > 1, overhead, 0.0), rtol=1e-9, atol=1e-15, err_msg=name)
    stride = f([1, 8, 64])
    np.testing.assert_allclose(slow.p2p_s(stride, M) - plain.p2p_s(stride, M), overhead, rtol=1e-9)


# ---- torus ------------------------------------------------------------------------------------------
def torus_by_hand(k, dims, m, a, beta_per_gpu, factor):
    """Bidirectional ring per dimension over 2 of the GPU's 2*dims links (bandwidth beta/dims), the
    message shrinking by k after each dimension's reduce-scatter (factor 2: all-reduce, 1: RS or AG)."""
    total = 0.0
    for _ in range(dims):
        total += factor * ((k - 1) * a + (k - 1) / k * m / (beta_per_gpu / dims))
        m /= k
    return total


@pytest.mark.parametrize("dims,k", [(2, 4), (2, 8), (3, 3), (3, 4)])
@pytest.mark.parametrize("factor", [1.0, 2.0])
def test_torus_collective_against_per_dimension_rings(dims, k, factor):
    n = k ** dims
    got = C.torus_collective_s(f([n]), M, ALPHA_OUT, BETA_OUT, np.array([float(dims)]), factor)[0]
    assert got == pytest.approx(torus_by_hand(k, dims, M, ALPHA_OUT, BETA_OUT, factor), rel=1e-9)


@pytest.mark.parametrize("topology,dims,k", [(1, 2, 4), (2, 3, 2), (2, 3, 4)])
def test_network_torus_all_reduce_and_reduce_scatter(topology, dims, k):
    g = 8
    across = k ** dims
    n = g * across
    nw = net(domain=g, topology=topology)
    rs_in = ring_rs(g, M, ALPHA_UP, BETA_UP)
    ar = rs_in + torus_by_hand(k, dims, M / g, ALPHA_OUT, BETA_OUT, 2.0) + rs_in
    assert nw.all_reduce_s(f([n]), f([g]), M)[0] == pytest.approx(ar, rel=1e-9)
    rs = rs_in + torus_by_hand(k, dims, M / g, ALPHA_OUT, BETA_OUT, 1.0)
    assert nw.reduce_scatter_s(f([n]), f([g]), M)[0] == pytest.approx(rs, rel=1e-9)
    # inside one domain the torus plays no part
    assert nw.all_reduce_s(f([g]), f([g]), M)[0] == pytest.approx(net(domain=g).all_reduce_s(f([g]), f([g]), M)[0])


def test_topology_rows_in_one_batch_are_independent():
    cols = {"scaleup_domain": f([8, 8, 8]), "scaleup_latency_s": f([ALPHA_UP] * 3),
            "scaleup_bandwidth_bytes_per_s": f([BETA_UP] * 3), **fitted(3),
            "scaleout_latency_s": f([ALPHA_OUT] * 3), "scaleout_bandwidth_bytes_per_s": f([BETA_OUT] * 3),
            "scaleout_efficiency": f([1, 1, 1]), "topology_code": np.array([0, 1, 2]),
            }
    n, g = f([8 * 64] * 3), f([8] * 3)
    batch = Network(cols).all_reduce_s(n, g, M)
    for i, topo in enumerate((0, 1, 2)):
        assert batch[i] == pytest.approx(net(domain=8, topology=topo).all_reduce_s(n[:1], g[:1], M)[0], rel=1e-12)


# ---- placement --------------------------------------------------------------------------------------
def brute_force_in_domain(domain, tp, cp, ep, pp, dp):
    """Number every GPU TP innermost, then CP, EP, PP, outer DP (dp counts the EP ranks: dp = ep x
    outer dp) and count, for GPU 0's groups, the members in GPU 0's scale-up domain. The expert
    layers fold the stage's tp x cp x ep contiguous GPUs as etp x ep x expert-dp in GPU order
    (Megatron-Core parallel folding, etp = tp): EP ranks etp apart, expert-DP ranks etp x ep apart."""
    outer = dp // ep
    def rank(t, c, e, p, o):
        return t + tp * (c + cp * (e + ep * (p + pp * o)))
    etp = tp
    tp_group = [rank(t, 0, 0, 0, 0) for t in range(tp)]
    ep_group = [i * etp for i in range(ep)]
    dense_dp = [rank(0, c, e, 0, o) for c, e, o in itertools.product(range(cp), range(ep), range(outer))]
    expert_dp = [i * etp * ep + rank(0, 0, 0, 0, o) for i in range(tp * cp // etp) for o in range(outer)]
    inside = lambda group: sum(r // domain == 0 for r in group)
    return {"tp_in": inside(tp_group), "ep_in": inside(ep_group), "dense_dp_in": inside(dense_dp),
            "expert_dp_in": inside(expert_dp), "pp_stride": rank(0, 0, 0, 1, 0) if pp > 1 else tp * cp * ep,
            "cp_stride": rank(0, 1, 0, 0, 0) if cp > 1 else tp}


def brute_force_megatron_order(domain, tp, cp, ep, pp, dp):
    """Megatron-Core's training order 'tp-cp-ep-dp-pp': TP innermost, then CP, then the dp data-
    parallel ranks (EP the innermost of them), PP outermost; the expert layers fold a stage's
    tp x cp x dp GPUs as etp x ep x expert-dp (etp = tp) in GPU order."""
    def rank(t, c, d, p):
        return t + tp * (c + cp * (d + dp * p))
    stage = tp * cp * dp
    dense_dp = [rank(0, c, d, 0) for c, d in itertools.product(range(cp), range(dp))]
    expert_dp = [i * tp * ep for i in range(stage // (tp * ep))]
    inside = lambda group: sum(r // domain == 0 for r in group)
    return {"tp_in": inside(range(tp)), "ep_in": inside([i * tp for i in range(ep)]),
            "dense_dp_in": inside(dense_dp), "expert_dp_in": inside(expert_dp),
            "pp_stride": rank(0, 0, 0, 1)}


LAYOUTS = [  # domain, tp, cp, ep, pp, dp
    (8, 8, 1, 1, 8, 8),      # Megatron GPT-3: TP fills the node, PP and DP across nodes
    (8, 2, 2, 2, 2, 4),      # every dimension: TP pairs, CP and EP inside, PP and outer DP across
    (8, 2, 1, 1, 1, 4),      # TP 2 x DP 4 in one node: the DP ring stays inside
    (8, 2, 1, 1, 2, 4),      # PP between TP and DP: 2 DP ranks per node
    (16, 2, 2, 1, 1, 4),     # CP x DP in a 16-GPU domain
    (72, 4, 1, 8, 1, 16),    # NVL72: TP 4, EP 8 at stride 4 (32 GPUs), outer DP 2 at stride 32
    (8, 1, 1, 8, 1, 8),      # pure EP inside a node
    (4, 8, 1, 1, 1, 2),      # TP wider than the domain
]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_placement_counts_match_a_brute_force_rank_numbering(layout):
    domain, tp, cp, ep, pp, dp = layout
    p = Placement(f([domain]), f([tp]), f([cp]), f([ep]), f([pp]), f([dp]))
    want = brute_force_in_domain(domain, tp, cp, ep, pp, dp)
    assert p.tp_in[0] == want["tp_in"]
    assert p.ep_in[0] == want["ep_in"]
    assert p.dense_dp_in[0] == want["dense_dp_in"]
    assert p.expert_dp_in[0] == want["expert_dp_in"]
    assert p.pp_stride[0] == want["pp_stride"]
    assert p.cp_stride[0] == want["cp_stride"]


def test_placement_hand_worked_megatron_gpt3():
    # GPT-3 175B on DGX A100 (Narayanan et al.): TP 8 = one node, PP 8 and DP 8 across nodes.
    p = Placement(8.0, f([8]), f([1]), f([1]), f([8]), f([8]))
    assert p.tp_in[0] == 8 and p.pp_stride[0] == 8 and p.dense_dp_in[0] == 1


def test_flat_placement_puts_one_dp_rank_per_domain():
    p = Placement(f([8]), f([2]), f([1]), f([1]), f([1]), f([4]), hierarchical=False)
    assert p.dense_dp_in[0] == 1 and p.expert_dp_in[0] == 1
    assert p.tp_in[0] == 2  # TP placement does not depend on the DP algorithm


@PROPERTY
@given(st.sampled_from([4, 8, 16, 32, 64]), st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4]),
       st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4]))
def test_placement_matches_brute_force_on_power_of_two_layouts(domain, tp, cp, ep, pp, outer):
    # Powers of two: every group of a kind has the same in-domain count. (In a 72-GPU domain a
    # group at stride 16 has 5 or 4 members inside depending on its offset; the model takes
    # floor(72/16) = 4, the slowest group's count.)
    dp = ep * outer
    p = Placement(f([domain]), f([tp]), f([cp]), f([ep]), f([pp]), f([dp]))
    want = brute_force_in_domain(domain, tp, cp, ep, pp, dp)
    assert (p.tp_in[0], p.ep_in[0], p.dense_dp_in[0], p.expert_dp_in[0]) == (
        want["tp_in"], want["ep_in"], want["dense_dp_in"], want["expert_dp_in"])


def test_ranks_per_domain():
    assert C.ranks_per_domain(8, 1, 8) == 8
    assert C.ranks_per_domain(16, 1, 8) == 8
    assert C.ranks_per_domain(4, 4, 8) == 2      # every 4th GPU: 2 per 8-GPU domain
    assert C.ranks_per_domain(4, 16, 8) == 1     # stride beyond the domain: one per domain
    assert C.ranks_per_domain(1, 1, 8) == 1


# ---- monotonicity properties --------------------------------------------------------------------
sizes = st.floats(1e2, 1e10)
shrink = st.floats(0.05, 1.0)


@PROPERTY
@given(st.integers(1, 2048), sizes, shrink, st.sampled_from(["ring_all_reduce_s", "tree_all_reduce_s",
                                                             "all_reduce_flat_s", "reduce_scatter_flat_s"]))
def test_flat_time_never_falls_when_n_grows_or_bandwidth_falls(n, m, factor, name):
    fn = getattr(C, name)
    base = fn(f([n]), m, ALPHA_UP, BETA_UP)[0]
    assert fn(f([n + 1]), m, ALPHA_UP, BETA_UP)[0] >= base * (1 - 1e-12)
    assert fn(f([n]), m, ALPHA_UP, BETA_UP * factor)[0] >= base * (1 - 1e-12)


@PROPERTY
@given(st.sampled_from([4, 8, 72]), st.integers(1, 64), sizes, st.sampled_from([0, 1, 2]),
       st.sampled_from(["all_reduce_s", "reduce_scatter_s", "all_to_all_s"]))
def test_network_time_never_falls_when_the_group_grows(domain, k, m, topology, name):
    # Fixed per-rank message; the group grows from k to k+1 domains' worth (or inside one domain).
    # Realistic links: scale-up at least 2x the NIC's bandwidth, and no faster latency outside.
    nw = net(domain=domain, topology=topology)
    n = f([k * domain, (k + 1) * domain])
    times = getattr(nw, name)(n, f([domain, domain]), m)
    assert times[1] >= times[0] * (1 - 1e-12)
    inside = f(np.arange(1, domain + 1))
    t_in = getattr(nw, name)(inside, inside, m)
    assert np.all(np.diff(t_in) >= -1e-12 * t_in[1:])
    assert getattr(nw, name)(f([2 * domain]), f([domain]), m)[0] >= t_in[-1] * (1 - 1e-12)


@PROPERTY
@given(st.sampled_from([8, 72]), st.integers(1, 32), sizes, shrink, st.sampled_from([0, 1, 2]),
       st.sampled_from(["all_reduce_s", "reduce_scatter_s", "all_to_all_s"]), st.booleans())
def test_network_time_never_falls_when_bandwidth_falls(domain, k, m, factor, topology, name, scaleup):
    fast = net(domain=domain, topology=topology)
    slow = net(domain=domain, topology=topology, **({"up_beta": BETA_UP * factor} if scaleup
                                                      else {"out_beta": BETA_OUT * factor}))
    n, g = f([k * domain]), f([domain])
    assert getattr(slow, name)(n, g, m)[0] >= getattr(fast, name)(n, g, m)[0] * (1 - 1e-12)


def test_non_power_of_two_domain_takes_the_slowest_groups_count():
    # NVL72, EP 8 at stride 16 (expert-tensor-parallel 16): EP groups starting at offsets 0-7 have
    # 5 members in the first 72 GPUs, those at 8-15 have 4; the model uses floor(72/16) = 4.
    tp, cp, ep, etp = 4, 4, 8, 16
    counts = [sum((o + etp * e) < 72 for e in range(ep)) for o in range(etp)]
    assert sorted(set(counts)) == [4, 5]
    p = Placement(f([72]), f([tp]), f([cp]), f([ep]), f([1]), f([ep]), etp=f([etp]))
    assert p.ep_in[0] == min(counts)


# ---- the fitted bus-efficiency shape (dse.perf.forms.collective, dse calibrate) ------------------
def test_small_messages_and_small_groups_reach_less_bandwidth():
    """Measured NCCL busbw rises with message size (per-chunk overhead) and with group size (the
    local copy): the fitted shape slows small messages and 2-rank groups, never large 8-rank ones
    beyond the efficiency."""
    plain, shaped = net(), net(half_bytes=5e6, copy=0.4)
    n, g = f(8), f(8)
    for m in (1e6, 16e6, 1e9):
        ratio = shaped.all_reduce_s(n, g, m) / plain.all_reduce_s(n, g, m)
        assert ratio > 1.0
    big = shaped.all_gather_s(n, g, 1e9) / plain.all_gather_s(n, g, 1e9)
    small = shaped.all_gather_s(n, g, 1e6) / plain.all_gather_s(n, g, 1e6)
    assert small > big  # the penalty shrinks as the message grows
    two = shaped.all_gather_s(f(2), f(2), 1e9) / plain.all_gather_s(f(2), f(2), 1e9)
    assert two > big    # 2-rank groups pay the local copy on a larger share of their traffic
    # 1e9 bytes on 8 ranks: 1/(1+sqrt(5e6/1e9)) * 7/7.4 of the link, as the form says
    expected = (1 + np.sqrt(5e6 / 1e9)) * 7.4 / 7
    assert big == pytest.approx(expected, rel=0.02)


def test_the_fitted_floor_is_paid_once_per_training_collective():
    base = {"scaleup_domain": np.array([8.0]), "scaleup_latency_s": np.array([0.0]),
            "scaleup_bandwidth_bytes_per_s": np.array([BETA_UP]),
            "scaleout_latency_s": np.array([0.0]), "scaleout_bandwidth_bytes_per_s": np.array([BETA_OUT]),
            "scaleout_efficiency": np.array([1.0])}
    with_floor = Network({**base, **fitted(1, floor=7e-6)})
    without = Network({**base, **fitted(1)})
    for n in (2.0, 8.0, 16.0):
        assert (with_floor.all_reduce_s(f(n), f(8), 1e6) - without.all_reduce_s(f(n), f(8), 1e6)) == pytest.approx(7e-6)
    assert with_floor.all_reduce_s(f(1), f(1), 1e6) == 0.0


@PROPERTY
@given(st.sampled_from([4, 8, 16, 32, 64]), st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4]),
       st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4]))
def test_training_placement_matches_megatron_rank_order(domain, tp, cp, ep, pp, outer):
    dp = ep * outer
    p = Placement(f([domain]), f([tp]), f([cp]), f([ep]), f([pp]), f([dp]), pp_outermost=True)
    want = brute_force_megatron_order(domain, tp, cp, ep, pp, dp)
    assert (p.tp_in[0], p.ep_in[0], p.dense_dp_in[0], p.expert_dp_in[0], p.pp_stride[0]) == (
        want["tp_in"], want["ep_in"], want["dense_dp_in"], want["expert_dp_in"], want["pp_stride"])


def test_pipeline_outermost_packs_the_data_parallel_group():
    # Narayanan et al. 2021 Fig. 14 layout: GPT 5.9B, PP 2 x DP 32 on 8-GPU DGX A100 nodes. Each
    # stage is 32 contiguous GPUs, so a DP group fills 4 whole nodes and the stages sit 32 apart.
    p = Placement(f([8]), f([1]), f([1]), f([1]), f([2]), f([32]), pp_outermost=True)
    assert p.dense_dp_in[0] == 8 and p.pp_stride[0] == 32


def test_traffic_between_domains_does_not_pay_the_scale_up_links_small_group_copy():
    # a rank's own chunk moves on the scale-up path beside the NIC transfer: a large local-copy
    # fraction fitted on NVLink (NCCL's Blackwell all-to-all sends to itself: about 0.85-1) shrinks
    # by the link ratio on the NIC, so two domains exchange at the NIC's rate whatever that fit
    n, g = f([2]), f([1])
    nic = (n[0] - 1) / n[0] * M / BETA_OUT
    for copy in (0.0, 1.0):
        t = net(domain=8, copy=copy).all_to_all_s(n, g, M)[0] - ALPHA_OUT
        assert nic <= t <= nic * (1 + BETA_OUT / BETA_UP) * (1 + 1e-12)
    # inside the domain the same fraction still costs its share: 2 ranks move (1 + c)/2 of M
    inside = net(domain=8, copy=1.0).all_to_all_s(n, f([2]), M)[0] - ALPHA_UP
    assert inside == pytest.approx(M / BETA_UP, rel=1e-12)


def test_a_nic_bound_exchange_is_the_same_on_gpus_of_one_nic():
    # H200 and B200 both reach the other node through one 400 Gb/s NIC per GPU: an expert
    # all-to-all between two nodes takes the same time within the two parts' fitted shapes
    from dse import resolve

    def hardware(system):
        cols = {"system": np.array([system], dtype=object)}
        resolve.system(cols)
        return {k: v if k == "system" else np.asarray(v) for k, v in cols.items()}
    times = [Network(hardware(s)).all_to_all_s(f([2]), f([1]), 5e9)[0] for s in ("h200", "b200")]
    assert max(times) / min(times) < 1.05


# ---- DeepEP's low-latency kernels (decode): published latencies ------------------------------------
# deepseek-ai/DeepEP docs/legacy.md (V1): H800, one CX7 400 Gb/s NIC per GPU, 128 tokens per rank,
# hidden 7168, top-8, FP8 dispatch (one fp32 scale per 128 elements), BF16 combine: microseconds.
DEEPEP_LL_H800_US = {8: (77, 114), 16: (118, 195), 32: (155, 273), 64: (173, 314), 128: (192, 369), 256: (194, 360)}


def test_low_latency_exchange_matches_deepeps_published_h800_latencies():
    from dse import resolve
    cols = {"system": np.array(["h800"], dtype=object)}
    resolve.system(cols)
    net = Network(cols)
    routed = 128 * 8 * 7168.0
    for n, published in DEEPEP_LL_H800_US.items():
        g = np.array([min(n, 8.0)])
        for element, measured_us in zip((1 + 4 / 128, 2.0), published):
            t = float(net.low_latency_exchange_s(np.array([float(n)]), g, np.array([routed * element]))[0])
            # across nodes within 12% (the NIC at the scale-out efficiency, every peer at once); one
            # node's (NVLink) within 30%; the all-to-all of n - 1 serial latencies was 1.3-7x too slow
            assert t * 1e6 == pytest.approx(measured_us, rel=0.12 if n > 8 else 0.30), (n, element)
            assert t < float(net.all_to_all_s(np.array([float(n)]), g, np.array([routed * element]))[0])


@PROPERTY
@given(st.sampled_from([8, 16, 32, 64, 128, 256, 512]), st.floats(1e4, 1e9), st.floats(1.0, 4.0))
def test_low_latency_exchange_never_shrinks_with_more_data_nor_beats_the_nic(n, routed, more):
    from dse import resolve
    cols = {"system": np.array(["h100-sxm"], dtype=object)}
    resolve.system(cols)
    net = Network(cols)
    g = np.array([min(n, 8.0)])
    t = lambda b: float(net.low_latency_exchange_s(np.array([float(n)]), g, np.array([b]))[0])  # noqa: E731
    assert t(routed * more) >= t(routed)
    # the copies bound for other domains cross the NIC at no more than its line rate
    assert t(routed) >= (n - min(n, 8)) / n * routed / float(np.asarray(cols["scaleout_bandwidth_bytes_per_s"])[0])
