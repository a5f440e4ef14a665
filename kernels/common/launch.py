"""Host-side launch helpers every kernel wrapper uses."""
from __future__ import annotations

import os

import torch
import triton

from .formats import FMT_NVFP4


def pow2(n: int) -> int:
    """The next power of two ≥ n (≥ 1): block sizes of a launch."""
    return triton.next_power_of_2(max(int(n), 1))


def as_i64(v, B: int, device) -> torch.Tensor:
    """A per-entry int64 counter [B] (SR sequence ids, write events) from a tensor or a scalar."""
    return torch.as_tensor(v, dtype=torch.int64, device=device).expand(B).contiguous()


def warps_for_tile(br: int, bc: int) -> int:
    """Warps of a program holding a [br, bc] fp32 tile when the caller gives a block size but no warps."""
    return 8 if br * bc >= 8192 else 4


def check_nvfp4_cols(C: int, *fmts: int) -> None:
    """Refuse an NVFP4 state whose last axis does not split into its blocks of 16."""
    if FMT_NVFP4 in fmts and C % 16:
        raise ValueError(f"NVFP4 scales blocks of 16 along the last state axis, which has {C} elements "
                         "(not a multiple of 16)")


#: how the non-flush step may multiply an NVFP4 read copy with its vectors (``read_state_dot`` in
#: ``state_io.py``): fp16 bit patterns and fp32 products, the inline-PTX E4M3 conversion (compiled
#: kernels only), one tensor-core product with fp16 operands (through shared memory), or the same
#: products issued from the registers the codes were loaded into (inline PTX, compiled kernels only)
FP4_DECODES = ("fp16", "ptx", "mma", "mma-ptx")


def check_fp4_decode(name: str) -> None:
    if name not in FP4_DECODES:
        raise ValueError(f"fp4_decode must be one of {FP4_DECODES}, got {name!r}")


def resolve_fp4_decode(name: str, pool, block_r: int, num_warps: int) -> str:
    """The decode a kernel compiles for ``name``, this read copy (a ``PackedState``) and its launch
    (``block_r`` rows per program over ``num_warps`` warps). "mma-ptx" hands the registers of 16-byte
    code loads to the tensor cores as they are, which holds only where the compiler loads four words
    per thread along eight-row slabs per warp: rows of exactly 128 elements (64 bytes) that it can
    see are 16-byte aligned (a 16-byte aligned pool and slot stride; the block scales are read two
    bytes at a time, so their pool and slot stride must be even), and a row block of whole m-tiles
    with at least 16 rows per warp (fewer, and it spreads the words thinner). Elsewhere it runs as
    "mma", the same products through shared memory."""
    check_fp4_decode(name)
    if name != "mma-ptx":
        return name
    aligned = pool.data.data_ptr() % 16 == 0 and pool.data.stride(0) % 16 == 0
    sc = pool.scale  # None where the pool is not NVFP4 (the decode is then unused)
    aligned = aligned and (sc is None or sc.data_ptr() % 2 == 0 and sc.stride(0) % 2 == 0)
    fits = block_r % 16 == 0 and block_r >= 16 * num_warps
    return name if pool.C == 128 and aligned and fits else "mma"


#: longest window of the window-parallel scans (their in-register triangular solve is BLOCK_W wide)
MAX_SCAN_WINDOW = 64


def replay_scan_buffers(out, like: torch.Tensor, state_shape, u0: torch.Tensor, r0: torch.Tensor, *, split: bool,
                        L: int):
    """(output, update checkpoint, read copy) of a window-parallel scan: ``out`` if given, else new
    buffers (the output like ``like``, fp32 checkpoints of ``state_shape``; the read copy is the
    update checkpoint unless ``split``). The kernel works in the checkpoint buffers, so they start
    as copies of ``u0`` / ``r0``."""
    if not 1 <= L <= MAX_SCAN_WINDOW:
        raise ValueError(f"the Triton scan supports 1 <= L <= {MAX_SCAN_WINDOW}, got L={L}")
    if out is not None:
        y, u, r = out
    else:
        y = torch.empty_like(like)
        u = torch.empty(state_shape, device=like.device, dtype=torch.float32)
        r = torch.empty_like(u) if split else u
    r = r if split else u
    u.copy_(u0)
    if split:
        r.copy_(r0)
    return y, u, r


# The ReplaySSM T = 1 step in one launch or two (docs/design.md §7). Two launches: a scores kernel per
# (group or key head, batch entry) writes the new token's B/k record and the window's scores once,
# then the step kernel reads them — the fast form at large batch, where every head and row block
# would otherwise recompute the same scores. One launch ("fused scores"): every step program computes
# the scores it needs itself — at small batch the second launch costs more than the recomputation.
# The rule counts score rows — (batch entry, group or key head) pairs, what the scores kernel would
# compute once — since that is the work the one-launch form repeats in every program. H200, both forms
# at batch 1, 4 and 16 (the "fused" rows of reports/bench/bench_kernels_round2c_quick.json):
# Mamba-2 (8 groups): one launch faster at all three (non-flush 5.30 / 8.84 / 24.46 µs against
# 7.48 / 11.21 / 25.12; flush 8.12 / 17.91 / 60.65 against 10.62 / 20.64 / 63.33); GDN (16 key heads):
# one launch faster at batch 1 and 4 (non-flush 5.00 / 7.22 against 7.23 / 8.69), two at batch 16
# (17.45 against 20.63). One threshold of 128 score rows fits both: Mamba-2 up to batch 16, GDN up to 8.
# That rule stands where ONE_LAUNCH_BATCHES below has no entry (Mamba-2's flushes, whose two forms
# tie at every batch from 1 to 64, and the formats never timed in both forms).
FUSED_SCORES_MAX_SCORE_ROWS = 128

# Both forms timed again per operator, step and stored formats, once the kernels had changed (H100,
# each row twice in one run: reports/diagnostics/one-launch-read-formats.jsonl, output-only steps at
# W = 7, batches 1-16; one-launch-flush.jsonl, autoregressive flushes at W = 15, batches 1-64). Where
# an entry exists, one launch runs at exactly its batches. Keys: (operator, "nonflush", the format
# read) and (operator, "flush", the policy's formats: "fp32" shared, "update/read" split).
ONE_LAUNCH_BATCHES = {
    # Mamba-2's output-only step: one launch up to batch 4 whatever it reads; from batch 8 two
    # launches (NVFP4 8.02-8.09 µs against 9.56-9.61, FP8 9.12-9.18 against 10.78-10.82, BF16
    # 11.31-11.33 against 13.33-13.35; fp32 ties at 8 and loses at 16, 30.07-30.26 against
    # 30.83-30.86). The H200 agrees at batch 16 (bench_kernels_round2zd_quick.json, "fused" rows:
    # fp32 23.61 against 25.15, NVFP4 10.37 against 14.96).
    **{("mamba2", "nonflush", f): range(1, 5) for f in ("fp32", "bf16", "fp8e4m3", "nvfp4")},
    # GDN's output-only step. fp32: up to batch 4 (batch 8: 12.42-12.75 against 13.73-13.91).
    # NVFP4: batches 2-4 only. At batch 1 the two-launch form, whose step kernel overlaps the scores
    # kernel (overlap_scores_launch), ran 4.39-4.45 against 4.62-4.64 (H200: 3.92 against 4.31), and
    # at batch 8 7.48-7.49 against 8.42-8.47. FP8 and BF16: up to batch 8 (FP8 8.01-8.04 against
    # 8.85-8.86, BF16 9.82-9.92 against 11.21-11.28), two launches at 16.
    ("gdn", "nonflush", "fp32"): range(1, 5),
    ("gdn", "nonflush", "nvfp4"): range(2, 5),
    ("gdn", "nonflush", "fp8e4m3"): range(1, 9),
    ("gdn", "nonflush", "bf16"): range(1, 9),
    # GDN's autoregressive flush. Shared fp32: up to batch 32 (16: 36.1-36.6 against 38.4-38.8; 32:
    # 63.3-63.7 against 64.8-65.4; 64 a tie). fp32/NVFP4: up to batch 4 (1: 19.1 against 20.4; 8-16 a
    # tie; 32: 108.0-108.2 against 105.2-105.3). fp16-SR/NVFP4: never, two launches won at every batch
    # (1: 21.0-21.1 against 22.3-22.4; 8: 30.9-31.0 against 35.2-35.6; 64: 198.6-199.9 against 222.2-223.2).
    ("gdn", "flush", "fp32"): range(1, 33),
    ("gdn", "flush", "fp32/nvfp4"): range(1, 5),
    ("gdn", "flush", "fp16-sr/nvfp4"): range(0),
}

# Forces one form in every wrapper while set (True one launch, False two; None: the rules above).
# For benchmarks and tests that time or compare both forms through code that does not pass
# ``fused_scores`` itself.
FORCED_LAUNCH_FORM: bool | None = None


# The two-launch form's step kernel may overlap its scores kernel (programmatic dependent launch,
# sm_90+; docs/design.md §7): the scores kernel lets its dependent start at once, and the step program
# waits for the scores kernel's writes (``await_scores``) only where it first reads them, after it has
# issued its state and record loads. Those loads cannot race with the scores kernel: it writes only the
# new token's B/k record (position W, which a one-token step never reads) and its own outputs (scores,
# GDN's normalised q/k); and it was itself launched after everything before it had finished, so every
# other input of the step is complete when the step starts. The wait costs a memory round trip in every
# program that follows it, so overlapping pays only where little waits behind it. H200, batch 256,
# W = 7, both forms in one run each time (reports/diagnostics/overlap-scores.jsonl): Mamba-2's output-only
# step 275.4 → 273.3 µs (fp32 read), 99.2 → 98.7 (NVFP4), 92.6 → 90.3 (FP8); GDN's 78.4 → 76.2 (NVFP4)
# but 164.5 → 196.3 (fp32) and 68.0 → 76.9 (FP8), where q̃, k and the scores all wait; GDN's
# autoregressive flush unchanged (411.7 / 412.0 with an fp32 checkpoint). The wrappers overlap where it
# measured faster.
def overlap_scores_launch(device: torch.device, override: bool | None, measured_faster: bool = True) -> bool:
    """Whether a two-launch one-token step runs its step kernel as a programmatic dependent launch of
    its scores kernel. ``override`` None: where it exists (a CUDA device of compute capability ≥ 9
    outside the Triton interpreter) and ``measured_faster`` (the wrapper's rule); True where it does not
    exist is an error; False: plain launches."""
    possible = (device.type == "cuda" and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")
                and torch.cuda.get_device_capability(device)[0] >= 9)
    if override is None:
        return possible and measured_faster
    if override and not possible:
        raise ValueError("overlap_scores=True needs a CUDA device of compute capability 9.0 or newer "
                         "(programmatic dependent launch) outside the Triton interpreter")
    return bool(override)


def pdl_kwargs(pdl: bool) -> dict:
    """Launch keywords of a programmatic dependent launch (none for a plain launch, which is also all
    the interpreter accepts)."""
    return {"launch_pdl": True} if pdl else {}


def fused_scores_launch(op: str, batch: int, score_heads: int, T: int, flush: bool, fold_new: bool,
                        override: bool | None, update: str = "fp32", read: str | None = None) -> bool:
    """Whether a replay step runs as one launch (fused scores). ``op``: "mamba2" or "gdn";
    ``score_heads``: the heads scores are computed for (Mamba-2 groups, GDN key heads); ``update``,
    ``read``: the stored formats (``read`` None: shared mode). Only a one-token step has the
    one-launch form: a non-flush step or an autoregressive flush (``fold_new``); verify steps
    (T > 1) always take two. ``override`` None: ``FORCED_LAUNCH_FORM`` if set, else the batches of
    ``ONE_LAUNCH_BATCHES`` where it has the step's entry, else ``batch · score_heads ≤
    FUSED_SCORES_MAX_SCORE_ROWS``; True / False force a form."""
    one_token = T == 1 and (fold_new or not flush)
    if override is None:
        if not one_token:
            return False
        if FORCED_LAUNCH_FORM is not None:
            return FORCED_LAUNCH_FORM
        formats = (update if read is None else f"{update}/{read}") if flush else (read or update)
        batches = ONE_LAUNCH_BATCHES.get((op, "flush" if flush else "nonflush", formats))
        if batches is not None:
            return batch in batches
        return batch * score_heads <= FUSED_SCORES_MAX_SCORE_ROWS
    if override and not one_token:
        raise ValueError("fused_scores=True needs a one-token step (T = 1: non-flush, or a flush with "
                         f"fold_new); got T = {T}, flush={flush}, fold_new={fold_new}")
    return bool(override)


def fused_nonflush_warps(bj: int) -> int:
    """Warps of a one-launch non-flush program, which also holds the window's B (GDN: k) records as a
    [ring, 128] tile (``bj``: the ring, at least 16). From register counts only (sm_90 compile,
    scripts/kernel_resources.py), not timed: at the two-launch form's 2 warps Mamba-2 spilled from
    ring 32 (fp32 read copy: 24 bytes of stack, 488 at ring 64) and GDN from an NVFP4 read copy
    already at ring 16 (8 bytes); at 4 warps neither spilled up to ring 32, and at ring 64 GDN
    from an fp32 read copy spilled 16 bytes at 4 warps and none at 8."""
    return 4 if bj <= 32 else 8


def state_product_precision(verify_precision: str, br: int, rows: int, read_code: int) -> str:
    """Precision of a verify block's product of the queries with the read copy's state tile
    (Mamba-2: C_T S_bᵀ; GDN: Q̃ S_bᵀ and K S_bᵀ). Measured on the H200 (Triton 3.6): with an NVFP4 read
    tile whose row block is padded (``rows`` < ``br``, e.g. 8 rows in a 16-row block) the compiled
    3-pass TF32 product returns wrong outputs (relative error 0.07-0.40 over speculative streams),
    while fp32 FMAs ("ieee") agree to 1e-7 and unpadded tiles agree with either; the interpreter
    agrees with both (docs/pitfalls.md §12). Padded tiles are small, so fp32 FMAs cost nothing that
    matters there."""
    return "ieee" if (read_code == FMT_NVFP4 and br > rows) else verify_precision
