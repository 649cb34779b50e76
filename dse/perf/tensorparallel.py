"""Tensor parallelism inside a layer: the TP collectives a layer exposes (all-reduces, or
sequence parallelism's all-gathers and reduce-scatters) and, where Transformer Engine overlaps them
with the GEMMs (userbuffers), the GEMMs it splits into chunks to do so."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from dse.columns import only_where
from dse.perf import layer as L
from dse.perf import roofline as R

# The TP GEMMs Transformer Engine's userbuffers overlap runs in chunks of the tokens, one GEMM per
# exchange step (module/base.py initialize_ub, comm_gemm_overlap.cpp; NVIDIA/TransformerEngine
# d0067d0da): by ring exchange in tp chunks, the forward of qkv and fc1 (their input gathered) and
# the data gradients of proj and fc2 (their output gradient gathered), in tp/2 chunks of two where
# a recipe aggregates the ring exchange (`tp_overlap_aggregate`: split_overlap_ag_p2p's _aggregate);
# the forward of proj and fc2 (their output scattered) in tp chunks, as the ring exchange
# Megatron-Bridge configures for FP8 (training/comm_overlap.py userbuffers_fp8_*). Not modelled
# apart: the pipelined reduce-scatter of TE's default and of the BF16 recipes (4 chunks, 8-24 SMs
# withheld from the GEMM), about as costly at TP 8 and costlier at TP 2-4. The data gradients of qkv
# and fc1 and every weight gradient overlap their exchange in bulk, whole.
GATHERED_FORWARD = ("qkv_proj", "mlp_up_gate")
SCATTERED_FORWARD = ("attn_out_proj", "mlp_down")
GATHERED_DGRAD = ("attn_out_proj", "mlp_down")
CHUNKED = GATHERED_FORWARD + SCATTERED_FORWARD


def overlapped(w, tp, tp_in):
    """Rows whose TP collectives overlap their GEMMs: Transformer Engine's comm-GEMM overlap
    (userbuffers) exchanges through CUDA IPC over NVLink, so only a TP group inside the scale-up domain."""
    return w["tp_overlap"] & (tp > 1) & (tp_in >= tp)


def overlap_chunks(w, tp, tp_in):
    """(scattered, gathered): the GEMMs each overlapped TP GEMM runs as, tp where TP overlaps (tp/2
    for the gathered ones under an aggregated ring exchange), else 1."""
    on = overlapped(w, tp, tp_in)
    scattered = np.where(on, tp, 1.0)
    aggregated = on & w["tp_overlap_aggregate"]
    if not np.any(aggregated):   # the same array: gemm_fwd_dgrad_s times the chunks once
        return scattered, scattered
    return scattered, np.where(aggregated, np.maximum(tp / 2.0, 1.0), scattered)


def chunked_time_s(op, rates, chunks, cache=None):
    """Seconds of a TP GEMM run as `chunks` GEMMs over 1/chunks of its tokens each, one after
    another (its weight applied as L.weighted does)."""
    return chunks * L.weighted(R.op_time_s, replace(op, m=op.m / chunks), rates, cache)


def gemm_fwd_dgrad_s(op, rates, whole, chunks, cache=None):
    """(forward, data-gradient) seconds of one linear layer whose whole forward takes `whole`, under
    the overlap's (scattered, gathered) chunks; a data gradient takes its forward's time."""
    scattered, gathered = chunks   # gathered <= scattered: no chunks anywhere where scattered has none
    if op.name not in CHUNKED or not np.any(scattered > 1):
        return whole, whole
    by = gathered if op.name in GATHERED_FORWARD else scattered
    fwd = chunked_time_s(op, rates, by, cache)
    if op.name not in GATHERED_DGRAD:
        return fwd, whole
    return fwd, fwd if by is gathered else chunked_time_s(op, rates, gathered, cache)


def tp_comm(net, place, w, tp, layer, act_msg, gather_msg):
    """(forward, backward) exposed TP communication of one layer: 2 all-reduces, or with sequence
    parallelism 2 all-gathers + 2 reduce-scatters forward and 2 more all-gathers backward (the
    stored sharded GEMM inputs are gathered again for the weight gradients, Korthikanti Sec. 4.2.2);
    one of each per sub-block (a hybrid layer with a mixer or an MLP alone has one). The
    all-gathers carry `gather_msg`: a GEMM input gathered for a low-precision GEMM goes in its
    quantized format (Transformer Engine quantizes before gathering: distributed.py _all_gather_fp8,
    _all_gather_mxfp8, _all_gather_nvfp4), the reduce-scatters and all-reduces carry 16-bit outputs
    (`act_msg`). Overlapped TP (ring exchange in tp chunks) never hides its first chunk, and only
    exists inside the scale-up domain: Transformer Engine's comm-GEMM overlap (userbuffers)
    exchanges through CUDA IPC over NVLink, so a TP group that spans domains runs its collectives
    exposed. Also the 16-bit all-gather (the pipeline's gather of a scattered activation)."""
    sp = w["sp"]
    blocks = layer.blocks
    all_gather = only_where(tp > 1, lambda: net.all_gather_s(tp, place.tp_in, act_msg))
    gather = only_where(sp & (tp > 1), lambda: net.all_gather_s(tp, place.tp_in, gather_msg))
    fwd = np.where(sp, blocks * (gather + only_where(sp & (tp > 1), lambda: net.reduce_scatter_s(tp, place.tp_in, act_msg))),
                   only_where(~sp & (tp > 1), lambda: blocks * net.all_reduce_s(tp, place.tp_in, act_msg)))
    bwd = fwd + np.where(sp, blocks * gather, 0.0)
    overlap = overlapped(w, tp, place.tp_in)
    fwd_exposed = np.where(overlap, np.maximum(fwd - layer.gemm_fwd, fwd / tp), fwd)
    bwd_exposed = np.where(overlap, np.maximum(bwd - layer.gemm_bwd, bwd / tp), bwd)
    return fwd_exposed, bwd_exposed, all_gather
