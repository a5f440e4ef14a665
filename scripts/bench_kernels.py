"""Benchmark the decode-step kernels on the GPU: conventional vs ReplaySSM vs fla peers.

    python scripts/bench_kernels.py -o reports/bench/bench_kernels.json [--quick] [--plots]

One run measures, for Mamba-2 (Nemotron-3-Super: 128 heads, P 64, N 128, 8 groups) and GDN
(Qwen3.5-4B: 16 key / 32 value heads, 128 × 128):
  * the memcpy ceiling (device-to-device copy, bytes read + written);
  * a correctness check of every kernel family at the real shapes (small batch, vs the torch
    references) — a speedup is only reported for kernels that passed;
  * batch sweep 1..512 (conventional fp32, ReplaySSM non-flush / flush with an fp32 checkpoint, fla);
  * L sweep 4..64, draft sweep T = 1, 2, 4, 8, read formats fp32/bf16/fp8/NVFP4, update formats
    fp32/fp16-SR, conventional storage formats — at batch 256.
Timing: CUDA-graph replay of ≥ 24 launches cycling over enough independent buffer sets (≥ 256 MB)
that every launch starts with a cold L2; median of 5 replays. Bytes come from the explicit model in
``bytes_*`` below (state at its storage size, records fp32, inputs bf16, outputs bf16).
Amortised ReplaySSM cost per token over a window of L: ((L-1)·t_nonflush(W_mid) + t_flush)/L with
W_mid = (L-2)//2 (the non-flush cost is affine in W, so its mean over W = 0..L-2 is its value at
the midpoint).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl
from precision_lab.kernels.decode_state import PackedState, format_code
from precision_lab.kernels.gdn.decode import GDNRecords, gdn_conventional_step, gdn_replay_step
from precision_lab.kernels.mamba2.decode import Mamba2Records, mamba2_conventional_step, mamba2_replay_step

from precision_lab.provenance import provenance

MAMBA2 = dict(H=128, P=64, N=128, G=8)
GDN = dict(Hk=16, Hv=32, V=128, K=128)
BATCHES = [1, 4, 16, 64, 128, 256, 512]
LS = [4, 8, 16, 32, 64]
DRAFT_T = [1, 2, 4, 8]
READ_FMTS = ["fp32", "bf16", "fp8e4m3", "nvfp4"]
UPDATE_FMTS = ["fp32", "fp16-sr"]
CONV_FMTS = ["fp32", "bf16", "fp16-sr", "bf16-sr"]
COLD_BYTES = 256 << 20
# Copy ceiling measured on this machine type (docs/reference.md §4: 4246 GB/s, read + write counted). A
# target "% of copy bandwidth" is judged against the larger of it and the in-run ceiling
# (``memcpy_ceiling``), so a low in-run measurement can never flatter a kernel.
REFERENCE_COPY_GBPS = 4246.0
IN_BYTES = 2  # bf16 activations


# ---------------------------------------------------------------------------------------------
# bytes model
# ---------------------------------------------------------------------------------------------
def state_bytes(fmt: str, R: int, C: int) -> float:
    """Storage bytes of one [R, C] state matrix in fmt (NVFP4: codes + E4M3 scales + global scale)."""
    code, _ = format_code(fmt)
    if code == 5:
        return R * C / 2 + R * C / 16 + 4
    return R * C * {0: 4, 1: 2, 2: 2, 3: 1, 4: 1}[code]


def op_dims(op):
    if op == "mamba2":
        d = MAMBA2
        return dict(H=d["H"], R=d["P"], C=d["N"], Gk=d["G"])
    d = GDN
    return dict(H=d["Hv"], R=d["V"], C=d["K"], Gk=d["Hk"])


def token_bytes(op) -> float:
    """Per-token inputs + output of one sequence (bf16)."""
    d = op_dims(op)
    if op == "mamba2":   # x, y [H, P]; dt [H]; B, C [G, N]
        return IN_BYTES * (2 * d["H"] * d["R"] + d["H"] + 2 * d["Gk"] * d["C"])
    return IN_BYTES * (2 * d["H"] * d["R"] + 2 * d["Gk"] * d["C"] + 2 * d["H"])  # v, o; q, k; g, beta


def record_bytes(op, recompute=True) -> float:
    """fp32 bytes of one token's record for one sequence (all heads)."""
    d = op_dims(op)
    if op == "mamba2":   # u [H, P], B [G, N], a [H]
        return 4 * (d["H"] * d["R"] + d["Gk"] * d["C"] + d["H"])
    extra = 4 * (d["H"] * d["R"] + d["H"]) if recompute else 0  # v, beta
    return 4 * (d["H"] * d["R"] + d["Gk"] * d["C"] + d["H"]) + extra


def bytes_conventional(op, B, fmt):
    d = op_dims(op)
    return B * (2 * d["H"] * state_bytes(fmt, d["R"], d["C"]) + token_bytes(op))


def bytes_nonflush(op, B, read_fmt, W, T=1):
    d = op_dims(op)
    return B * (d["H"] * state_bytes(read_fmt, d["R"], d["C"]) + W * record_bytes(op) + T * record_bytes(op)
                + T * token_bytes(op))


def bytes_flush(op, B, upd_fmt, read_fmt, W, T=1, split=True):
    d = op_dims(op)
    st = d["H"] * (2 * state_bytes(upd_fmt, d["R"], d["C"]) + (state_bytes(read_fmt, d["R"], d["C"]) if split else 0))
    return B * (st + W * record_bytes(op) + T * token_bytes(op))


# ---------------------------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------------------------
def n_sets(bytes_per_launch: float) -> int:
    return int(min(64, max(1, math.ceil(COLD_BYTES / max(bytes_per_launch, 1)))))


def time_launches(launch, nsets: int, min_launches: int = 24, replays: int = 5) -> tuple[float, str]:
    """Median µs per launch; ``launch(i)`` runs the kernel on buffer set i (cycled for a cold L2)."""
    reps = max(min_launches, nsets)
    reps = int(math.ceil(reps / nsets) * nsets)
    for i in range(nsets):
        launch(i)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    try:
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            launch(0)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            for r in range(reps):
                launch(r % nsets)
        g.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(replays):
            e0.record()
            g.replay()
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1) * 1e3 / reps)
        del g
        return statistics.median(times), "cuda-graph"
    except Exception as e:  # noqa: BLE001 - some peers sync on the host; fall back to events per launch
        torch.cuda.synchronize()
        times = []
        for r in range(reps * 2):
            e0.record()
            launch(r % nsets)
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1) * 1e3)
        return statistics.median(times), f"events ({type(e).__name__})"


# ---------------------------------------------------------------------------------------------
# problem builders (one buffer set = pools + records + inputs of one launch)
# ---------------------------------------------------------------------------------------------
def _pool(fmt, B, H, R, C, dev):
    """A pool of B slots in fmt. fp32 pools hold random states; others start at 0 (code 0 is 0.0 in every
    format) and are given real values by one conventional step of the problem (``_seed_pools``), so no
    format is ever timed on zeros and no CPU quantizer runs on GB-sized states."""
    if format_code(fmt)[0] == 0:
        return PackedState(fmt, 0.1 * torch.randn(B, H, R, C, device=dev), None, None, R, C)
    p = PackedState.empty(fmt, B, H, R, C, device=dev)
    for t in (p.data, p.scale, p.gscale):
        if t is not None:
            t.zero_()
    return p


def _seed_pools(prob):
    for name in ("upd", "read"):
        pool = getattr(prob, name)
        if pool is not None and format_code(pool.fmt)[0] != 0:
            keep = prob.upd
            prob.upd = pool
            prob.conventional()
            prob.upd = keep


def _to(p: PackedState, dev) -> PackedState:
    t = (lambda x: None if x is None else x.to(dev))
    return PackedState(p.fmt, t(p.data), t(p.scale), t(p.gscale), p.R, p.C)


class _Problem:
    """One buffer set's state side: the update pool and optional read pool of B slots in their formats,
    slot and window pointers (every slot in use, window W from ring position 0), SR counters."""

    def __init__(self, B, H, R, C, dev, upd, read, W):
        self.upd = _pool(upd, B, H, R, C, dev)
        self.read = None if read is None else _pool(read, B, H, R, C, dev)
        self.slots = torch.arange(B, device=dev, dtype=torch.int32)
        self.start = torch.zeros(B, dtype=torch.int32, device=dev)
        self.wlen = torch.full((B,), W, dtype=torch.int32, device=dev)
        self.seq = torch.arange(B, device=dev, dtype=torch.int64)
        self.ev = torch.ones(B, device=dev, dtype=torch.int64)


class Mamba2Problem(_Problem):
    def __init__(self, B, dev, upd="fp32", read=None, ring=16, W=0, T=1):
        H, P, N, G = MAMBA2["H"], MAMBA2["P"], MAMBA2["N"], MAMBA2["G"]
        bf = torch.bfloat16
        super().__init__(B, H, P, N, dev, upd, read, W)
        self.rec = Mamba2Records(B, ring, H, G, P, N, device=dev)
        self.rec.u.normal_(0, 0.1)
        self.rec.b.normal_()
        self.rec.a.uniform_(-0.1, 0)
        self.x = torch.randn(B, T, H, P, device=dev, dtype=bf)
        self.dt = torch.randn(B, T, H, device=dev, dtype=bf)
        self.A = -torch.rand(H, device=dev)
        self.B = torch.randn(B, T, G, N, device=dev, dtype=bf)
        self.C = torch.randn(B, T, G, N, device=dev, dtype=bf)
        self.D = torch.randn(H, device=dev)
        self.dtb = torch.randn(H, device=dev)
        self.y = torch.empty_like(self.x)
        _seed_pools(self)

    def conventional(self, **cfg):
        return mamba2_conventional_step(self.upd, self.slots, self.x[:, 0], self.dt[:, 0], self.A, self.B[:, 0],
                                        self.C[:, 0], self.D, self.dtb, seq_ids=self.seq, events=self.ev,
                                        out=self.y[:, 0], **cfg)

    def replay(self, flush, fold_new, **cfg):
        return mamba2_replay_step(self.upd, self.read, self.rec, self.slots, self.start, self.wlen, self.x, self.dt,
                                  self.A, self.B, self.C, self.D, self.dtb, flush=flush, fold_new=fold_new,
                                  seq_ids=self.seq, events=self.ev, out=self.y, **cfg)


class GDNProblem(_Problem):
    def __init__(self, B, dev, upd="fp32", read=None, ring=16, W=0, T=1):
        Hk, Hv, V, K = GDN["Hk"], GDN["Hv"], GDN["V"], GDN["K"]
        bf = torch.bfloat16
        super().__init__(B, Hv, V, K, dev, upd, read, W)
        self.rec = GDNRecords(B, ring, Hk, Hv, V, K, device=dev)
        for t in (self.rec.k, self.rec.d, self.rec.v):
            t.normal_(0, 0.1)
        self.rec.a.uniform_(-0.1, 0)
        self.rec.beta.uniform_(0, 1)
        self.q = torch.randn(B, T, Hk, K, device=dev, dtype=bf)
        self.k = torch.randn(B, T, Hk, K, device=dev, dtype=bf)
        self.v = torch.randn(B, T, Hv, V, device=dev, dtype=bf)
        self.g = -0.1 * torch.rand(B, T, Hv, device=dev, dtype=bf)
        self.beta = torch.rand(B, T, Hv, device=dev, dtype=bf)
        self.o = torch.empty_like(self.v)
        _seed_pools(self)

    def conventional(self, **cfg):
        return gdn_conventional_step(self.upd, self.slots, self.q[:, 0], self.k[:, 0], self.v[:, 0], self.g[:, 0],
                                     self.beta[:, 0], seq_ids=self.seq, events=self.ev, out=self.o[:, 0], **cfg)

    def replay(self, flush, fold_new, **cfg):
        return gdn_replay_step(self.upd, self.read, self.rec, self.slots, self.start, self.wlen, self.q, self.k,
                               self.v, self.g, self.beta, flush=flush, fold_new=fold_new, seq_ids=self.seq,
                               events=self.ev, out=self.o, **cfg)


PROBLEMS = {"mamba2": Mamba2Problem, "gdn": GDNProblem}


def measure(op, kind, B, dev, *, upd="fp32", read=None, ring=16, W=0, T=1, fold_new=None, cfg=None,
            nbytes: float):
    """Time one kernel configuration over cold buffer sets; returns a result row. ``cfg``: launch-shape
    keywords of the kernel wrapper (block_r, num_warps, ...); None = its defaults."""
    cfg = {k: v for k, v in (cfg or {}).items() if v is not None}
    nsets = n_sets(nbytes)
    sets = [PROBLEMS[op](B, dev, upd=upd, read=read, ring=ring, W=W, T=T) for _ in range(nsets)]
    if kind == "conventional":
        launch = (lambda i: sets[i].conventional(**cfg))
    elif kind == "nonflush":
        launch = (lambda i: sets[i].replay(False, False, **cfg))
    else:
        fn = T == 1 if fold_new is None else fold_new
        launch = (lambda i: sets[i].replay(True, fn, **cfg))
    us, how = time_launches(launch, nsets)
    sets.clear()
    torch.cuda.empty_cache()
    return {"op": op, "kernel": kind, "batch": B, "update": upd, "read": read, "W": W, "T": T, "ring": ring,
            "cfg": cfg, "us": us, "bytes": nbytes, "GBps": nbytes / us / 1e3, "timing": how,
            "buffer_sets": nsets}


# Launch-shape candidates per kernel kind (keywords of the wrappers; a wrapper that lacks a keyword
# is tuned over the ones it has). "verify" is the non-flush kernel with T > 1 drafts.
TUNE_SPACE = {
    # the shapes that won (or came close) in earlier runs (``--tune-only`` rows in
    # reports/bench/tune_explore.jsonl); the wrappers' defaults are set from these rows. GDN's
    # replay wrapper picks its own launch shape (gdn/decode.py ``_replay_launch``): None = that default.
    "mamba2": {
        "conventional": dict(block_r=[16, 32], num_warps=[8]),
        "flush": dict(block_r=[16, 32], num_warps=[4, 8], fold_precision=["tf32x3"]),
        "nonflush": dict(block_r=[None], num_warps=[2, 4]),
        "verify": dict(block_r=[64], num_warps=[4]),
    },
    "gdn": {
        "conventional": dict(block_r=[8, 16], num_warps=[2, 4]),
        "flush": dict(block_r=[None]),
        "nonflush": dict(block_r=[None], num_warps=[None, 2, 4]),
        "verify": dict(block_r=[None], num_warps=[None, 4]),
    },
}

# The wider space of ``--tune-only`` (an exploration run; each entry a list of spaces whose products
# are joined), from which TUNE_SPACE keeps the winners.
TUNE_SPACE_WIDE = {
    "mamba2": {
        "conventional": [dict(block_r=[16, 32], num_warps=[4, 8])],
        "flush": [dict(block_r=[16, 32], num_warps=[2, 4, 8]), dict(block_r=[64], num_warps=[8])],
        "nonflush": [dict(block_r=[None], num_warps=[2, 4, 8])],
        "verify": [dict(block_r=[64], num_warps=[2, 4])],
    },
    "gdn": {
        "conventional": [dict(block_r=[8, 16, 32], num_warps=[2, 4, 8])],
        "flush": [dict(block_r=[None, 32], num_warps=[None, 4])],
        "nonflush": [dict(block_r=[None, 32, 128], num_warps=[None, 2, 4, 8])],
        "verify": [dict(block_r=[None, 32], num_warps=[None, 4, 8])],
    },
}


def tune_candidates(op, kind, wide: bool = False) -> list[dict]:
    import inspect
    import itertools

    wrapper = {"mamba2": (mamba2_conventional_step, mamba2_replay_step),
               "gdn": (gdn_conventional_step, gdn_replay_step)}[op][0 if kind == "conventional" else 1]
    have = inspect.signature(wrapper).parameters
    spaces = TUNE_SPACE_WIDE[op][kind] if wide else [TUNE_SPACE[op][kind]]
    out = []
    for space in spaces:
        space = {k: v for k, v in space.items() if k in have}
        for combo in itertools.product(*space.values()):
            c = dict(zip(space, combo))
            if c not in out:
                out.append(c)
    return out or [{}]


def tune(op, kind, dev, rec, *, read=None, W=0, T=1, ring=16, nbytes, wide=False) -> dict:
    """Fastest launch shape of one kernel kind at batch 256 (every candidate recorded, failures too)."""
    best = None
    mkind = "nonflush" if kind == "verify" else kind
    for cfg in tune_candidates(op, kind, wide):
        try:
            r = measure(op, mkind, 256, dev, upd="fp32", read=read, W=W, T=T, ring=ring, cfg=cfg, nbytes=nbytes)
        except Exception as e:  # noqa: BLE001 - a shape may not compile (registers / shared memory)
            torch.cuda.empty_cache()
            rec({"op": op, "kernel": mkind, "batch": 256, "read": read, "T": T, "cfg": cfg,
                 "error": f"{type(e).__name__}: {str(e)[:200]}"}, "tune")
            continue
        rec(r, "tune")
        if best is None or r["us"] < best[0]:
            best = (r["us"], cfg)
    return best[1] if best else {}


# ---------------------------------------------------------------------------------------------
# fla peers
# ---------------------------------------------------------------------------------------------
def _fla_autotuners() -> list:
    """The triton Autotuner objects of the imported fla kernels (unwrapping heuristics wrappers)."""
    from triton.runtime.autotuner import Autotuner

    found = []
    for name, mod in list(sys.modules.items()):
        if not name.startswith("fla.ops") or mod is None:
            continue
        for v in vars(mod).values():
            while v is not None and not isinstance(v, Autotuner) and hasattr(v, "fn"):
                v = v.fn
            if isinstance(v, Autotuner) and all(v is not f for f in found):
                found.append(v)
    return found


def fla_peer(op, B, dev):
    # fla autotunes its kernels with keys that leave out the batch size and caches the choice on disk:
    # the config picked at the first (batch 1) call would then time every batch (one run measured the
    # Mamba-2-like peer 30% slower at every batch that way). A peer gets its best: the disk cache is
    # off and the in-memory choices are cleared before each batch, so it autotunes at that batch.
    os.environ.setdefault("FLA_CACHE_RESULTS", "0")
    try:
        # fla imports transformers, whose probe for the 'kernels' package must not see this
        # repository's kernels/ folder: run the probe with the root hidden first
        from precision_lab.models._hf import import_transformers

        import_transformers()
        if op == "gdn":
            from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as fn
        else:
            from fla.ops.simple_gla import fused_recurrent_simple_gla as fn
    except Exception as e:  # noqa: BLE001
        return {"op": op, "kernel": "fla", "batch": B, "error": f"fla not importable: {e}"}
    bf = torch.bfloat16
    if op == "gdn":
        Hk, Hv, V, K = GDN["Hk"], GDN["Hv"], GDN["V"], GDN["K"]
        nbytes = B * (2 * Hv * K * V * 4 + token_bytes("gdn"))

        def make():
            return dict(q=torch.randn(B, 1, Hk, K, device=dev, dtype=bf), k=torch.randn(B, 1, Hk, K, device=dev, dtype=bf),
                        v=torch.randn(B, 1, Hv, V, device=dev, dtype=bf),
                        g=-0.1 * torch.rand(B, 1, Hv, device=dev, dtype=bf),
                        beta=torch.rand(B, 1, Hv, device=dev, dtype=bf),
                        initial_state=0.1 * torch.randn(B, Hv, K, V, device=dev))

        def call(a):
            return fn(a["q"], a["k"], a["v"], g=a["g"], beta=a["beta"], initial_state=a["initial_state"],
                      output_final_state=True, use_qk_l2norm_in_kernel=True)
    else:
        H, P, N = MAMBA2["H"], MAMBA2["P"], MAMBA2["N"]
        nbytes = B * (2 * H * N * P * 4 + token_bytes("mamba2"))

        def make():
            return dict(q=torch.randn(B, 1, H, N, device=dev, dtype=bf), k=torch.randn(B, 1, H, N, device=dev, dtype=bf),
                        v=torch.randn(B, 1, H, P, device=dev, dtype=bf),
                        g=-0.1 * torch.rand(B, 1, H, device=dev, dtype=torch.float32),
                        initial_state=0.1 * torch.randn(B, H, N, P, device=dev))

        def call(a):
            return fn(a["q"], a["k"], a["v"], g=a["g"], initial_state=a["initial_state"], output_final_state=True)
    nsets = n_sets(nbytes)
    sets = [make() for _ in range(nsets)]
    tuners = _fla_autotuners()
    for at in tuners:
        at.cache.clear()
    try:
        with torch.no_grad():
            us, how = time_launches(lambda i: call(sets[i]), nsets)
    except Exception as e:  # noqa: BLE001
        return {"op": op, "kernel": "fla", "batch": B, "error": f"{type(e).__name__}: {e}"}
    sets.clear()
    torch.cuda.empty_cache()
    chosen = {getattr(at, "base_fn", at.fn).__name__: str(at.best_config) for at in tuners if at.cache}
    return {"op": op, "kernel": "fla", "batch": B, "us": us, "bytes": nbytes, "GBps": nbytes / us / 1e3,
            "timing": how, "buffer_sets": nsets, "autotuned_at_this_batch": chosen,
            "implementation": fn.__module__ + "." + fn.__name__}


# ---------------------------------------------------------------------------------------------
# correctness at the real shapes
# ---------------------------------------------------------------------------------------------
def rel(a, b):
    return ((a.float().cpu() - b.float().cpu()).norm() / b.float().cpu().norm().clamp_min(1e-30)).item()


def check_correctness(dev, steps=20, ops=("mamba2", "gdn")) -> dict:
    """Every kernel family at the real shapes (batch 2) against the torch references on the CPU."""
    from precision_lab.kernels.gdn.decode import gdn_decode_stream
    from precision_lab.kernels.gdn.decode_reference import gdn_replay_step_ref, gdn_stream_reference
    from precision_lab.kernels.mamba2.decode import mamba2_decode_stream
    from precision_lab.kernels.mamba2.decode_reference import mamba2_replay_step_ref, mamba2_stream_reference

    from precision_lab.policy import StatePolicy

    out = {}
    torch.manual_seed(0)
    policies = ["fp32", "conventional:fp16-sr", "conventional:bf16", "shared:fp32", "split:fp32/nvfp4",
                "split:fp16-sr/nvfp4", "split:fp32/fp8e4m3", "split:fp32/bf16", "split:fp8e4m3-sr/nvfp4"]
    H, P, N, G = MAMBA2["H"], MAMBA2["P"], MAMBA2["N"], MAMBA2["G"]
    Bs = 2
    m = dict(x=torch.randn(Bs, steps, H, P), dt=torch.randn(Bs, steps, H), A=-torch.rand(H),
             B=0.3 * torch.randn(Bs, steps, G, N), C=torch.randn(Bs, steps, G, N), D=torch.randn(H), dt_bias=torch.randn(H))
    S0 = 0.1 * torch.randn(Bs, H, P, N)
    margs = [m[k] for k in ("x", "dt", "A", "B", "C", "D", "dt_bias")]
    Hk, Hv, V, K = GDN["Hk"], GDN["Hv"], GDN["V"], GDN["K"]
    gi = dict(q=torch.randn(Bs, steps, Hk, K), k=torch.randn(Bs, steps, Hk, K), v=torch.randn(Bs, steps, Hv, V),
              g=-0.2 * torch.rand(Bs, steps, Hv), beta=torch.rand(Bs, steps, Hv))
    G0 = 0.1 * torch.randn(Bs, Hv, V, K)
    gargs = [gi[k] for k in ("q", "k", "v", "g", "beta")]
    for pol_s in policies:
        pol = StatePolicy.parse(pol_s, seed=3)
        for op in ops:
            if op == "mamba2":
                y, upd, rd, w = mamba2_decode_stream(*(a.to(dev) for a in margs), policy=pol, S0=S0.to(dev))
                yr, ur, rr, wr = mamba2_stream_reference(*margs, policy=pol, S0=S0)
            else:
                y, upd, rd, w = gdn_decode_stream(*(a.to(dev) for a in gargs), policy=pol, S0=G0.to(dev))
                yr, ur, rr, wr = gdn_stream_reference(*gargs, policy=pol, S0=G0)
            tol = 1e-5 if pol.update == "fp32" and pol.read == "fp32" else 3e-3
            errs = {"y": rel(y, yr), "update": rel(upd.dequantize(), ur), "read": rel(rd.dequantize(), rr)}
            out[f"{op}:{pol.short_str()}"] = {"rel_err": errs, "writes": [w, wr], "tol": tol,
                                              "ok": bool(all(v < tol for v in errs.values()) and w == wr
                                                         and not torch.isnan(y).any())}
    # speculative verify (T = 4 drafts over a window of 5) and the speculative flush, vs the step refs
    for op in ops:
        for flush in (False, True):
            prob = PROBLEMS[op](2, dev, upd="fp32", read="nvfp4", ring=16, W=5, T=4)
            # decoded copies and window in logical order for the reference
            upd_f = prob.upd.data.float().cpu().clone()  # (clone: the flush updates the pool in place)
            rd_f = _to(prob.read, "cpu").dequantize()
            if op == "mamba2":
                hist = {"u": prob.rec.u[:, :5].cpu().clone(), "b": prob.rec.b[:, :5].cpu().clone(),
                        "a": prob.rec.a[:, :5].cpu().clone()}
                y = prob.replay(flush, False)
                yr, _, _ = mamba2_replay_step_ref(upd_f, rd_f, hist, prob.x.cpu(), prob.dt.cpu(), prob.A.cpu(),
                                                  prob.B.cpu(), prob.C.cpu(), prob.D.cpu(), prob.dtb.cpu(),
                                                  flush=flush)
            else:
                rep = Hv // Hk
                hist = {"k": prob.rec.k[:, :5].cpu().repeat_interleave(rep, 2), "d": prob.rec.d[:, :5].cpu().clone(),
                        "v": prob.rec.v[:, :5].cpu().clone(), "a": prob.rec.a[:, :5].cpu().clone(),
                        "beta": prob.rec.beta[:, :5].cpu().clone()}
                y = prob.replay(flush, False)
                yr, _, _ = gdn_replay_step_ref(upd_f, rd_f, hist, prob.q.cpu(), prob.k.cpu(), prob.v.cpu(),
                                               prob.g.cpu(), prob.beta.cpu(), flush=flush)
            e = rel(y, yr)
            # y is stored in bf16 (the inputs' dtype): one bf16 rounding is ~2e-3 relative
            out[f"{op}:verify-T4{'-flush' if flush else ''}"] = {"rel_err": {"y": e}, "tol": 5e-3, "ok": e < 5e-3}
    return out


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------
@triton.jit
def _copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)


def memcpy_ceiling(dev) -> dict:
    """Copy bandwidth of 2 GiB (bytes read + written), the best of: a Triton SM copy kernel (the kind
    of traffic the decode kernels make) at a few block sizes, and torch's copy_ timed with events
    outside a CUDA graph (inside one, copy_ becomes a copy-engine memcpy node that ran at 2.7 TB/s)."""
    n = 1 << 29
    src = torch.randn(n, device=dev)
    dst = torch.empty_like(src)
    tries = []
    for block in (2048, 4096, 8192):
        grid = (triton.cdiv(n, block),)
        us, how = time_launches(lambda i, g=grid, b=block: _copy_kernel[g](src, dst, n, BLOCK=b, num_warps=8), 1,
                                min_launches=20)
        tries.append({"method": f"triton copy BLOCK={block}", "bytes": 8 * n, "us": us, "GBps": 8 * n / us / 1e3,
                      "timing": how})
    assert torch.equal(src, dst), "copy kernel is wrong"
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(10):
        e0.record()
        dst.copy_(src)
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1e3)
    us = statistics.median(times)
    tries.append({"method": "torch copy_ (events)", "bytes": 8 * n, "us": us, "GBps": 8 * n / us / 1e3,
                  "timing": "events"})
    best = dict(max(tries, key=lambda r: r["GBps"]))
    best["tries"] = tries
    return best


def run(args) -> dict:
    dev = "cuda"
    t_start = time.time()
    # (the checks also warm the GPU up before the ceiling is measured; a tune-only run reports no
    # speedups and skips them)
    checks = {} if args.tune_only else check_correctness(dev, ops=args.ops)
    ceiling = memcpy_ceiling(dev)
    print(f"memcpy ceiling: {ceiling['GBps']:.0f} GB/s", flush=True)
    bad = [k for k, v in checks.items() if not v["ok"]]
    print(f"correctness: {len(checks) - len(bad)}/{len(checks)} ok {bad}", flush=True)
    for k, v in checks.items():
        print(f"  {k:32s} {'ok ' if v['ok'] else 'BAD'} {v['rel_err']}", flush=True)
    rows = []

    def result(partial: bool = False) -> dict:
        """The result JSON as it stands (``partial``: a per-operator checkpoint, no summary yet)."""
        return {"kind": "bench-kernels", "schema_version": 1, **({"partial": True} if partial else {}),
                "provenance": provenance(device=torch.cuda.get_device_name(), quick=bool(args.quick),
                                         command=" ".join(sys.argv), seconds=round(time.time() - t_start, 1)),
                "ceiling": ceiling, "correctness": checks, "rows": rows}

    log = open(args.log, "a") if args.log else None  # noqa: SIM115 - one line per row, survives a kill

    def rec(row, tag):
        row["tag"] = tag
        row["pct_ceiling"] = 100 * row["GBps"] / ceiling["GBps"] if "GBps" in row else None
        rows.append(row)
        if log:
            log.write(json.dumps(row) + "\n")
            log.flush()
        if "us" in row:
            print(f"{tag:10s} {row['op']:6s} {row['kernel']:12s} B={row['batch']:4d} "
                  f"{str(row.get('update')):8s} {str(row.get('read')):8s} W={row.get('W', '-')} T={row.get('T', '-')} "
                  f"{row['us']:9.1f} us {row['GBps']:7.0f} GB/s ({row['pct_ceiling']:.0f}%)", flush=True)
        else:
            print(f"{tag} {row}", flush=True)

    batches = [1, 16, 256] if args.quick else BATCHES
    Ls = [16] if args.quick else LS
    for op in args.ops:
        Lmid = lambda L: (L - 2) // 2  # noqa: E731
        # Hand tuning of the launch shapes at batch 256 (no autotune: the kernels update state in
        # place). Every candidate is recorded (tag "tune"); the sweeps below use the fastest.
        wide = args.tune_only
        best = {"conventional": tune(op, "conventional", dev, rec, nbytes=bytes_conventional(op, 256, "fp32"),
                                     wide=wide),
                "flush": tune(op, "flush", dev, rec, W=15, nbytes=bytes_flush(op, 256, "fp32", "fp32", 15, split=False),
                              wide=wide)}
        for rf in READ_FMTS:
            best["nonflush", rf] = tune(op, "nonflush", dev, rec, read=rf, W=Lmid(16),
                                        nbytes=bytes_nonflush(op, 256, rf, Lmid(16)), wide=wide)
        for T in ([1, 8] if args.quick or wide else DRAFT_T):
            if T > 1:
                ring = 1 << (16 + T - 1).bit_length()
                best["verify", T] = tune(op, "verify", dev, rec, W=8, T=T, ring=ring,
                                         nbytes=bytes_nonflush(op, 256, "fp32", 8, T), wide=wide)
        print(f"{op}: best launch shapes {best}", flush=True)
        if args.tune_only:
            continue
        # batch sweep: conventional fp32, ReplaySSM shared:fp32 at L = 16, fla
        for B in batches:
            rec(measure(op, "conventional", B, dev, cfg=best["conventional"],
                        nbytes=bytes_conventional(op, B, "fp32")), "batch")
            rec(measure(op, "nonflush", B, dev, W=Lmid(16), cfg=best["nonflush", "fp32"],
                        nbytes=bytes_nonflush(op, B, "fp32", Lmid(16))), "batch")
            rec(measure(op, "flush", B, dev, W=15, cfg=best["flush"],
                        nbytes=bytes_flush(op, B, "fp32", "fp32", 15, split=False)), "batch")
            rec(fla_peer(op, B, dev), "batch")
        # L sweep (batch 256, shared:fp32)
        for L in Ls:
            ring = 1 << (L - 1).bit_length()
            rec(measure(op, "nonflush", 256, dev, W=Lmid(L), ring=ring, cfg=best["nonflush", "fp32"],
                        nbytes=bytes_nonflush(op, 256, "fp32", Lmid(L))), f"L{L}")
            rec(measure(op, "flush", 256, dev, W=L - 1, ring=ring, cfg=best["flush"],
                        nbytes=bytes_flush(op, 256, "fp32", "fp32", L - 1, split=False)), f"L{L}")
        # draft sweep: history block 16, L = 16 + T; verify at W = 8, speculative flush folds 16
        for T in ([1, 8] if args.quick else DRAFT_T):
            ring = 1 << (16 + T - 1).bit_length()
            rec(measure(op, "nonflush", 256, dev, W=8, T=T, ring=ring,
                        cfg=best["nonflush", "fp32"] if T == 1 else best["verify", T],
                        nbytes=bytes_nonflush(op, 256, "fp32", 8, T)), f"T{T}")
            rec(measure(op, "flush", 256, dev, W=16, T=T, ring=ring, fold_new=False, cfg=best["flush"],
                        nbytes=bytes_flush(op, 256, "fp32", "fp32", 16, T, split=False)), f"T{T}")
        # read formats (split, fp32 update) and update formats (NVFP4 read), batch 256, L = 16
        for rf in READ_FMTS:
            rec(measure(op, "nonflush", 256, dev, upd="fp32", read=rf, W=Lmid(16), cfg=best["nonflush", rf],
                        nbytes=bytes_nonflush(op, 256, rf, Lmid(16))), "read")
            rec(measure(op, "flush", 256, dev, upd="fp32", read=rf, W=15, cfg=best["flush"],
                        nbytes=bytes_flush(op, 256, "fp32", rf, 15)), "read")
        for uf in UPDATE_FMTS:
            rec(measure(op, "flush", 256, dev, upd=uf, read="nvfp4", W=15, cfg=best["flush"],
                        nbytes=bytes_flush(op, 256, uf, "nvfp4", 15)), "update")
        for cf in CONV_FMTS:
            rec(measure(op, "conventional", 256, dev, upd=cf, cfg=best["conventional"],
                        nbytes=bytes_conventional(op, 256, cf)), "convfmt")
        # a checkpoint after each operator: a run cut short still leaves a JSON that --resummarise reads
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(result(partial=True), indent=1, default=str))
    if args.tune_only:
        return result(partial=True)
    again = memcpy_ceiling(dev)
    print(f"memcpy ceiling (end of run): {again['GBps']:.0f} GB/s", flush=True)
    if again["GBps"] > ceiling["GBps"]:
        ceiling = again
        for r in rows:
            if "GBps" in r:
                r["pct_ceiling"] = 100 * r["GBps"] / ceiling["GBps"]
    out = result()
    out["summary"] = summarise(rows, checks, ceiling)
    return out


def _find(rows, **kw):
    for r in rows:
        if all(r.get(k) == v for k, v in kw.items()) and "us" in r:
            return r
    return None


def summarise(rows, checks, ceiling) -> dict:
    """Amortised window costs and the targets; a speedup only where the kernels passed."""
    out = {}
    for op in ("mamba2", "gdn"):
        ok_conv = checks.get(f"{op}:fp32", {}).get("ok", False)
        ok_replay = checks.get(f"{op}:shared:fp32", {}).get("ok", False)
        ok_nvfp4 = checks.get(f"{op}:split:fp32/nvfp4", {}).get("ok", False)
        ok_verify = checks.get(f"{op}:verify-T4", {}).get("ok", False) and \
            checks.get(f"{op}:verify-T4-flush", {}).get("ok", False)
        s = {"batch": {}, "L": {}, "drafts": {}, "read": {}, "update": {}, "conventional_formats": {}}
        for B in BATCHES:
            c = _find(rows, op=op, tag="batch", kernel="conventional", batch=B)
            nf = _find(rows, op=op, tag="batch", kernel="nonflush", batch=B)
            fl = _find(rows, op=op, tag="batch", kernel="flush", batch=B)
            fla = _find(rows, op=op, tag="batch", kernel="fla", batch=B)
            if not (c and nf and fl):
                continue
            amort = (15 * nf["us"] + fl["us"]) / 16
            e = {"conventional_us": c["us"], "conventional_pct_ceiling": c["pct_ceiling"], "nonflush_us": nf["us"],
                 "flush_us": fl["us"], "replay_amortised_us": amort, "fla_us": fla["us"] if fla else None}
            if ok_conv and ok_replay:
                e["speedup_vs_conventional"] = c["us"] / amort
                if fla:
                    e["speedup_vs_fla"] = fla["us"] / amort
            s["batch"][B] = e
        for L in LS:
            nf = _find(rows, op=op, tag=f"L{L}", kernel="nonflush")
            fl = _find(rows, op=op, tag=f"L{L}", kernel="flush")
            c = _find(rows, op=op, tag="batch", kernel="conventional", batch=256)
            if nf and fl and c:
                amort = ((L - 1) * nf["us"] + fl["us"]) / L
                s["L"][L] = {"nonflush_us": nf["us"], "flush_us": fl["us"], "replay_amortised_us": amort,
                             "speedup_vs_conventional": c["us"] / amort if ok_conv and ok_replay else None,
                             "bound": 2 * L / (L + 1)}
        c = _find(rows, op=op, tag="batch", kernel="conventional", batch=256)
        for T in DRAFT_T:
            v = _find(rows, op=op, tag=f"T{T}", kernel="nonflush")
            f = _find(rows, op=op, tag=f"T{T}", kernel="flush")
            if v and f and c:
                n_nf = 16 // T - 1  # rounds between flushes with every draft accepted (history block 16)
                per_round = (n_nf * v["us"] + f["us"]) / (n_nf + 1)
                s["drafts"][T] = {"verify_us": v["us"], "spec_flush_us": f["us"], "per_round_amortised_us": per_round,
                                  "rounds_per_flush": n_nf + 1,
                                  "ratio_to_one_conventional_step": per_round / c["us"] if ok_verify and ok_conv
                                  else None,
                                  "snapshot_baseline_estimate_us": T * c["us"]}
        for rf in READ_FMTS:
            nf = _find(rows, op=op, tag="read", kernel="nonflush", read=rf)
            fl = _find(rows, op=op, tag="read", kernel="flush", read=rf)
            if nf and fl:
                s["read"][rf] = {"nonflush_us": nf["us"], "nonflush_GBps": nf["GBps"], "flush_us": fl["us"],
                                 "replay_amortised_us": (15 * nf["us"] + fl["us"]) / 16}
        if "fp32" in s["read"] and "nvfp4" in s["read"] and ok_nvfp4:
            s["nvfp4_vs_fp32_read_nonflush"] = s["read"]["fp32"]["nonflush_us"] / s["read"]["nvfp4"]["nonflush_us"]
        for uf in UPDATE_FMTS:
            fl = _find(rows, op=op, tag="update", kernel="flush", update=uf)
            if fl:
                s["update"][uf] = {"flush_us": fl["us"], "GBps": fl["GBps"]}
        for cf in CONV_FMTS:
            r = _find(rows, op=op, tag="convfmt", kernel="conventional", update=cf)
            if r:
                s["conventional_formats"][cf] = {"us": r["us"], "GBps": r["GBps"], "pct_ceiling": r["pct_ceiling"]}
        b256 = s["batch"].get(256, {})
        t8 = s["drafts"].get(8, {})
        ceil = max(ceiling["GBps"], REFERENCE_COPY_GBPS)
        c256 = _find(rows, op=op, tag="batch", kernel="conventional", batch=256)
        s["ceiling_for_targets_GBps"] = ceil
        targets = {
            "conventional_pct_ceiling": (100 * c256["GBps"] / ceil if c256 else None, 90.0),
            "replay_vs_conventional": (b256.get("speedup_vs_conventional"), 1.8 if op == "mamba2" else 1.75),
            "replay_vs_fla": (b256.get("speedup_vs_fla"), 2.0 if op == "mamba2" else 2.3),
            "nvfp4_vs_fp32_read_nonflush": (s.get("nvfp4_vs_fp32_read_nonflush"), 5.0),
            "verify_T8_vs_conventional": (t8.get("ratio_to_one_conventional_step"), 1.2),
        }
        s["targets"] = {k: {"value": v, "target": t,
                            "met": None if v is None else (v <= t if k.startswith("verify") else v >= t)}
                        for k, (v, t) in targets.items()}
        out[op] = s
    return out


def plots(result: dict, outdir: Path) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, op in zip(axes, ("mamba2", "gdn")):
        s = result["summary"][op]["batch"]
        Bs = sorted(int(b) for b in s)
        for key, label in (("conventional_us", "conventional fp32"), ("replay_amortised_us", "ReplaySSM L16 (amortised)"),
                           ("fla_us", "fla fused_recurrent")):
            ys = [s[b if b in s else str(b)].get(key) for b in Bs]
            if any(y is not None for y in ys):
                ax.plot(Bs, ys, marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch")
        ax.set_ylabel("µs per token step")
        ax.set_title(op)
        ax.legend()
    fig.tight_layout()
    p = outdir / "bench_kernels_batch.png"
    fig.savefig(p, dpi=110)
    files.append(str(p))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, op in zip(axes, ("mamba2", "gdn")):
        rows = [r for r in result["rows"] if r.get("op") == op and "GBps" in r and r.get("tag") in ("batch",)]
        for kind in ("conventional", "nonflush", "flush", "fla"):
            rr = sorted((r["batch"], r["GBps"]) for r in rows if r["kernel"] == kind)
            if rr:
                ax.plot([a for a, _ in rr], [b for _, b in rr], marker="o", label=kind)
        ax.axhline(result["ceiling"]["GBps"], color="k", ls="--", label="in-run torch memcpy")
        ax.axhline(REFERENCE_COPY_GBPS, color="r", ls=":", label="copy ceiling (docs/reference.md §4)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch")
        ax.set_ylabel("GB/s (bytes model)")
        ax.set_title(op)
        ax.legend(fontsize=8)
    fig.tight_layout()
    p = outdir / "bench_kernels_bandwidth.png"
    fig.savefig(p, dpi=110)
    files.append(str(p))
    return files


def markdown(result: dict) -> str:
    """The results table of reports/bench/README.md, from the JSON alone."""
    def f(v, fmt="{:.2f}"):
        return "—" if v is None else fmt.format(v)

    ceil = result["ceiling"]["GBps"]
    lines = [f"Device: {result['provenance'].get('device', '?')}; in-run torch memcpy {ceil:.0f} GB/s (read + write); "
             f"targets judged against max(in-run, docs/reference.md §4 copy ceiling {REFERENCE_COPY_GBPS:.0f} GB/s). Correctness: "
             f"{sum(v['ok'] for v in result['correctness'].values())}/{len(result['correctness'])} checks passed.", ""]
    lines += ["### Targets (batch 256, L = 16, fp32 state)", "",
              "| op | metric | measured | target | met |", "|---|---|---|---|---|"]
    for op, s in result["summary"].items():
        for k, t in s["targets"].items():
            lines.append(f"| {op} | {k} | {f(t['value'])} | {t['target']} | {t['met']} |")
    lines += ["", "### Batch sweep (µs per token step; ReplaySSM shared:fp32 @L16 amortised over the window)", "",
              "| op | batch | conventional | % in-run memcpy | non-flush | flush | ReplaySSM amortised | fla peer | "
              "× conventional | × fla |", "|---|---|---|---|---|---|---|---|---|---|"]
    for op, s in result["summary"].items():
        for B, e in s["batch"].items():
            lines.append(f"| {op} | {B} | {f(e['conventional_us'], '{:.1f}')} | "
                         f"{f(e['conventional_pct_ceiling'], '{:.0f}')} | {f(e['nonflush_us'], '{:.1f}')} | "
                         f"{f(e['flush_us'], '{:.1f}')} | {f(e['replay_amortised_us'], '{:.1f}')} | "
                         f"{f(e.get('fla_us'), '{:.1f}')} | {f(e.get('speedup_vs_conventional'))} | "
                         f"{f(e.get('speedup_vs_fla'))} |")
    lines += ["", "### L sweep (batch 256)", "", "| op | L | non-flush µs | flush µs | amortised µs | × conventional | "
              "bound 2L/(L+1) |", "|---|---|---|---|---|---|---|"]
    for op, s in result["summary"].items():
        for L, e in s["L"].items():
            lines.append(f"| {op} | {L} | {e['nonflush_us']:.1f} | {e['flush_us']:.1f} | "
                         f"{e['replay_amortised_us']:.1f} | {f(e['speedup_vs_conventional'])} | {e['bound']:.2f} |")
    lines += ["", "### Speculative verify (batch 256, history block 16, every draft accepted)", "",
              "| op | T | verify µs | spec. flush µs | per round amortised µs | ÷ one conventional step | "
              "snapshot baseline T×conv µs |", "|---|---|---|---|---|---|---|"]
    for op, s in result["summary"].items():
        for T, e in s["drafts"].items():
            lines.append(f"| {op} | {T} | {e['verify_us']:.1f} | {e['spec_flush_us']:.1f} | "
                         f"{e['per_round_amortised_us']:.1f} | {f(e['ratio_to_one_conventional_step'])} | "
                         f"{e['snapshot_baseline_estimate_us']:.1f} |")
    lines += ["", "### Read / update / storage formats (batch 256, L = 16)", "",
              "| op | kernel | format | µs | GB/s |", "|---|---|---|---|---|"]
    for op, s in result["summary"].items():
        for rf, e in s["read"].items():
            lines.append(f"| {op} | non-flush, read copy | {rf} | {e['nonflush_us']:.1f} | {e['nonflush_GBps']:.0f} |")
            lines.append(f"| {op} | flush split:fp32/{rf} | {rf} | {e['flush_us']:.1f} | — |")
        for uf, e in s["update"].items():
            lines.append(f"| {op} | flush split:{uf}/nvfp4 | {uf} | {e['flush_us']:.1f} | {e['GBps']:.0f} |")
        for cf, e in s["conventional_formats"].items():
            lines.append(f"| {op} | conventional | {cf} | {e['us']:.1f} | {e['GBps']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", default="reports/bench/bench_kernels.json")
    ap.add_argument("--quick", action="store_true", help="fewer batches/L/T (a smoke run)")
    ap.add_argument("--ops", nargs="+", default=["mamba2", "gdn"], choices=["mamba2", "gdn"],
                    help="which operators to check and time (default both)")
    ap.add_argument("--tune-only", action="store_true",
                    help="only the launch-shape tuning rows at batch 256, over the wider exploration space "
                    "(TUNE_SPACE_WIDE); no correctness checks, sweeps or summary")
    ap.add_argument("--plots-from", help="only draw the PNGs from an existing JSON")
    ap.add_argument("--log", help="append every measured row to this JSON-lines file as it is measured")
    ap.add_argument("--resummarise", nargs="+", metavar="JSON",
                    help="recompute the summary from the measured rows of one or more result JSONs (several: "
                    "runs split by --ops, merged: rows and checks joined, the highest ceiling kept), write it "
                    "to --output with the plots and print the Markdown tables")
    args = ap.parse_args(argv)
    out = Path(args.output)
    if args.resummarise:
        parts = [json.loads(Path(f).read_text()) for f in args.resummarise]
        res = parts[0]
        if len(parts) > 1:
            res = dict(res, rows=[r for p in parts for r in p["rows"]],
                       correctness={k: v for p in parts for k, v in p["correctness"].items()},
                       ceiling=max((p["ceiling"] for p in parts), key=lambda c: c["GBps"]),
                       # the first part's provenance (versions, device, commit, time) stands for the
                       # merge; each part's own is kept under merged_from
                       provenance=dict(parts[0]["provenance"], command=None, seconds=None,
                                       merged_from=[p["provenance"] for p in parts]))
        res["summary"] = summarise(res["rows"], res["correctness"], res["ceiling"])
        res["summary_recomputed_by"] = " ".join(sys.argv)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=1, default=str))
        plots(res, out.parent)
        print(markdown(res))
        return 0
    if args.plots_from:
        res = json.loads(Path(args.plots_from).read_text())
        print(plots(res, out.parent))
        print(markdown(res))
        return 0
    if not torch.cuda.is_available():
        print("bench_kernels needs a CUDA GPU", file=sys.stderr)
        return 2
    res = run(args)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1, default=str))
    if args.tune_only:
        return 0
    try:
        plots(res, out.parent)
    except Exception as e:  # noqa: BLE001
        print(f"plots failed: {e}")
    print(json.dumps({op: res["summary"][op]["targets"] for op in res["summary"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
