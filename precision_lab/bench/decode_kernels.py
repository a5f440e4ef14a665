"""The decode-step kernel benchmark: conventional vs ReplaySSM vs flash-linear-attention peers.

One run measures, for Mamba-2 (Nemotron-3-Super: 128 heads, P 64, N 128, 8 groups) and GDN
(Qwen3.5-4B: 16 key / 32 value heads, 128 × 128):
  * the memcpy ceiling (``ceiling.copy_ceiling``);
  * a correctness check of every kernel family at the real shapes (small batch, vs the torch
    references) — a speedup is only reported for kernels that passed;
  * batch sweep 1..512 (conventional fp32, ReplaySSM non-flush / flush with an fp32 checkpoint, fla);
  * the one-token ReplaySSM steps in both launch forms (one launch, or a scores kernel then the
    step kernel; ``fused_scores`` of the wrappers) at small batch, beside the conventional step —
    the rows the batch-size rule of ``kernels/common/launch.py`` was set from;
  * L sweep 4..64, draft sweep T = 1, 2, 4, 8, read formats fp32/bf16/fp8/NVFP4, update formats
    fp32/fp16-SR, conventional storage formats — at batch 256.
Timing: CUDA-graph replay of ≥ 24 launches cycling over enough independent buffer sets (≥ 256 MB)
that every launch starts with a cold L2; median of 5 replays (``timing.time_launches``). Bytes come
from ``byte_models`` (state at its storage size, records fp32, inputs bf16, outputs bf16).
Amortised ReplaySSM cost per token over a window of L: ((L-1)·t_nonflush(W_mid) + t_flush)/L with
W_mid = (L-2)//2 (the non-flush cost is affine in W, so its mean over W = 0..L-2 is its value at
the midpoint).
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
import itertools
import json
import sys
import time
from pathlib import Path

import torch

from precision_lab.kernels.common import launch as kernel_launch
from precision_lab.kernels.gdn.decode import gdn_conventional_step, gdn_replay_step
from precision_lab.kernels.mamba2.decode import mamba2_conventional_step, mamba2_replay_step

from .byte_models import step_bytes
from .ceiling import REFERENCE_COPY_GBPS, copy_ceiling
from .peers import fla_peer, fla_versions
from .problems import GDN, MAMBA2, PROBLEMS, packed_to, state_dims
from .schema import (
    BatchPoint,
    DecodeKernelsResult,
    DraftPoint,
    KernelCheck,
    KernelRow,
    LaunchFormPoint,
    OperatorSummary,
    ReadFormatPoint,
    StorageFormatPoint,
    Target,
    UpdateFormatPoint,
    WindowPoint,
    dump,
    load,
    run_provenance,
)
from .timing import n_sets, time_launches

BATCHES = [1, 4, 16, 64, 128, 256, 512]
#: batches up to which the batch sweep runs the wrappers' default launch shapes (small-batch rules)
SMALL_BATCH_SWEEP = 16
#: interleaved rounds in which the batch sweep times its batch-1 rows (tags "batch1-round<i>"; odd,
#: so that a median row exists)
BATCH1_ROUNDS = 5
#: batches at which both launch forms of the one-token replay steps are timed (tag "fused")
FUSED_BATCHES = [1, 2, 4, 8, 16, 32]
LS = [4, 8, 16, 32, 64]
DRAFT_T = [1, 2, 4, 8]
READ_FMTS = ["fp32", "bf16", "fp8e4m3", "nvfp4"]
UPDATE_FMTS = ["fp32", "fp16-sr", "fp8e4m3-sr"]   # each with an NVFP4 read copy
CONV_FMTS = ["fp32", "bf16", "fp16-sr", "bf16-sr", "nvfp4"]

# A candidate value that stands for the row's window length W: ``tune`` puts W in its place. Mamba-2's
# ``window_bound`` (T > 1) takes it, as the triton-decode engine passes its window mirror there.
WINDOW = "W"

# Launch-shape candidates per kernel kind (keywords of the wrappers; a wrapper that lacks a keyword
# is tuned over the ones it has). "verify" is the non-flush kernel with T > 1 drafts, "spec_flush" the
# flush with T > 1 drafts (tuned only where an operator lists it).
TUNE_SPACE = {
    # the shapes that won (or came close) in earlier runs (``--tune-only`` rows in
    # reports/bench/tune_explore.jsonl); the wrappers' defaults are set from these rows. GDN's
    # replay wrapper picks its own launch shape (gdn/decode.py ``_replay_launch``): None = that default.
    "mamba2": {
        "conventional": dict(block_r=[16, 32], num_warps=[4, 8]),
        # 64-row blocks (fewer programs, more of the state in flight each) were tried against the
        # latency-bound flush and measured slower: 1179 µs at 4 warps, 1748 at 8, against 1001 at
        # 32 x 4 (batch 256, bench_kernels_round2d_quick.json)
        # the wrapper's rule ({}: for the fp32 flush 8 tiles per program at 168 registers) against one
        # tile per program, 32 x 4 uncapped (max_registers=0); the other shapes were measured in
        # reports/diagnostics/flush-register-cap.jsonl and mamba2-flush-tiles.jsonl
        "flush": dict(max_registers=[None, 0], fold_precision=["tf32x3"]),
        # num_warps None: the wrapper's rule (the read format's warps and, from an NVFP4 read copy, its
        # register cap, which an explicit num_warps turns off)
        "nonflush": dict(block_r=[None], num_warps=[None, 1, 2, 4], fp4_decode=["fp16", "ptx", "mma", "mma-ptx"]),
        # 8 warps faulted (docs/pitfalls.md §14). window_bound: the history held as tiles of the window's
        # positions (16 for W = 8) instead of the ring's 32 (sm_90 compile: 120 bytes of spill stack per
        # thread against 144, 1480 SASS instructions against 1568)
        "verify": dict(block_r=[64], num_warps=[4], window_bound=[None, WINDOW]),
        # the speculative flush (T > 1, on top of the fp32 flush's winner): one tile per program at the
        # wrapper's rule (None) against several tiles per program in the multi-tile flush kernel, each at
        # the rule's cap (168) and at 224 (sm_90 compiles of 8 tiles: 392 bytes of spill stack per thread
        # at 168, 40 at 224; one tile at 224 measured 1507-1516 µs against 1294-1299 at 168), each with the
        # ring's history tiles and with the window's (W = 16: one tile at 168 registers spills nothing
        # instead of 104 bytes per thread, 1912 SASS instructions against 2312); 16 tiles and 255 registers
        # since an H100 ran shared fp32 with the window's tiles at 16 tiles and 255 in 1121-1127 µs
        # against 1150-1169 for 8 at 224 (reports/diagnostics/spec-flush-tiles-caps.jsonl), now the
        # wrappers' rule with the window's tiles; 2 tiles never came close and is no longer tried
        "spec_flush": dict(tiles_per_program=[None, 4, 8, 16], max_registers=[None, 224, 255],
                           window_bound=[None, WINDOW]),
    },
    "gdn": {
        "conventional": dict(block_r=[4, 8, 16], num_warps=[1, 2, 4]),
        # fold_stages: the folds' pipeline depth (records staged ahead + 1; the rule's 8 at batch 256 beat
        # 4 by 15 % on the shared fp32 flush, reports/diagnostics/gdn-fold-stages-256.jsonl)
        "flush": dict(block_r=[None], fold_stages=[None, 6, 12]),
        # num_warps 1 with 128 rows: "mma-ptx" runs 2616 SASS instructions per 128-row program against
        # 2 x 1656 at 64 rows (the vectors' operands and the step's other work shared; sm_90,
        # kernel_resources.py --nonflush-kw), where the wrapper's rule gives 128 rows 2 warps
        "nonflush": dict(block_r=[None, 128], num_warps=[None, 1, 2, 4], fp4_decode=["fp16", "ptx", "mma", "mma-ptx"]),
        "verify": dict(block_r=[None], num_warps=[None, 4], fold_stages=[None, 4]),   # None: 64 rows x 2 warps
    },
}

# The wider space of ``--tune-only`` (an exploration run; each entry a list of spaces whose products
# are joined), from which TUNE_SPACE keeps the winners.
TUNE_SPACE_WIDE = {
    "mamba2": {
        "conventional": [dict(block_r=[16, 32], num_warps=[4, 8])],
        "flush": [dict(block_r=[16, 32], num_warps=[2, 4, 8]), dict(block_r=[64], num_warps=[8])],
        "nonflush": [dict(block_r=[None], num_warps=[1, 2, 4, 8], fp4_decode=["fp16", "ptx", "mma", "mma-ptx"])],
        "verify": [dict(block_r=[64], num_warps=[2, 4], window_bound=[None, WINDOW])],
        # 8 warps: sm_90 compiles of 8 tiles hold 221 registers and no spill uncapped, against 255 and 48
        # bytes at 4 warps (scripts/kernel_resources.py); only here, since the verify block faulted at 8
        # warps on the H200 (docs/pitfalls.md §14) and a fault ends the whole run
        "spec_flush": [dict(tiles_per_program=[None, 2, 4, 8, 16], max_registers=[None, 0, 224], num_warps=[None, 8],
                            window_bound=[None, WINDOW])],
    },
    "gdn": {
        "conventional": [dict(block_r=[4, 8, 16, 32], num_warps=[1, 2, 4, 8])],
        "flush": [dict(block_r=[None, 32], num_warps=[None, 4])],
        "nonflush": [dict(block_r=[None, 32, 128], num_warps=[None, 2, 4, 8], fp4_decode=["fp16", "ptx", "mma", "mma-ptx"])],
        "verify": [dict(block_r=[None, 32], num_warps=[None, 4])],
    },
}


# The space of ``--tune-batches`` (small-batch exploration): at batch 1-16 a step reads too little
# state to fill 132 SMs with the batch-256 row blocks (GDN's 64-row non-flush programs: 64 at batch 1),
# so smaller row blocks and fewer warps are tried. Flushes storing NVFP4 own whole heads (no row block).
TUNE_SPACE_SMALL = {
    "mamba2": {
        "conventional": [dict(block_r=[4, 8, 16], num_warps=[1, 2, 4, 8])],
        "flush": [dict(block_r=[8, 16, 32], num_warps=[1, 2, 4])],
        "nonflush": [dict(block_r=[8, 16, 32, 64], num_warps=[1, 2, 4])],
    },
    "gdn": {
        "conventional": [dict(block_r=[2, 4, 8, 16], num_warps=[1, 2, 4])],
        "flush": [dict(block_r=[8, 16, 32, 64], num_warps=[1, 2, 4])],
        "nonflush": [dict(block_r=[8, 16, 32, 64], num_warps=[1, 2, 4])],
    },
}


# Launch keywords the flush is tuned over on the shared fp32 flush only. The flush rows of the other
# formats (read and update sweeps) leave them out and run the wrappers' per-format rule (Mamba-2's
# register caps are measured per stored format, ``_flush_launch``): the fp32 flush's winner says
# nothing about them. (It once did: once the uncapped and capped fp32 flushes timed within noise,
# max_registers=0 won its tuning by 0.7 % and every format's flush row ran uncapped, NVFP4-storing
# and split ones 4-13 % slower than the rule.)
FLUSH_SHAPE_KEYWORDS = ("block_r", "num_warps", "max_registers", "fold_stages")


def format_flush_cfg(cfg: dict) -> dict:
    """The tuned fp32-flush keywords that a flush of another format takes (``FLUSH_SHAPE_KEYWORDS`` left out)."""
    return {k: v for k, v in cfg.items() if k not in FLUSH_SHAPE_KEYWORDS}


def launch_form(op, kind, B, T=1, fold_new=None, fused=None, upd="fp32", read=None) -> bool | None:
    """The launch form a replay row runs in (``fused_scores`` of the wrappers: True one launch,
    False a scores kernel then the step kernel; ``fused`` None = the wrappers' rule for the row's
    formats ``upd``, ``read``); None for a conventional step."""
    if kind == "conventional":
        return None
    flush = kind == "flush"
    fold_new = (T == 1 if fold_new is None else fold_new) if flush else False
    return kernel_launch.fused_scores_launch(op, B, state_dims(op)["Gk"], T, flush, fold_new, fused, upd, read)


def measure(op, kind, B, dev, *, upd="fp32", read=None, ring=16, W=0, T=1, fold_new=None, cfg=None,
            fused=None):
    """Time one kernel configuration over cold buffer sets; returns a result row, its bytes the bytes
    model's count of the step (``step_bytes``). ``cfg``: launch-shape keywords of the kernel wrapper
    (block_r, num_warps, ...); None = its defaults. ``fused``: the replay steps' launch form
    (``fused_scores``; None = the wrappers' rule), recorded resolved."""
    cfg = {k: v for k, v in (cfg or {}).items() if v is not None}
    nbytes = step_bytes(op, kind, B, upd, read, W, T)
    nsets = n_sets(nbytes)
    sets = [PROBLEMS[op](B, dev, upd=upd, read=read, ring=ring, W=W, T=T) for _ in range(nsets)]
    if kind == "conventional":
        launch = (lambda i: sets[i].conventional(**cfg))
    elif kind == "nonflush":
        launch = (lambda i: sets[i].replay(False, False, fused_scores=fused, **cfg))
    else:
        fn = T == 1 if fold_new is None else fold_new
        launch = (lambda i: sets[i].replay(True, fn, fused_scores=fused, **cfg))
    us, how = time_launches(launch, nsets)
    sets.clear()
    torch.cuda.empty_cache()
    return {"op": op, "kernel": kind, "batch": B, "update": upd, "read": read, "W": W, "T": T, "ring": ring,
            "cfg": cfg, "us": us, "bytes": nbytes, "GBps": nbytes / us / 1e3, "timing": how,
            "buffer_sets": nsets, "fused_scores": launch_form(op, kind, B, T, fold_new, fused, upd, read)}


# Keywords that change only how one read format is decoded: tuned only when that format is read
# (fp4_decode: the NVFP4 element decode of the non-flush step, fp16 patterns, inline PTX or tensor-core
# products from shared memory or from registers; the tuning rows time all four, and the fastest is
# what the sweeps use).
READ_FORMAT_KEYWORDS = {"fp4_decode": "nvfp4"}
NVFP4_PTX_CHECK = "nonflush-nvfp4-ptx"  # the correctness check of fp4_decode="ptx" (absent in older files)
NVFP4_MMA_CHECK = "nonflush-nvfp4-mma"  # ... and of fp4_decode="mma", both launch forms (absent in older files)
NVFP4_MMA_PTX_CHECK = "nonflush-nvfp4-mma-ptx"  # ... and of fp4_decode="mma-ptx" (absent in older files)
#: the correctness check each NVFP4 decode other than the default "fp16" needs before it is timed
#: ("fp16" is what the policy streams of ``check_correctness`` run)
FP4_DECODE_CHECKS = {"ptx": NVFP4_PTX_CHECK, "mma": NVFP4_MMA_CHECK, "mma-ptx": NVFP4_MMA_PTX_CHECK}


# The T > 1 launch keywords that choose another kernel or layout (a register cap only allocates the
# same operations differently): each combination the speculative flush or verify is tuned over is
# checked. window_bound is named without its value (the checks' window is not the timed rows').
SPEC_FLUSH_CHECKED = {"tiles_per_program": "tiles", "num_warps": "warps", "window_bound": "window"}


def _check_suffix(form: dict) -> str:
    return "".join(f"-{SPEC_FLUSH_CHECKED[k]}" + ("" if k == "window_bound" else str(v)) for k, v in form.items())


def _checked_form(cfg: dict) -> dict:
    form = {k: cfg.get(k) for k in SPEC_FLUSH_CHECKED if cfg.get(k) is not None}
    if form.get("tiles_per_program") == 1:
        del form["tiles_per_program"]
    return form


def spec_flush_check(op, cfg: dict) -> str:
    """The correctness check a speculative flush row's launch keywords ``cfg`` stand on:
    ``<op>:verify-T4-flush`` for the wrapper's own form, with ``-tiles<n>`` / ``-warps<n>`` / ``-window``
    for the others."""
    return f"{op}:verify-T4-flush" + _check_suffix(_checked_form(cfg))


def verify_check(op, cfg: dict) -> str:
    """The correctness check a verify row's launch keywords ``cfg`` stand on: ``<op>:verify-T4``, with
    ``-window`` when it held its history as the window's tiles (``window_bound``)."""
    return f"{op}:verify-T4" + _check_suffix({k: v for k, v in _checked_form(cfg).items() if k == "window_bound"})


def _check_forms(op, kind, keys=SPEC_FLUSH_CHECKED) -> list[dict]:
    """The distinct combinations of the ``keys`` keywords (not None) among the candidates of ``kind``."""
    if kind not in TUNE_SPACE[op]:
        return []
    forms = []
    for cand in tune_candidates(op, kind):
        form = {k: v for k, v in cand.items() if k in keys and v is not None}
        if form and form not in forms:
            forms.append(form)
    return forms


def spec_flush_check_forms(op) -> list[dict]:
    """The launch forms of the speculative flush that the correctness checks run besides the wrapper's
    own: every combination of SPEC_FLUSH_CHECKED keywords in TUNE_SPACE, the space a timed run tunes
    over (none for an operator that is not tuned over them; a tune-only run reports no speedup).
    ``window_bound`` comes as WINDOW: the check's own window."""
    return _check_forms(op, "spec_flush")


def verify_check_forms(op) -> list[dict]:
    """``spec_flush_check_forms`` of verify: the windowed form where TUNE_SPACE tunes over it (its
    tuned 4 warps are the wrapper's own, which the plain check runs)."""
    return _check_forms(op, "verify", keys=("window_bound",))


def tune_candidates(op, kind, wide: bool = False, read: str | None = None, small: bool = False) -> list[dict]:
    """The launch shapes ``tune`` tries for one kernel kind: the product of each candidate space,
    joined, without duplicates, keeping only keywords the wrapper has and that matter for the read
    format ``read`` (``[{}]``: its defaults). ``small``: the small-batch space (``TUNE_SPACE_SMALL``)."""
    wrapper = {"mamba2": (mamba2_conventional_step, mamba2_replay_step),
               "gdn": (gdn_conventional_step, gdn_replay_step)}[op][0 if kind == "conventional" else 1]
    have = inspect.signature(wrapper).parameters
    spaces = TUNE_SPACE_SMALL[op][kind] if small else TUNE_SPACE_WIDE[op][kind] if wide else [TUNE_SPACE[op][kind]]
    out = []
    for space in spaces:
        space = {k: v for k, v in space.items() if k in have and READ_FORMAT_KEYWORDS.get(k, read) == read}
        for combo in itertools.product(*space.values()):
            c = dict(zip(space, combo))
            if c not in out:
                out.append(c)
    return out or [{}]


def tune(op, kind, dev, rec, *, read=None, W=0, T=1, ring=16, wide=False, B=256, small=False,
         base: dict | None = None, upd: str = "fp32", failed_decodes=()) -> dict:
    """Fastest launch shape of one kernel kind at batch ``B`` (every candidate recorded, failures too;
    ``small``: over ``TUNE_SPACE_SMALL``, each candidate also at the wrappers' defaults ``{}``;
    ``base``: keywords every candidate starts from, e.g. the fp32 flush's winner under the speculative
    flush's own candidates; a candidate's None keeps the base's value, or the wrapper's rule; ``upd``:
    the stored (update) format, which a conventional step other than fp32 also tunes at the wrappers'
    defaults ``{}``, their per-format rule); ``failed_decodes``: NVFP4 decodes whose correctness check
    failed, which are not timed (a decode that computes wrong products must not win the tuning)."""
    best = None
    mkind = {"verify": "nonflush", "spec_flush": "flush"}.get(kind, kind)
    cands = tune_candidates(op, kind, wide, read, small)
    if small or (kind == "conventional" and upd != "fp32"):
        cands = [{}] + [c for c in cands if c]
    if base:
        cands = [{**base, **{k: v for k, v in c.items() if v is not None}} for c in cands]
    cands = [{k: W if v == WINDOW else v for k, v in c.items()} for c in cands]  # (the row's window)
    cands = [c for c in cands if c.get("fp4_decode") not in failed_decodes]
    for cfg in cands:
        try:
            r = measure(op, mkind, B, dev, upd=upd, read=read, W=W, T=T, ring=ring, cfg=cfg)
        except Exception as e:  # noqa: BLE001 - a shape may not compile (registers / shared memory)
            torch.cuda.empty_cache()
            rec({"op": op, "kernel": mkind, "batch": B, "update": upd, "read": read, "T": T, "cfg": cfg,
                 "error": f"{type(e).__name__}: {str(e)[:200]}"}, "tune")
            continue
        rec(r, "tune")
        if best is None or r["us"] < best[0]:
            best = (r["us"], cfg)
    return best[1] if best else {}


# ---------------------------------------------------------------------------------------------
# correctness at the real shapes
# ---------------------------------------------------------------------------------------------
def rel(a, b):
    return ((a.float().cpu() - b.float().cpu()).norm() / b.float().cpu().norm().clamp_min(1e-30)).item()


@contextlib.contextmanager
def forced_launch_form(fused: bool | None):
    """The replay wrappers' launch-form rule (``kernels/common/launch.py``) forced to one launch form
    for the duration (None: the rule as it is)."""
    keep = kernel_launch.FORCED_LAUNCH_FORM
    if fused is not None:
        kernel_launch.FORCED_LAUNCH_FORM = fused
    try:
        yield
    finally:
        kernel_launch.FORCED_LAUNCH_FORM = keep


@contextlib.contextmanager
def large_batch_launch_rules(on: bool = True):
    """Mamba-2's large-batch launch rules at any batch for the duration: the correctness streams run
    at batch 2, where the small-batch rule (``SMALL_BATCH_HEAD_MATRICES``) would pick other flush
    shapes than the timed batch-256 rows, and only the large-batch flush runs register-capped
    (``_flush_launch``)."""
    from precision_lab.kernels.mamba2 import decode as m2

    keep = m2.SMALL_BATCH_HEAD_MATRICES
    if on:
        m2.SMALL_BATCH_HEAD_MATRICES = 0
    try:
        yield
    finally:
        m2.SMALL_BATCH_HEAD_MATRICES = keep


def check_correctness(dev, steps=20, ops=("mamba2", "gdn")) -> dict:
    """Every kernel family at the real shapes (batch 2): whole streams driven by the ``triton-decode``
    engine against the torch ``decode`` engine on the CPU, and single verify/flush steps against the
    step references. ReplaySSM streams run in both launch forms of their one-token steps: the
    two-launch form under ``<op>:<policy>`` (what the large-batch rows time), the one-launch form
    under ``<op>:<policy>:one-launch``; Mamba-2's also with the large-batch launch rules (its
    register-capped flush) under ``mamba2:<policy>:large-batch-launch``."""
    from precision_lab.layer import GDNInputs, Mamba2Inputs, run_layer
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
            forms = [("", False, False), (":one-launch", True, False)] if pol.is_replay else [("", None, False)]
            if pol.is_replay and op == "mamba2":  # the batch-256 flush shapes and register caps
                forms.append((":large-batch-launch", False, True))
            cls, args, init = (Mamba2Inputs, margs, S0) if op == "mamba2" else (GDNInputs, gargs, G0)
            yr, ref = run_layer(cls(*args), pol, engine="decode", initial_state=init)
            for suffix, fused, large in forms:
                with forced_launch_form(fused), large_batch_launch_rules(large):
                    y, st = run_layer(cls(*(a.to(dev) for a in args)), pol, engine="triton-decode",
                                      initial_state=init.to(dev))
                w, wr = st.state_writes, ref.state_writes
                tol = 1e-5 if pol.update == "fp32" and pol.read == "fp32" else 3e-3
                errs = {"y": rel(y, yr), "update": rel(st.state.update, ref.state.update),
                        "read": rel(st.state.read, ref.state.read)}
                out[f"{op}:{pol.short_str()}{suffix}"] = {"rel_err": errs, "writes": [w, wr], "tol": tol,
                                                          "ok": bool(all(v < tol for v in errs.values()) and w == wr
                                                                     and not torch.isnan(y).any())}
    out.update(check_drafts(dev, ops))
    # the non-flush step's inline-PTX and tensor-core NVFP4 decodes (tuning candidates, ``fp4_decode``)
    # against the default fp16-pattern decode that the streams above checked: the same products summed
    # in another order, so the bf16 outputs differ by rounding only; the tensor-core decodes in both
    # launch forms (the batch-256 rows run the two-launch form)
    for op in ops:
        prob, y16 = nvfp4_decode_problem(op, dev)
        e = rel(prob.replay(False, False, fp4_decode="ptx"), y16)
        out[f"{op}:{NVFP4_PTX_CHECK}"] = {"rel_err": {"y": e}, "tol": 5e-3, "ok": e < 5e-3}
        for decode in ("mma", "mma-ptx"):
            errs = nvfp4_decode_errors(prob, y16, decode)
            out[f"{op}:{FP4_DECODE_CHECKS[decode]}"] = {"rel_err": errs, "tol": 5e-3, "ok": max(errs.values()) < 5e-3}
    return out


def nvfp4_decode_problem(op, dev):
    """The decode checks' problem (batch 2, W = 5, fp32 checkpoint, NVFP4 read copy) and the bf16
    outputs of its output-only step with the default "fp16" decode, as fp32."""
    prob = PROBLEMS[op](2, dev, upd="fp32", read="nvfp4", ring=16, W=5, T=1)
    return prob, prob.replay(False, False, fp4_decode="fp16").float().clone()  # (writes only y and the record)


def nvfp4_decode_errors(prob, y16, decode) -> dict[str, float]:
    """Relative error of the output-only step's outputs with ``decode`` against ``y16`` (the "fp16"
    decode's, ``nvfp4_decode_problem``), in each launch form."""
    return {f"y_{name}": rel(prob.replay(False, False, fp4_decode=decode, fused_scores=fused), y16)
            for name, fused in (("two_launch", False), ("one_launch", True))}


def check_drafts(dev, ops=("mamba2", "gdn")) -> dict:
    """The T > 1 steps at the real shapes (batch 2): speculative verify (T = 4 drafts over a window of 5)
    and the speculative flush against the step references; Mamba-2's verify and speculative flush also
    in each launch form a timed run tunes them over (the multi-tile kernel; the history as the window's
    tiles, over a ring of 32 so that they are narrower than the ring's)."""
    from precision_lab.kernels.gdn.decode_reference import gdn_replay_step_ref
    from precision_lab.kernels.mamba2.decode_reference import mamba2_replay_step_ref

    out = {}
    Hk, Hv = GDN["Hk"], GDN["Hv"]
    for op in ops:
        forms = ([(False, {}), (True, {})] + [(False, form) for form in verify_check_forms(op)]
                 + [(True, form) for form in spec_flush_check_forms(op)])
        for flush, form in forms:
            cfg = {k: 5 if v == WINDOW else v for k, v in form.items()}
            prob = PROBLEMS[op](2, dev, upd="fp32", read="nvfp4", ring=32 if "window_bound" in cfg else 16, W=5, T=4)
            # decoded copies and window in logical order for the reference
            upd_f = prob.upd.data.float().cpu().clone()  # (clone: the flush updates the pool in place)
            rd_f = packed_to(prob.read, "cpu").dequantize()
            if op == "mamba2":
                hist = {"u": prob.rec.u[:, :5].cpu().clone(), "b": prob.rec.b[:, :5].cpu().clone(),
                        "a": prob.rec.a[:, :5].cpu().clone()}
                y = prob.replay(flush, False, **cfg)
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
            name = spec_flush_check(op, cfg) if flush else verify_check(op, cfg)
            out[name] = {"rel_err": {"y": e}, "tol": 5e-3, "ok": e < 5e-3}
    return out


# ---------------------------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------------------------
def run(*, output, quick: bool = False, ops=("mamba2", "gdn"), tune_only: bool = False, log=None,
        tune_batches=None) -> DecodeKernelsResult:
    """The whole benchmark on the current CUDA device; a per-operator checkpoint of the result is
    written to ``output`` as each operator finishes. Returns the result. ``tune_batches``: only the
    small-batch launch-shape exploration (``TUNE_SPACE_SMALL``) at those batches (a tune-only run)."""
    dev = "cuda"
    t_start = time.time()
    tune_only = bool(tune_only or tune_batches)
    settings = {"quick": bool(quick), "ops": list(ops), "tune_only": tune_only}
    if tune_batches:
        settings["tune_batches"] = list(tune_batches)
    run_provenance(smoke=False, settings=settings)  # no commit to record: stop before spending device time
    # (the checks also warm the GPU up before the ceiling is measured; a tune-only run reports no
    # speedups and skips them)
    checks = {} if tune_only else {k: KernelCheck(**v) for k, v in check_correctness(dev, ops=ops).items()}
    ceiling = copy_ceiling(dev)
    print(f"memcpy ceiling: {ceiling.GBps:.0f} GB/s", flush=True)
    bad = [k for k, v in checks.items() if not v.ok]
    print(f"correctness: {len(checks) - len(bad)}/{len(checks)} ok {bad}", flush=True)
    for k, v in checks.items():
        print(f"  {k:32s} {'ok ' if v.ok else 'BAD'} {v.rel_err}", flush=True)
    rows: list[KernelRow] = []

    def result(partial: bool = False) -> DecodeKernelsResult:
        """The result as it stands (``partial``: a per-operator checkpoint, no summary yet)."""
        timed_fla = any(r.kernel == "fla" and r.us is not None for r in rows)
        return DecodeKernelsResult(
            provenance=run_provenance(smoke=False, settings=settings, seconds=round(time.time() - t_start, 1)),
            ceiling=ceiling, peers=fla_versions() if timed_fla else {}, correctness=checks, rows=rows,
            partial=partial)

    log_file = open(log, "a") if log else None  # noqa: SIM115 - one line per row, survives a kill

    def rec(fields: dict, tag: str) -> None:
        row = KernelRow(**fields, tag=tag)
        row.pct_ceiling = None if row.GBps is None else 100 * row.GBps / ceiling.GBps
        rows.append(row)
        if log_file:
            log_file.write(json.dumps(dataclasses.asdict(row)) + "\n")
            log_file.flush()
        if row.us is not None:
            print(f"{tag:10s} {row.op:6s} {row.kernel:12s} B={row.batch:4d} {str(row.update):8s} {str(row.read):8s} "
                  f"W={row.W} T={row.T} {row.us:9.1f} us {row.GBps:7.0f} GB/s ({row.pct_ceiling:.0f}%)", flush=True)
        else:
            print(f"{tag} {row}", flush=True)

    batches = [1, 16, 256] if quick else BATCHES
    Ls = [16] if quick else LS
    for op in ops:
        Lmid = lambda L: (L - 2) // 2  # noqa: E731
        if tune_batches:
            for B in tune_batches:
                tune(op, "conventional", dev, rec, B=B, small=True)
                tune(op, "flush", dev, rec, W=15, B=B, small=True)
                for rf in ("fp32", "nvfp4"):
                    tune(op, "nonflush", dev, rec, read=rf, W=Lmid(16), B=B, small=True)
            continue
        # Hand tuning of the launch shapes at batch 256 (no autotune: the kernels update state in
        # place). Every candidate is recorded (tag "tune"); the sweeps below use the fastest.
        wide = tune_only
        best = {"conventional": tune(op, "conventional", dev, rec, wide=wide),
                "flush": tune(op, "flush", dev, rec, W=15, wide=wide)}
        failed = {d for d, c in FP4_DECODE_CHECKS.items() if f"{op}:{c}" in checks and not checks[f"{op}:{c}"].ok}
        for rf in READ_FMTS:
            best["nonflush", rf] = tune(op, "nonflush", dev, rec, read=rf, W=Lmid(16), wide=wide,
                                        failed_decodes=failed)
        for T in ([1, 8] if quick or wide else DRAFT_T):
            if T > 1:
                ring = 1 << (16 + T - 1).bit_length()
                best["verify", T] = tune(op, "verify", dev, rec, W=8, T=T, ring=ring, wide=wide)
                if "spec_flush" in TUNE_SPACE[op]:
                    best["spec_flush", T] = tune(op, "spec_flush", dev, rec, W=16, T=T, ring=ring, base=best["flush"],
                                                 wide=wide)
        print(f"{op}: best launch shapes {best}", flush=True)
        if tune_only:
            continue
        # batch sweep: conventional fp32, ReplaySSM shared:fp32 at L = 16, fla. Up to batch
        # SMALL_BATCH_SWEEP the kernels run at the wrappers' defaults, whose small-batch rules were set
        # from --tune-batches rows (the batch-256 winners can be far off there); above it, the winners.
        for B in batches:
            at = (lambda cfg, B=B: {} if B <= SMALL_BATCH_SWEEP else cfg)  # noqa: E731
            timed = {"conventional": dict(cfg=at(best["conventional"])),
                     "nonflush": dict(W=Lmid(16), cfg=at(best["nonflush", "fp32"])),
                     "flush": dict(W=15, cfg=at(best["flush"]))}
            if B == 1:
                # The batch-1 target is a ratio of launches of about 4 µs, whose spread from one
                # measurement to the next (several %, docs/design.md §11.5) is as large as the margins
                # it has been decided by: its rows are timed in BATCH1_ROUNDS interleaved rounds (the
                # order reversed every other round), every round's rows kept (tag "batch1-round<i>"),
                # and each kernel's row of median time stands as its "batch" row. The summary gives
                # the ratio's spread over the rounds.
                rounds = {kind: [] for kind in timed}
                for i in range(BATCH1_ROUNDS):
                    for kind in (list(timed) if i % 2 == 0 else list(timed)[::-1]):
                        row = measure(op, kind, B, dev, **timed[kind])
                        rec(row, f"batch1-round{i}")
                        rounds[kind].append(row)
                for kind in timed:
                    rec(sorted(rounds[kind], key=lambda r: r["us"])[BATCH1_ROUNDS // 2], "batch")
            else:
                for kind, kw in timed.items():
                    rec(measure(op, kind, B, dev, **kw), "batch")
            rec(fla_peer(op, B, dev), "batch")
        # the one-token replay steps in both launch forms at small batch, beside the conventional step,
        # at the wrappers' default launch shapes (what the triton-decode engine launches; the batch-size
        # rules that pick the form, kernels/common/launch.py, were set from rows like these)
        for B in ([1, 4, 8, 16] if quick else FUSED_BATCHES):  # (8: where several rules switch form)
            rec(measure(op, "conventional", B, dev), "fused")
            for fused in (True, False):
                rec(measure(op, "nonflush", B, dev, W=Lmid(16), fused=fused), "fused")
                rec(measure(op, "flush", B, dev, W=15, fused=fused), "fused")
                # the output-only step from an NVFP4 read copy: what a split policy's non-flush steps
                # run (the rule above picks its form too)
                rec(measure(op, "nonflush", B, dev, read="nvfp4", W=Lmid(16), fused=fused), "fused-nvfp4")
                # ... and the recommended split policy's flush (fp16-SR checkpoint, NVFP4 read copy)
                rec(measure(op, "flush", B, dev, upd="fp16-sr", read="nvfp4", W=15, fused=fused), "fused-nvfp4")
        # L sweep (batch 256, shared:fp32)
        for L in Ls:
            ring = 1 << (L - 1).bit_length()
            rec(measure(op, "nonflush", 256, dev, W=Lmid(L), ring=ring, cfg=best["nonflush", "fp32"]), f"L{L}")
            rec(measure(op, "flush", 256, dev, W=L - 1, ring=ring, cfg=best["flush"]), f"L{L}")
        # draft sweep: history block 16, L = 16 + T; verify at W = 8, speculative flush folds 16
        for T in ([1, 8] if quick else DRAFT_T):
            ring = 1 << (16 + T - 1).bit_length()
            rec(measure(op, "nonflush", 256, dev, W=8, T=T, ring=ring,
                        cfg=best["nonflush", "fp32"] if T == 1 else best["verify", T]), f"T{T}")
            rec(measure(op, "flush", 256, dev, W=16, T=T, ring=ring, fold_new=False,
                        cfg=best.get(("spec_flush", T), best["flush"])), f"T{T}")
        # read formats (split, fp32 update) and update formats (NVFP4 read), batch 256, L = 16; their
        # flushes at the wrappers' per-format launch rule (format_flush_cfg)
        for rf in READ_FMTS:
            rec(measure(op, "nonflush", 256, dev, upd="fp32", read=rf, W=Lmid(16), cfg=best["nonflush", rf]), "read")
            rec(measure(op, "flush", 256, dev, upd="fp32", read=rf, W=15, cfg=format_flush_cfg(best["flush"])), "read")
        for uf in UPDATE_FMTS:
            rec(measure(op, "flush", 256, dev, upd=uf, read="nvfp4", W=15, cfg=format_flush_cfg(best["flush"])), "update")
        for cf in CONV_FMTS:
            # Each stored format's conventional step at its own fastest shape, the baseline of its
            # flush target: fp32 at its tuned shape; the 16-bit and FP8 states tuned over the same
            # shapes and the wrappers' per-format rule (rows tagged "tune" with their update format;
            # fp32's shape had left them issue-bound). An NVFP4 state owns whole heads and takes the
            # wrapper's launch for them (a tuned 1-warp row block would hold a whole head in one warp).
            if cf == "nvfp4":
                cfg = None
            elif cf == "fp32":
                cfg = best["conventional"]
            else:
                cfg = tune(op, "conventional", dev, rec, upd=cf)
            rec(measure(op, "conventional", 256, dev, upd=cf, cfg=cfg), "convfmt")
        # a checkpoint after each operator: a run cut short still leaves a file that resummarise reads
        dump(result(partial=True), output)
    if tune_only:
        return result(partial=True)
    again = copy_ceiling(dev)
    print(f"memcpy ceiling (end of run): {again.GBps:.0f} GB/s", flush=True)
    if again.GBps > ceiling.GBps:
        ceiling = again
        for r in rows:
            if r.GBps is not None:
                r.pct_ceiling = 100 * r.GBps / ceiling.GBps
    out = result()
    out.summary = summarise(rows, checks, ceiling.GBps)
    return out


def _find(rows: list[KernelRow], **kw) -> KernelRow | None:
    for r in rows:
        if r.us is not None and all(getattr(r, k) == v for k, v in kw.items()):
            return r
    return None


def per_token_us(nonflush_us: float, flush_us: float, L: int = 16) -> float:
    """A ReplaySSM token step amortised over its window: L − 1 non-flush steps and one flush."""
    return ((L - 1) * nonflush_us + flush_us) / L


def _round_speedups(rows: list[KernelRow], op: str, B: int) -> list[float]:
    """Conventional µs ÷ ReplaySSM amortised µs (L = 16) in each interleaved round of the batch-``B``
    rows (tags "batch1-round<i>"), in round order; [] where the rows were timed once."""
    tags = {r.tag for r in rows if r.op == op and r.batch == B and r.tag.startswith("batch1-round")}
    out = []
    for tag in sorted(tags, key=lambda t: int(t.removeprefix("batch1-round"))):
        c, nf, fl = (_find(rows, op=op, tag=tag, kernel=k, batch=B) for k in ("conventional", "nonflush", "flush"))
        if c and nf and fl:
            out.append(c.us / per_token_us(nf.us, fl.us))
    return out


def _at_ceiling(ceiling_GBps: float, *weighted) -> float | None:
    """Σ w · (µs the row's counted bytes take at ``ceiling_GBps``) over (w, row) pairs; None if a row
    is missing or has no byte count (a byte bound is never guessed)."""
    if any(r is None or not r.bytes for _, r in weighted):
        return None
    return sum(w * r.bytes / (ceiling_GBps * 1e3) for w, r in weighted)


def _ratio(num, den):
    return num / den if num is not None and den else None


def summarise(rows: list[KernelRow], checks: dict[str, KernelCheck], ceiling_GBps: float) -> dict[str, OperatorSummary]:
    """Amortised window costs and the targets per operator; a speedup only where the kernels passed."""
    def ok(name):
        c = checks.get(name)
        return bool(c and c.ok)

    def ok_form(name, *rows_):
        """The check of the launch form every row ran in passed (rows without the field: ``name``)."""
        return all(ok(name + (":one-launch" if r.fused_scores else "")) for r in rows_)

    out = {}
    for op in ("mamba2", "gdn"):
        ok_conv, ok_replay, ok_nvfp4 = ok(f"{op}:fp32"), ok(f"{op}:shared:fp32"), ok(f"{op}:split:fp32/nvfp4")
        # the NVFP4 read row needs the check of the decode it was timed with
        nf4 = _find(rows, op=op, tag="read", kernel="nonflush", read="nvfp4")
        decode = (nf4.cfg or {}).get("fp4_decode", "fp16") if nf4 else "fp16"
        if decode in FP4_DECODE_CHECKS and f"{op}:{FP4_DECODE_CHECKS[decode]}" in checks:
            ok_nvfp4 = ok_nvfp4 and ok(f"{op}:{FP4_DECODE_CHECKS[decode]}")
        ok_flush = ok(f"{op}:verify-T4-flush")
        batch, windows, drafts, read, update, conv = {}, {}, {}, {}, {}, {}
        for B in BATCHES:
            c = _find(rows, op=op, tag="batch", kernel="conventional", batch=B)
            nf = _find(rows, op=op, tag="batch", kernel="nonflush", batch=B)
            fl = _find(rows, op=op, tag="batch", kernel="flush", batch=B)
            fla = _find(rows, op=op, tag="batch", kernel="fla", batch=B)
            if not (c and nf and fl):
                continue
            amort = per_token_us(nf.us, fl.us)
            e = BatchPoint(conventional_us=c.us, conventional_pct_ceiling=c.pct_ceiling, nonflush_us=nf.us,
                           flush_us=fl.us, replay_amortised_us=amort, fla_us=fla.us if fla else None)
            if ok_conv and ok_form(f"{op}:shared:fp32", nf, fl):
                e.speedup_vs_conventional = c.us / amort
                if fla:
                    e.speedup_vs_fla = fla.us / amort
            batch[B] = e
        forms = {}
        for B in FUSED_BATCHES:
            c = _find(rows, op=op, tag="fused", kernel="conventional", batch=B)
            nf1, nf2, fl1, fl2 = (_find(rows, op=op, tag="fused", kernel=k, batch=B, fused_scores=f)
                                  for k, f in (("nonflush", True), ("nonflush", False), ("flush", True),
                                               ("flush", False)))
            if not (c and nf1 and nf2 and fl1 and fl2):
                continue
            forms[B] = LaunchFormPoint(
                conventional_us=c.us, nonflush_one_launch_us=nf1.us, nonflush_two_launch_us=nf2.us,
                flush_one_launch_us=fl1.us, flush_two_launch_us=fl2.us,
                nonflush_one_launch_vs_conventional=c.us / nf1.us if ok_conv and ok_form(f"{op}:shared:fp32", nf1)
                else None,
                nonflush_two_launch_vs_conventional=c.us / nf2.us if ok_conv and ok_form(f"{op}:shared:fp32", nf2)
                else None)
        c256 = _find(rows, op=op, tag="batch", kernel="conventional", batch=256)
        for L in LS:
            nf = _find(rows, op=op, tag=f"L{L}", kernel="nonflush")
            fl = _find(rows, op=op, tag=f"L{L}", kernel="flush")
            if nf and fl and c256:
                amort = per_token_us(nf.us, fl.us, L)
                windows[L] = WindowPoint(nonflush_us=nf.us, flush_us=fl.us, replay_amortised_us=amort,
                                         speedup_vs_conventional=c256.us / amort if ok_conv and ok_replay else None,
                                         bound=2 * L / (L + 1))
        for T in DRAFT_T:
            v = _find(rows, op=op, tag=f"T{T}", kernel="nonflush")
            f = _find(rows, op=op, tag=f"T{T}", kernel="flush")
            if v and f and c256:
                # a verify or speculative flush timed in another launch form stands on that form's check too
                ok_round = ok_flush and ok(verify_check(op, v.cfg or {})) and ok(spec_flush_check(op, f.cfg or {}))
                n_nf = 16 // T - 1  # rounds between flushes with every draft accepted (history block 16)
                per_round = (n_nf * v.us + f.us) / (n_nf + 1)
                drafts[T] = DraftPoint(verify_us=v.us, spec_flush_us=f.us, per_round_amortised_us=per_round,
                                       rounds_per_flush=n_nf + 1,
                                       ratio_to_one_conventional_step=per_round / c256.us if ok_round and ok_conv
                                       else None,
                                       snapshot_baseline_estimate_us=T * c256.us)
        for rf in READ_FMTS:
            nf = _find(rows, op=op, tag="read", kernel="nonflush", read=rf)
            fl = _find(rows, op=op, tag="read", kernel="flush", read=rf)
            if nf and fl:
                read[rf] = ReadFormatPoint(nonflush_us=nf.us, nonflush_GBps=nf.GBps, flush_us=fl.us,
                                           replay_amortised_us=per_token_us(nf.us, fl.us))
        nvfp4_ratio = None
        if "fp32" in read and "nvfp4" in read and ok_nvfp4:
            nvfp4_ratio = read["fp32"].nonflush_us / read["nvfp4"].nonflush_us
        update_rows = {uf: _find(rows, op=op, tag="update", kernel="flush", update=uf) for uf in UPDATE_FMTS}
        for uf, fl in update_rows.items():
            if fl:
                update[uf] = UpdateFormatPoint(flush_us=fl.us, GBps=fl.GBps)
        for cf in CONV_FMTS:
            r = _find(rows, op=op, tag="convfmt", kernel="conventional", update=cf)
            if r:
                conv[cf] = StorageFormatPoint(us=r.us, GBps=r.GBps, pct_ceiling=r.pct_ceiling)
        b256, t8 = batch.get(256), drafts.get(8)
        ceil = max(ceiling_GBps, REFERENCE_COPY_GBPS)

        # the rows each target is made of (batch 256 unless stated)
        nf256, fl256 = (_find(rows, op=op, tag="batch", kernel=k, batch=256) for k in ("nonflush", "flush"))
        fla256 = _find(rows, op=op, tag="batch", kernel="fla", batch=256)
        nf32 = _find(rows, op=op, tag="read", kernel="nonflush", read="fp32")
        v8, f8 = (_find(rows, op=op, tag="T8", kernel=k) for k in ("nonflush", "flush"))
        replay_at_ceiling = _at_ceiling(ceil, (15 / 16, nf256), (1 / 16, fl256))
        # target name: (measured value, threshold, byte bound)
        targets = {
            "conventional_pct_ceiling": (100 * c256.GBps / ceil if c256 else None, 90.0, None),
            "replay_vs_conventional": (b256 and b256.speedup_vs_conventional, 1.8 if op == "mamba2" else 1.75,
                                       _ratio(c256 and c256.us, replay_at_ceiling)),
            "replay_vs_fla": (b256 and b256.speedup_vs_fla, 2.0 if op == "mamba2" else 2.3,
                              _ratio(fla256 and fla256.us, replay_at_ceiling)),
            "nvfp4_vs_fp32_read_nonflush": (nvfp4_ratio, 5.0, _ratio(nf32 and nf32.us, _at_ceiling(ceil, (1, nf4)))),
            # verify of T = 8 drafts plus the amortised speculative flush: at most 1.3 conventional steps
            "verify_T8_vs_conventional": (
                t8 and t8.ratio_to_one_conventional_step, 1.3,
                _ratio(t8 and _at_ceiling(ceil, ((t8.rounds_per_flush - 1) / t8.rounds_per_flush, v8),
                                        (1 / t8.rounds_per_flush, f8)), c256 and c256.us)),
        }
        # the split policies with an SR checkpoint and an NVFP4 read copy, per token amortised over
        # L = 16 (15 non-flush steps from the NVFP4 read copy + 1 flush), against the fp32 conventional step
        for uf in ("fp16-sr", "fp8e4m3-sr"):
            fl = update.get(uf)
            per_token = per_token_us(nf4.us, fl.flush_us) if nf4 and fl else None
            targets[f"split_{uf}_nvfp4_vs_conventional"] = (
                c256.us / per_token if per_token and c256 and ok_conv and ok_nvfp4 and ok(f"{op}:split:{uf}/nvfp4")
                else None, 3.0, _ratio(c256 and c256.us, _at_ceiling(ceil, (15 / 16, nf4), (1 / 16, update_rows.get(uf)))))
        targets["nvfp4_nonflush_pct_byte_bound"] = (100 * nf4.GBps / ceil if nf4 and ok_nvfp4 else None, 80.0, None)
        fl16, c16 = update.get("fp16-sr"), conv.get("fp16-sr")
        targets["fp16sr_flush_vs_fp16sr_conventional"] = (
            fl16.flush_us / c16.us if fl16 and c16 and ok(f"{op}:split:fp16-sr/nvfp4") and ok(f"{op}:conventional:fp16-sr")
            else None, 1.3, _ratio(_at_ceiling(ceil, (1, update_rows.get("fp16-sr"))), c16 and c16.us))
        b1 = batch.get(1)
        targets["batch1_replay_vs_conventional"] = (b1 and b1.speedup_vs_conventional, 1.0, None)
        spread = {"batch1_replay_vs_conventional": _round_speedups(rows, op, 1)
                  if b1 and b1.speedup_vs_conventional is not None else None}
        at_most = ("verify_T8_vs_conventional", "fp16sr_flush_vs_fp16sr_conventional")
        out[op] = OperatorSummary(
            batch=batch, L=windows, drafts=drafts, read=read, update=update, conventional_formats=conv,
            nvfp4_vs_fp32_read_nonflush=nvfp4_ratio, ceiling_for_targets_GBps=ceil, launch_forms=forms,
            targets={k: Target(value=v, target=t, met=None if v is None else (v <= t if k in at_most else v >= t),
                               byte_bound=bb, spread=[min(spread[k]), max(spread[k])] if spread.get(k) else None)
                     for k, (v, t, bb) in targets.items()})
    return out


def merge(parts: list[DecodeKernelsResult]) -> DecodeKernelsResult:
    """One result from runs split by operator (``--ops``): rows and checks joined, the highest
    ceiling kept, the first part's provenance standing for the merge (each part's own kept under
    ``merged_from``)."""
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    prov = dataclasses.replace(first.provenance, command=None, seconds=None,
                               merged_from=[p.provenance for p in parts])
    peers: dict = {}
    for p in parts:
        peers.update(p.peers)
    return DecodeKernelsResult(
        provenance=prov, ceiling=max((p.ceiling for p in parts), key=lambda c: c.GBps), peers=peers,
        correctness={k: v for p in parts for k, v in p.correctness.items()}, rows=[r for p in parts for r in p.rows])


def row_bytes(r: KernelRow) -> float:
    """The bytes model's count for a measured row, from the row's own fields (``step_bytes``, what
    ``measure`` counted when the row was timed under the current model)."""
    return step_bytes(r.op, r.kernel, r.batch, r.update or "fp32", r.read, r.W, r.T or 1)


def recount_bytes(res: DecodeKernelsResult) -> int:
    """Recount every timed row's bytes with the current bytes model (``row_bytes``) and rescale its
    GB/s and % of ceiling by the same factor; the times are untouched. Returns how many rows changed
    and notes the recount in the provenance. For result files written under an earlier model."""
    changed = 0
    for r in res.rows:
        if r.us is None or not r.bytes:
            continue
        nb = row_bytes(r)
        if abs(nb - r.bytes) > 1e-9 * r.bytes:
            f = nb / r.bytes
            r.bytes = nb
            r.GBps = None if r.GBps is None else r.GBps * f
            r.pct_ceiling = None if r.pct_ceiling is None else r.pct_ceiling * f
            changed += 1
    res.provenance.notes.append(f"bytes recounted with the current bytes model ({changed} rows changed; "
                                "times as measured): " + " ".join(sys.argv))
    return changed


def resummarise(paths, output, recount: bool = False) -> DecodeKernelsResult:
    """Recompute the summary from the measured rows of one or more result files (several: merged),
    write it to ``output`` with the plots; returns the result. ``recount``: the rows' bytes first
    recounted with the current bytes model (``recount_bytes``)."""
    from .plots import decode_kernel_plots

    res = merge([load(json.loads(Path(f).read_text())) for f in paths])
    if recount:
        print(f"bytes recounted: {recount_bytes(res)} rows changed", flush=True)
    res.summary = summarise(res.rows, res.correctness, res.ceiling.GBps)
    res.partial = False
    res.summary_recomputed_by = " ".join(sys.argv)
    dump(res, output)
    decode_kernel_plots(res, Path(output).parent)
    return res


def main(*, output, quick=False, ops=("mamba2", "gdn"), tune_only=False, plots_from=None, log=None,
         resummarise_from=None, tune_batches=None, recount=False) -> int:
    """What ``scripts/bench_kernels.py`` runs (its options, one keyword each); returns the exit status."""
    from .plots import decode_kernel_plots
    from .tables import decode_kernel_tables

    out = Path(output)
    if resummarise_from:
        print(decode_kernel_tables(resummarise(resummarise_from, out, recount=recount)))
        return 0
    if plots_from:
        res = load(json.loads(Path(plots_from).read_text()))
        print(decode_kernel_plots(res, out.parent))
        print(decode_kernel_tables(res))
        return 0
    if not torch.cuda.is_available():
        print("bench_kernels needs a CUDA GPU", file=sys.stderr)
        return 2
    res = run(output=out, quick=quick, ops=ops, tune_only=tune_only, log=log, tune_batches=tune_batches)
    dump(res, out)
    if tune_only or tune_batches:
        return 0
    try:
        decode_kernel_plots(res, out.parent)
    except Exception as e:  # noqa: BLE001
        print(f"plots failed: {e}")
    print(decode_kernel_tables(res))
    return 0
