"""Mamba-2 decode-step kernels (kernels/mamba2/decode.py) against their torch references.

Exact (byte for byte) where the arithmetic is the same: with A = 0 (α = e^0 = 1), dt_raw = 25
(softplus passes values above 20 through) and short dyadic x, B (and checkpoint, for the flush),
every product and partial sum of the update and of the closed-form fold is exact in any order, so
the stored codes must agree bit for bit — SR bits included. With random
inputs transcendental functions differ by an ulp between the interpreter/GPU and torch, so outputs
and states are compared by per-tensor relative RMS error.
"""
import sys

import pytest
import torch
from precision_lab.kernels.decode_state import PackedState
from precision_lab.kernels.mamba2.decode import (
    CONVENTIONAL_FORMAT_SHAPES,
    Mamba2Records,
    mamba2_conventional_step,
    mamba2_replay_step,
)
from precision_lab.kernels.mamba2.decode_reference import (
    mamba2_conventional_step_ref,
    mamba2_replay_step_ref,
    store,
)
from precision_lab.quant.philox import COPY_READ, COPY_UPDATE

from precision_lab.policy import StatePolicy
from tests._decode_kernel_checks import (
    LaunchRecorder,
    assert_same_codes,
    conventional_format_cases,
    gather,
    rel,
    seeded_randn,
    skip_without_pdl,
    stub_overlapped_launches,
    with_rule_both_ways,
)
from tests._decode_kernel_checks import state_cols as n_for

H, G, P = 4, 2, 12          # awkward head dim; N is 20 (or 32 where NVFP4 needs C % 16 == 0)




def inputs(B, T, N, device, exact=False, seed=0, H=H, G=G):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    # exact: short dyadic x and B, so every product and partial sum of the (closed-form) fold is an
    # exact fp32 number (in any order: the compiled tl.dot accumulates onto the checkpoint, the
    # interpreter adds a finished product) yet needs more bits than fp16/bf16/fp8 keep
    ri = lambda lo, hi, den, *s: torch.randint(lo, hi, s, generator=g).float() / den  # noqa: E731
    d = dict(x=ri(-3, 4, 8, B, T, H, P) if exact else r(B, T, H, P),
             dt=torch.full((B, T, H), 25.0) if exact else r(B, T, H),
             A=torch.zeros(H) if exact else -torch.rand(H, generator=g),
             B=ri(-99, 100, 64, B, T, G, N) if exact else 0.5 * r(B, T, G, N),
             C=r(B, T, G, N), D=r(H), dt_bias=None if exact else 0.5 * r(H), z=r(B, T, H, P))
    return {k: (v.to(device) if v is not None else None) for k, v in d.items()}


def pool_of(S0, fmt, slots, n_slots, seed, layer, seq_ids, copy, strided=True):
    """A pool with the states S0 [B, ...] at ``slots``; with ``strided`` its slot axis is a strided view
    of a bigger allocation (a paged pool), so the kernels must honour the slot stride."""
    Bsz = S0.shape[0]
    ref = store(S0.cpu(), fmt, seed=seed, layer=layer, seq_ids=seq_ids.cpu(),
                events=torch.zeros(Bsz, dtype=torch.int64), copy=copy)
    pool = PackedState.empty(fmt, n_slots, H, S0.shape[2], S0.shape[3], device=S0.device)
    if strided:
        for name in ("data", "scale", "gscale"):
            t = getattr(pool, name)
            if t is not None:
                big = torch.zeros((n_slots, 3) + tuple(t.shape[1:]), dtype=t.dtype, device=t.device)
                setattr(pool, name, big[:, 1])
    for name in ("data", "scale", "gscale"):
        t = getattr(pool, name)
        if t is not None:
            t.zero_()
            live = slots >= 0
            t[slots[live]] = getattr(ref, name).to(t.device)[live.cpu()]
    return pool, ref.dequantize()





# ---------------------------------------------------------------------------------------------
# Conventional step
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt,shape", conventional_format_cases(
    ["fp32", "bf16", "fp16-sr", "bf16-sr", "fp8e4m3-sr", "nvfp4-sr"], CONVENTIONAL_FORMAT_SHAPES))
def test_conventional_step_exact_codes(fmt, shape, device):
    """Stored codes equal the reference bit for bit (SR bits from the same Philox counters); a null
    slot is skipped (zero output, pool untouched) and the output is fully written (NaN poison). Also
    at the format's own large-batch launch shape, where it has one."""
    N = n_for([fmt])
    slots = torch.tensor([3, -1, 0], device=device)          # permuted slots and a NULL entry
    seq_ids = torch.tensor([5, 6, 9])
    inp = {k: (v[:, 0] if v is not None and v.dim() > 1 else v) for k, v in inputs(3, 1, N, device, exact=True).items()}
    S0 = seeded_randn(3, H, P, N, seed=31, device=device)
    pool, S0q = pool_of(S0, fmt, slots, 5, 11, 2, seq_ids, COPY_UPDATE)
    untouched = pool.data[[1, 2, 4]].clone()
    out = torch.full((3, H, P), float("nan"), device=device)
    y = mamba2_conventional_step(pool, slots, inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], inp["D"], None,
                                 inp["z"], seq_ids=seq_ids.to(device), events=4, seed=11, layer=2, out=out,
                                 block_r=shape[0], num_warps=shape[1])
    y_ref, S_ref = mamba2_conventional_step_ref(S0q, *(inp[k].cpu() if inp[k] is not None else None
                                                       for k in ("x", "dt", "A", "B", "C", "D", "dt_bias", "z")))
    live = (slots >= 0).cpu()
    exp = store(S_ref[live], fmt, seed=11, layer=2, seq_ids=seq_ids[live], events=torch.full((2,), 4),
                copy=COPY_UPDATE)
    assert_same_codes(gather(pool, slots), exp)
    assert not torch.isnan(y).any()
    assert rel(y.cpu()[live], y_ref[live]) < 1e-6
    assert torch.equal(y[1].cpu(), torch.zeros(H, P))
    assert torch.equal(pool.data[[1, 2, 4]], untouched)


@pytest.mark.parametrize("fmt", ["fp32", "bf16-sr"])
def test_conventional_step_random(fmt, device):
    N = 20
    inp = {k: (v[:, 0] if v is not None and v.dim() > 1 else v) for k, v in inputs(1, 1, N, device).items()}
    slots = torch.tensor([0], device=device)
    S0 = seeded_randn(1, H, P, N, seed=32, device=device)
    pool, S0q = pool_of(S0, fmt, slots, 1, 0, 0, torch.tensor([0]), COPY_UPDATE, strided=False)
    y = mamba2_conventional_step(pool, slots, *(inp[k] for k in ("x", "dt", "A", "B", "C", "D", "dt_bias", "z")))
    y_ref, S_ref = mamba2_conventional_step_ref(S0q, *(inp[k].cpu() for k in ("x", "dt", "A", "B", "C", "D",
                                                                             "dt_bias", "z")))
    assert rel(y.cpu(), y_ref) < 1e-6
    tol = 1e-6 if fmt == "fp32" else 1e-2  # one rounding of bf16 at most apart
    assert rel(gather(pool, slots).dequantize(), S_ref) < tol


# ---------------------------------------------------------------------------------------------
# ReplaySSM steps: non-flush (output-only), verify (T > 1), flush (autoregressive and speculative)
# ---------------------------------------------------------------------------------------------
def _replay_setup(device, upd_fmt, read_fmt, W, T, exact, start=5, N=None, ring=16):
    N = N or n_for([upd_fmt, read_fmt])
    slots = torch.tensor([2, -1, 0], device=device)
    seq_ids = torch.tensor([1, 2, 3])
    Bsz = 3
    hist = inputs(Bsz, W, N, device, exact=exact, seed=1)
    new = inputs(Bsz, T, N, device, exact=exact, seed=2)
    new["A"] = hist["A"]
    new["D"], new["dt_bias"] = hist["D"], hist["dt_bias"]
    if exact:  # dyadic checkpoint (exact in every update format) keeps the fold's sums exact
        S0 = (torch.randint(-64, 65, (Bsz, H, P, N), generator=torch.Generator().manual_seed(33)).float() / 16).to(device)
    else:
        S0 = seeded_randn(Bsz, H, P, N, seed=34, device=device)
    upd, updq = pool_of(S0, upd_fmt, slots, 4, 3, 1, seq_ids, COPY_UPDATE)
    rd, rdq = pool_of(S0, read_fmt, slots, 4, 3, 1, seq_ids, COPY_READ)
    # history records through the reference (it is what a previous non-flush step wrote)
    dt = hist["dt"].cpu() + (0 if hist["dt_bias"] is None else hist["dt_bias"].cpu())
    from precision_lab.kernels.decode_state import torch_softplus

    dtv = torch_softplus(dt)
    h = {"u": dtv[..., None] * hist["x"].cpu(), "b": hist["B"].cpu(), "a": hist["A"].cpu() * dtv}
    rec = Mamba2Records(4, ring, H, G, P, N, device=device)
    rec.u.fill_(float("nan"))
    starts = torch.full((Bsz,), start, dtype=torch.int32)
    for b in range(Bsz):
        s = int(slots[b])
        if s < 0:
            continue
        for j in range(W):
            q = (start + j) % ring
            rec.u[s, q], rec.b[s, q], rec.a[s, q] = h["u"][b, j].to(device), h["b"][b, j].to(device), h["a"][b, j].to(device)
    return dict(N=N, slots=slots, seq_ids=seq_ids, new=new, upd=upd, updq=updq, rd=rd, rdq=rdq, hist=h, rec=rec,
                start=starts.to(device), wlen=torch.full((Bsz,), W, dtype=torch.int32, device=device))


# fused: the one-launch form of a one-token step (True) or the scores kernel + step kernel (False);
# verify steps (T > 1) have only the two-launch form. fp4: the NVFP4 element decode (``fp4_decode``)
@pytest.mark.parametrize("read_fmt,T,fused,fp4", [
    ("fp32", 1, False, "fp16"), ("fp32", 1, True, "fp16"), ("bf16", 3, False, "fp16"), ("fp8e4m3", 1, False, "fp16"),
    ("fp8e4m3", 1, True, "fp16"), ("nvfp4", 4, False, "fp16"), ("nvfp4", 1, False, "fp16"), ("nvfp4", 1, True, "fp16"),
    ("nvfp4", 1, False, "ptx"), ("nvfp4", 1, True, "ptx")])
def test_replay_nonflush_and_verify(read_fmt, T, fused, fp4, device):
    """Output-only step (T = 1, read straight from the codes) and speculative verify (T > 1): only y
    and the T records are written. NVFP4 at T = 1 with both element decodes (``fp4_decode="ptx"`` is
    compiled on a GPU only; the interpreter runs the fp16-pattern decode for both)."""
    s = _replay_setup(device, "fp32", read_fmt, W=5, T=T, exact=False)
    n = s["new"]
    before = [t.clone() for t in (s["upd"].data, s["rd"].data)]
    out = torch.full((3, T, H, P), float("nan"), device=device)
    y = mamba2_replay_step(s["upd"], s["rd"], s["rec"], s["slots"], s["start"], s["wlen"], n["x"], n["dt"], n["A"],
                           n["B"], n["C"], n["D"], n["dt_bias"], n["z"], seq_ids=s["seq_ids"].to(device), out=out,
                           block_r=8,  # two row blocks per head: NVFP4 reads work from any block
                           fused_scores=fused, fp4_decode=fp4)
    y_ref, new, _ = mamba2_replay_step_ref(s["updq"], s["rdq"], s["hist"], *(n[k].cpu() if n[k] is not None else None
                                           for k in ("x", "dt", "A", "B", "C", "D", "dt_bias", "z")))
    live = (s["slots"] >= 0).cpu()
    assert not torch.isnan(y).any()
    assert rel(y.cpu()[live], y_ref[live]) < 1e-5
    assert torch.equal(y[1].cpu(), torch.zeros(T, H, P))
    assert torch.equal(s["upd"].data, before[0]) and torch.equal(s["rd"].data, before[1])  # no state write
    for b in (0, 2):
        sl = int(s["slots"][b])
        for t in range(T):
            q = (5 + 5 + t) % 16
            assert rel(s["rec"].u[sl, q].cpu(), new["u"][b, t]) < 1e-6
            assert rel(s["rec"].a[sl, q].cpu(), new["a"][b, t]) < 1e-6
            assert torch.equal(s["rec"].b[sl, q].cpu(), new["b"][b, t])


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("c_dtype", [torch.float32, torch.bfloat16])
def test_replay_nonflush_nvfp4_mma(fused, c_dtype, device):
    """``fp4_decode="mma"`` (the NVFP4 products on tensor cores) in the T = 1 non-flush step, both launch
    forms, with the launch's own row block (16 rows for P = 12: 4 of them padding), against the
    reference and against ``fp4_decode="fp16"`` on the same inputs; C as fp32 (two fp16 parts) and
    as bf16 (one)."""
    s = _replay_setup(device, "fp32", "nvfp4", W=5, T=1, exact=False)
    n = dict(s["new"], C=s["new"]["C"].to(c_dtype))
    args = [n[k] for k in ("x", "dt", "A", "B", "C", "D", "dt_bias", "z")]
    before = [t.clone() for t in (s["upd"].data, s["rd"].data)]
    ys = {}
    for fp4 in ("fp16", "mma"):  # (both write the same record: the window is not advanced)
        out = torch.full((3, 1, H, P), float("nan"), device=device)
        ys[fp4] = mamba2_replay_step(s["upd"], s["rd"], s["rec"], s["slots"], s["start"], s["wlen"], *args,
                                     seq_ids=s["seq_ids"].to(device), out=out, fused_scores=fused,
                                     fp4_decode=fp4).cpu()
    y_ref, _, _ = mamba2_replay_step_ref(s["updq"], s["rdq"], s["hist"], *(a.cpu() for a in args))
    live = (s["slots"] >= 0).cpu()
    assert not torch.isnan(ys["mma"]).any()
    assert rel(ys["mma"][live], y_ref[live]) < 1e-5
    assert rel(ys["mma"][live], ys["fp16"][live]) < 1e-5
    assert torch.equal(ys["mma"][1], torch.zeros(1, H, P))
    assert torch.equal(s["upd"].data, before[0]) and torch.equal(s["rd"].data, before[1])  # no state write


@pytest.mark.parametrize("upd_fmt,read_fmt,T,fold_new,fused", [
    ("fp32", "fp32", 1, True, False), ("fp32", "fp32", 1, True, True), ("fp16-sr", "nvfp4", 1, True, False),
    ("fp16-sr", "nvfp4", 1, True, True), ("bf16-sr", "fp8e4m3", 3, False, False),
    ("fp8e4m3-sr", "nvfp4-sr", 2, False, False),
])
def test_replay_flush_exact_codes(upd_fmt, read_fmt, T, fold_new, fused, device):
    """Flush: fold in fp32, store round_H and round_F of the same fp32 state (codes bit-exact with the
    exact-arithmetic inputs), outputs from the fp32 result (fold_new) or verified drafts."""
    _flush_exact_codes(upd_fmt, read_fmt, T, fold_new, fused, device)


# 64 state columns: the flush stores each stored format as four column quarters of 16 (whole SR groups
# and NVFP4 blocks: store_state4), which the 32 columns above give NVFP4 only through the whole tile
@pytest.mark.parametrize("upd_fmt,read_fmt,T", [("fp16-sr", "nvfp4", 1), ("fp8e4m3-sr", "nvfp4-sr", 1),
                                                ("nvfp4-sr", "bf16-sr", 1), ("fp16-sr", "nvfp4", 2)])
def test_replay_flush_exact_codes_column_quarters(upd_fmt, read_fmt, T, device):
    _flush_exact_codes(upd_fmt, read_fmt, T, T == 1, False, device, N=64)


# A flush with several (row block, head) tiles per program, the next tile's inputs prefetched: 4-row
# blocks of P = 12 give 3 row blocks × 2 heads = 6 tiles per group, so 3 tiles cross from one head to the
# next inside a program and 6 cover the whole group; slot 1 is a NULL entry. T = 1: the autoregressive
# flush; T > 1: the speculative flush (its drafts verified tile by tile), whose drafts' products need
# 16-row blocks, so that it has whole heads as tiles (2 per group), as has a flush that stores NVFP4
@pytest.mark.parametrize("upd_fmt,read_fmt,T,tiles", [
    ("fp32", "fp32", 1, 3), ("fp32", "fp32", 1, 6), ("fp16-sr", "fp8e4m3", 1, 2), ("bf16-sr", "fp32", 1, 6),
    ("fp32", "fp32", 3, 2), ("bf16-sr", "fp8e4m3", 3, 2), ("fp8e4m3-sr", "nvfp4-sr", 2, 2)])
def test_flush_tiles_per_program_exact_codes(upd_fmt, read_fmt, T, tiles, device):
    _flush_exact_codes(upd_fmt, read_fmt, T, T == 1, False, device, block_r=4, tiles_per_program=tiles)


# The launch rules of a batch-256 run (large-batch rules forced on this small problem): the
# autoregressive fp32 flush over a ring of 32 records (one tile at 128 registers, FLUSH_ONE_TILE_
# REGISTERS_BY_RING, where a ring of 16 takes the multi-tile kernel) and the speculative flush (168
# registers, SPEC_FLUSH_MAX_REGISTERS), with a window of 20 records that wraps the ring
@pytest.mark.parametrize("upd_fmt,read_fmt,T,fold_new", [("fp32", "fp32", 1, True), ("fp32", None, 1, True),
                                                         ("fp32", None, 3, False), ("bf16-sr", "fp8e4m3", 3, False)])
def test_flush_exact_codes_at_large_batch_rules_over_a_ring_of_32(upd_fmt, read_fmt, T, fold_new, device, monkeypatch):
    from precision_lab.kernels.mamba2 import decode as md

    monkeypatch.setattr(md, "SMALL_BATCH_HEAD_MATRICES", 0)
    _flush_exact_codes(upd_fmt, read_fmt or upd_fmt, T, fold_new, False, device, W=20, ring=32, start=25,
                       shared=read_fmt is None)


def _flush_exact_codes(upd_fmt, read_fmt, T, fold_new, fused, device, N=None, W=6, ring=16, start=5, shared=False,
                       **launch):
    s = _replay_setup(device, upd_fmt, read_fmt, W=W, T=T, exact=True, N=N, ring=ring, start=start)
    n = s["new"]
    out = torch.full((3, T, H, P), float("nan"), device=device)
    y = mamba2_replay_step(s["upd"], None if shared else s["rd"], s["rec"], s["slots"], s["start"], s["wlen"], n["x"],
                           n["dt"], n["A"], n["B"], n["C"], n["D"], n["dt_bias"], n["z"], flush=True, fold_new=fold_new,
                           seq_ids=s["seq_ids"].to(device), events=7, seed=3, layer=1, out=out, fused_scores=fused,
                           **launch)
    y_ref, _, S = mamba2_replay_step_ref(s["updq"], s["rdq"], s["hist"], *(n[k].cpu() if n[k] is not None else None
                                         for k in ("x", "dt", "A", "B", "C", "D", "dt_bias", "z")),
                                         flush=True, fold_new=fold_new)
    live = (s["slots"] >= 0).cpu()
    kw = dict(seed=3, layer=1, seq_ids=s["seq_ids"][live], events=torch.full((2,), 7))
    assert_same_codes(gather(s["upd"], s["slots"]), store(S[live], upd_fmt, copy=COPY_UPDATE, **kw))
    if not shared:  # (shared mode stores one copy)
        assert_same_codes(gather(s["rd"], s["slots"]), store(S[live], read_fmt, copy=COPY_READ, **kw))
    assert not torch.isnan(y).any()
    assert rel(y.cpu()[live], y_ref[live]) < 1e-5


@pytest.mark.parametrize("precision,T,fused", [("tf32x3", 1, False), ("tf32x3", 1, True), ("ieee", 1, True),
                                               ("tf32x3", 2, False), ("ieee", 2, False)])
def test_replay_flush_random(precision, T, fused, device):
    """Flush with random inputs (decays ≠ 1, so the fold's weights e^{c_W − c_j} matter; the exact-codes
    test above has A = 0): fp32 state and outputs within fp32 rounding of the reference, for both
    precisions of the fold and verify products (they differ only in compiled GPU code)."""
    s = _replay_setup(device, "fp32", "fp32", W=7, T=T, exact=False, start=13)  # the window wraps the ring
    n = s["new"]
    out = torch.full((3, T, H, P), float("nan"), device=device)
    y = mamba2_replay_step(s["upd"], s["rd"], s["rec"], s["slots"], s["start"], s["wlen"], n["x"], n["dt"], n["A"],
                           n["B"], n["C"], n["D"], n["dt_bias"], n["z"], flush=True, fold_new=T == 1,
                           seq_ids=s["seq_ids"].to(device), out=out, fold_precision=precision,
                           verify_precision=precision, fused_scores=fused)
    y_ref, _, S = mamba2_replay_step_ref(s["updq"], s["rdq"], s["hist"], *(n[k].cpu() if n[k] is not None else None
                                         for k in ("x", "dt", "A", "B", "C", "D", "dt_bias", "z")),
                                         flush=True, fold_new=T == 1)
    live = (s["slots"] >= 0).cpu()
    assert rel(gather(s["upd"], s["slots"]).dequantize(), S[live]) < 1e-6
    assert rel(gather(s["rd"], s["slots"]).dequantize(), S[live]) < 1e-6
    assert rel(y.cpu()[live], y_ref[live]) < 1e-5
    assert torch.equal(y[1].cpu(), torch.zeros(T, H, P))


def _clone_setup(s):
    """An independent copy of a replay setup's pools and records (a step updates them in place)."""
    return {**s, "upd": s["upd"].clone(), "rd": s["rd"].clone(), "rec": s["rec"].clone()}


@pytest.mark.parametrize("upd_fmt,read_fmt,flush,start,W", [
    ("fp32", "nvfp4", False, 5, 5), ("fp32", "fp8e4m3", False, 13, 6), ("fp32", "bf16", False, 5, 0),
    ("fp16-sr", "nvfp4-sr", True, 13, 7), ("fp8e4m3-sr", "fp32", True, 5, 0),
])
def test_fused_scores_matches_two_launches(upd_fmt, read_fmt, flush, start, W, device):
    """The one-launch form of a one-token step against the two-launch form on the same inputs (random,
    windows that wrap the ring and empty ones): the same state codes and records bit for bit (neither
    depends on the scores: a flush folds records and inputs, the non-flush step stores no state),
    outputs within fp32 rounding. The two-launch form writes the new B record from the scores kernel,
    the one-launch form from one program per group."""
    s = _replay_setup(device, upd_fmt, read_fmt, W=W, T=1, exact=False, start=start)
    n = s["new"]
    runs = []
    for fused in (False, True):
        c = _clone_setup(s)
        y = mamba2_replay_step(c["upd"], c["rd"], c["rec"], c["slots"], c["start"], c["wlen"], n["x"], n["dt"],
                               n["A"], n["B"], n["C"], n["D"], n["dt_bias"], n["z"], flush=flush, fold_new=flush,
                               seq_ids=s["seq_ids"].to(device), events=3, seed=5, layer=2, fused_scores=fused,
                               block_r=None if flush else 8)
        runs.append((y, c))
    (y2, two), (y1, one) = runs
    assert_same_codes(one["upd"], two["upd"])
    assert_same_codes(one["rd"], two["rd"])
    for name in ("u", "b", "a"):  # (unwritten ring slots hold NaN in both)
        a, b = getattr(one["rec"], name), getattr(two["rec"], name)
        assert torch.equal(a.view(torch.int32), b.view(torch.int32)), name
    if not flush:  # the new token's B record landed at position W
        for b in (0, 2):
            assert torch.equal(one["rec"].b[int(s["slots"][b]), (start + W) % 16].cpu(), n["B"][b, 0].cpu())
    assert rel(y1, y2) < 1e-6
    assert torch.equal(y1[1].cpu(), torch.zeros(1, H, P))


def _fused_step_both_ways(s, switch, monkeypatch, device, **kw):
    """The one-launch one-token step of ``_replay_setup``'s state with the kernel rule ``switch`` on,
    then off, each on its own copy of the setup: [(outputs, copy)] in that order."""
    from precision_lab.kernels.mamba2 import decode as md
    n = s["new"]

    def run():
        c = _clone_setup(s)
        y = mamba2_replay_step(c["upd"], c["rd"], c["rec"], c["slots"], c["start"], c["wlen"], n["x"], n["dt"],
                               n["A"], n["B"], n["C"], n["D"], n["dt_bias"], n["z"], seq_ids=s["seq_ids"].to(device),
                               fused_scores=True, **kw)
        return y, c
    return with_rule_both_ways(monkeypatch, md, switch, run)


@pytest.mark.parametrize("upd_fmt,read_fmt,flush", [("fp32", "fp32", False), ("fp32", "nvfp4", False),
                                                     ("fp32", "fp32", True), ("fp16-sr", "nvfp4", True)])
def test_early_output_gates_change_no_bit(upd_fmt, read_fmt, flush, device, monkeypatch):
    """The one-launch steps' output gates requested early (``EARLY_OUTPUT_GATES``, the rule) or at
    the output (the order it replaced): the same loads and operations in another order, so outputs,
    records and states are the same bits."""
    s = _replay_setup(device, upd_fmt, read_fmt, W=6, T=1, exact=False, start=13)
    (y1, one), (y2, two) = _fused_step_both_ways(s, "EARLY_OUTPUT_GATES", monkeypatch, device, flush=flush,
                                                 fold_new=flush, events=3, seed=5, layer=2)
    assert torch.equal(y1.view(torch.int32), y2.view(torch.int32))
    assert_same_codes(one["upd"], two["upd"])
    assert_same_codes(one["rd"], two["rd"])
    for name in ("u", "b", "a"):
        assert torch.equal(getattr(one["rec"], name).view(torch.int32), getattr(two["rec"], name).view(torch.int32))


@pytest.mark.parametrize("W,start", [(6, 13), (0, 5), (11, 9)])
def test_early_token_dt_changes_no_bit(W, start, device, monkeypatch):
    """The one-launch output-only step from fp32 requesting its token's dt, dt_bias and x before the
    state tile (``EARLY_TOKEN_DT``, the rule) or where the token's record is formed (the order it
    replaced): the same loads and operations, so outputs and records are the same bits, the skipped
    entry (slot -1) included, and the outputs are the reference's."""
    s = _replay_setup(device, "fp32", "fp32", W=W, T=1, exact=False, start=start)
    n = s["new"]
    (y1, one), (y2, two) = _fused_step_both_ways(s, "EARLY_TOKEN_DT", monkeypatch, device)
    assert torch.equal(y1.view(torch.int32), y2.view(torch.int32))
    y_ref, _, _ = mamba2_replay_step_ref(s["updq"], s["rdq"], s["hist"], *(n[k].cpu() if n[k] is not None else None
                                         for k in ("x", "dt", "A", "B", "C", "D", "dt_bias", "z")))
    live = (s["slots"] >= 0).cpu()
    assert rel(y1.cpu()[live], y_ref[live]) < 1e-5
    assert torch.equal(y1[1].cpu(), torch.zeros_like(y1[1].cpu()))
    for name in ("u", "b", "a"):
        assert torch.equal(getattr(one["rec"], name).view(torch.int32), getattr(two["rec"], name).view(torch.int32))


@pytest.mark.parametrize("read_fmt,start,W", [("fp32", 13, 6), ("nvfp4", 5, 7), ("fp8e4m3", 5, 0)])
def test_overlapped_scores_launch_matches_plain(read_fmt, start, W, device):
    """The two-launch non-flush step with its step kernel launched as a programmatic dependent launch
    of the scores kernel (``overlap_scores=True``) against plain launches: outputs, records and states
    bit for bit (only where the step waits for the scores differs). At batch 64 of 8 heads so that
    the step's programs really start while scores programs run: a step reading its scores before the
    scores kernel wrote them would read the uninitialised buffer."""
    skip_without_pdl(device)
    s = _replay_setup(device, "fp32", read_fmt, W=W, T=1, exact=False, start=start)
    n = s["new"]
    runs = []
    for overlap in (False, True):
        c = _clone_setup(s)
        y = mamba2_replay_step(c["upd"], c["rd"], c["rec"], c["slots"], c["start"], c["wlen"], n["x"], n["dt"],
                               n["A"], n["B"], n["C"], n["D"], n["dt_bias"], n["z"], fused_scores=False,
                               overlap_scores=overlap, seq_ids=s["seq_ids"].to(device))
        runs.append((y, c))
    (y0, plain), (y1, over) = runs
    assert torch.equal(y0.view(torch.int32), y1.view(torch.int32))
    for name in ("u", "b", "a"):
        assert torch.equal(getattr(plain["rec"], name).view(torch.int32), getattr(over["rec"], name).view(torch.int32))
    assert_same_codes(plain["rd"], over["rd"])
    # a larger batch of the real head count: many scores programs still running when steps start
    from precision_lab.bench.problems import PROBLEMS

    prob = PROBLEMS["mamba2"](64, torch.device(device), upd="fp32", read=read_fmt, ring=16, W=W)
    ys = [prob.replay(False, False, fused_scores=False, overlap_scores=o).clone() for o in (False, True, True)]
    assert torch.equal(ys[0].view(torch.int16), ys[1].view(torch.int16))
    assert torch.equal(ys[0].view(torch.int16), ys[2].view(torch.int16))


def test_overlap_scores_launch_rule(monkeypatch):
    """What ``mamba2_replay_step`` hands its kernels, with the kernels stubbed out and the device taken
    to have programmatic dependent launch: only the two-launch T = 1 non-flush step overlaps (PDL in
    both kernels, ``launch_pdl`` on the step's launch); an autoregressive flush runs no scores kernel at
    all; ``overlap_scores=False`` and the one-launch form launch plainly. Without the feature (this
    CPU), asking for it is an error."""
    from precision_lab.kernels.mamba2 import decode as md

    launches = []

    B, Hh, Gg, Pp, Nn = 2, 8, 2, 16, 32
    x, dt = torch.zeros(B, 1, Hh, Pp), torch.zeros(B, 1, Hh)
    bc = torch.zeros(B, 1, Gg, Nn)
    recs = Mamba2Records(B, 16, Hh, Gg, Pp, Nn)
    ptr = (torch.arange(B), torch.zeros(B, dtype=torch.int32), torch.full((B,), 5, dtype=torch.int32))
    st = PackedState.empty("fp32", B, Hh, Pp, Nn)

    def launch(**kw):
        launches.clear()
        md.mamba2_replay_step(st, None, recs, *ptr, x, dt, torch.zeros(Hh), bc, bc, **kw)
        return {name: k for name, k in launches}

    with pytest.raises(ValueError, match="overlap_scores=True needs"):
        launch(fused_scores=False, overlap_scores=True)
    stub_overlapped_launches(monkeypatch, md, "mamba2_replay_scores_kernel", "mamba2_replay_step_kernel", launches)
    k = launch(fused_scores=False)
    assert k["scores"]["PDL"] and k["step"]["PDL"] and k["step"]["launch_pdl"]
    k = launch(fused_scores=False, overlap_scores=False)
    assert not k["scores"]["PDL"] and not k["step"]["PDL"] and "launch_pdl" not in k["step"]
    k = launch(fused_scores=True)
    assert list(k) == ["step"] and not k["step"]["PDL"] and "launch_pdl" not in k["step"]
    k = launch(fused_scores=False, flush=True, fold_new=True)
    assert list(k) == ["step"] and not k["step"]["PDL"]          # an autoregressive flush needs no scores
    xs, dts, bcs = torch.zeros(B, 3, Hh, Pp), torch.zeros(B, 3, Hh), torch.zeros(B, 3, Gg, Nn)
    launches.clear()
    md.mamba2_replay_step(st, None, recs, *ptr, xs, dts, torch.zeros(Hh), bcs, bcs)   # verify: plain launches
    k = dict(launches)
    assert not k["scores"]["PDL"] and not k["step"]["PDL"] and "launch_pdl" not in k["step"]


def test_bad_input_is_an_error(device):
    s = _replay_setup(device, "fp32", "fp32", W=1, T=2, exact=False)
    n = s["new"]
    with pytest.raises(ValueError, match="fused_scores=True needs a one-token step"):
        mamba2_replay_step(s["upd"], s["rd"], s["rec"], s["slots"], s["start"], s["wlen"], n["x"], n["dt"], n["A"],
                           n["B"], n["C"], fused_scores=True)
    with pytest.raises(ValueError, match="fold_new"):
        mamba2_replay_step(s["upd"], s["rd"], s["rec"], s["slots"], s["start"], s["wlen"], n["x"], n["dt"], n["A"],
                           n["B"], n["C"], flush=True, fold_new=True)
    with pytest.raises(ValueError, match="fold_precision must be"):
        mamba2_replay_step(s["upd"], s["rd"], s["rec"], s["slots"], s["start"], s["wlen"], n["x"], n["dt"], n["A"],
                           n["B"], n["C"], flush=True, fold_precision="tf32")
    with pytest.raises(ValueError, match="no Triton decode kernel"):
        PackedState.empty("mxfp4", 1, H, P, 32)
    with pytest.raises(ValueError, match="multiple of 16"):
        PackedState.empty("nvfp4", 1, H, P, 20)


# ---------------------------------------------------------------------------------------------
# Trajectories: 64 steps crossing 8 flushes, every mode, the kernels (driven by the triton-decode
# engine) against the torch decode engine
# ---------------------------------------------------------------------------------------------
POLICIES = ["fp32", "conventional:bf16-sr", "conventional:fp16-sr", "shared:nvfp4-sr@L8",
            "split:fp16-sr/nvfp4@L8", "split:fp32/fp8e4m3@L8", "split:bf16-sr/bf16@L8"]


@pytest.mark.parametrize("policy", POLICIES)
def test_trajectory(policy, device):
    # 2 heads of one group keep the interpreter's time down (the step tests above cover grouping,
    # strides and null slots)
    from precision_lab.layer import Mamba2Inputs, run_layer

    pol = StatePolicy.parse(policy, seed=13)
    N = n_for([pol.update, pol.read])
    T, Bsz, Ht = 64, 1, 2
    inp = inputs(Bsz, T, N, device, H=Ht, G=1)
    S0 = 0.5 * seeded_randn(Bsz, Ht, P, N, seed=35, device=device)
    args = [inp[k] for k in ("x", "dt", "A", "B", "C", "D", "dt_bias", "z")]
    kw = dict(initial_state=S0, layer_index=4, seq_ids=torch.tensor([7]))
    y, st = run_layer(Mamba2Inputs(*args), pol, engine="triton-decode", **kw)
    assert "triton:mamba2_" in st.implementation and "fallback" not in st.implementation
    y_dec, ref = run_layer(Mamba2Inputs(*(a.cpu() for a in args)), pol, engine="decode",
                           **{**kw, "initial_state": S0.cpu()})
    assert st.state_writes == ref.state_writes == (T if not pol.is_replay else T // pol.buffer_len)
    assert st.record_writes == ref.record_writes and st.state.window == ref.state.window
    # the trajectories run through rounding: an ulp of exp can flip an SR decision, so states agree
    # to well under one rounding of the format, not bit for bit
    tol = 1e-5 if pol.update == "fp32" and pol.read == "fp32" else 3e-3
    assert rel(y.cpu(), y_dec) < tol
    assert rel(st.state.update.cpu(), ref.state.update) < tol
    assert rel(st.state.read.cpu(), ref.state.read) < tol


def test_verify_refuses_more_warps_than_it_ran_at():
    """At 8 warps the verify block's compiled kernel faulted on the H200 (docs/pitfalls.md §14): the
    wrapper refuses it by name instead of launching; 4 warps and the flush's 8 stay allowed."""
    s = _replay_setup("cpu", "fp32", "fp32", W=5, T=2, exact=False)
    n = s["new"]
    with pytest.raises(ValueError, match="verify block .* at most 4 warps"):
        mamba2_replay_step(s["upd"], s["rd"], s["rec"], s["slots"], s["start"], s["wlen"], n["x"], n["dt"], n["A"],
                           n["B"], n["C"], n["D"], n["dt_bias"], n["z"], seq_ids=s["seq_ids"], num_warps=8)


def test_verify_and_speculative_flush_register_caps(monkeypatch):
    """The verify block (T > 1, non-flush) at 4 warps runs capped at VERIFY_MAX_REGISTERS unless a cap
    is given (0: none), other warp counts uncapped; the speculative flush (T > 1) that stores no NVFP4
    at SPEC_FLUSH_MAX_REGISTERS unless a shape or cap is given, one that stores NVFP4 uncapped."""
    from precision_lab.kernels.mamba2 import decode as md

    assert md.VERIFY_MAX_REGISTERS == 168 and md.SPEC_FLUSH_MAX_REGISTERS == 168
    seen = _grab_step_launches(monkeypatch)
    for read_fmt, runs, expected in (
            ("fp32", [{}, dict(block_r=64, num_warps=4), dict(max_registers=0), dict(max_registers=200),
                      dict(num_warps=2), dict(flush=True), dict(flush=True, max_registers=0),
                      dict(flush=True, block_r=16)],
             [(4, 168), (4, 168), (4, None), (4, 200), (2, None), (4, 168), (4, None), (4, None)]),
            ("nvfp4", [dict(flush=True)], [(4, None)])):
        seen.clear()
        s = _replay_setup("cpu", "fp32", read_fmt, W=5, T=3, exact=False)
        n = s["new"]
        args = (s["upd"], s["rd"], s["rec"], s["slots"], s["start"], s["wlen"], n["x"], n["dt"], n["A"], n["B"],
                n["C"], n["D"], n["dt_bias"], n["z"])
        for cfg in runs:
            mamba2_replay_step(*args, seq_ids=s["seq_ids"], **cfg)
        assert [w[1:] for w in seen] == expected, read_fmt


def test_speculative_flush_tiles_rule(monkeypatch):
    """The speculative flush (T > 1) above the small-batch rule runs SPEC_FLUSH_TILES tiles per program
    in the multi-tile kernel at SPEC_FLUSH_TILED_MAX_REGISTERS for an fp32 update copy with an fp32,
    E4M3 or BF16 read copy (shared fp32 too: the formats timed faster tiled) when ``window_bound``
    narrows its history tiles below the ring; without the bound, with an explicit keyword, with a 16-bit
    update copy, storing NVFP4, or inside the small-batch rule it stays one tile per program."""
    from precision_lab.kernels.mamba2 import decode as md

    assert (md.SPEC_FLUSH_TILES, md.SPEC_FLUSH_TILED_MAX_REGISTERS) == (16, 255)
    seen = _grab_step_launches(monkeypatch, tiles=True)

    def launch(read_fmt, large=True, upd_fmt="fp32", **cfg):
        monkeypatch.setattr(md, "SMALL_BATCH_HEAD_MATRICES", 0 if large else 10 ** 9)
        s = _replay_setup("cpu", upd_fmt, read_fmt, W=5, T=3, exact=False, ring=32)
        n = s["new"]
        seen.clear()
        mamba2_replay_step(s["upd"], s["rd"], s["rec"], s["slots"], s["start"], s["wlen"], n["x"], n["dt"], n["A"],
                           n["B"], n["C"], n["D"], n["dt_bias"], n["z"], seq_ids=s["seq_ids"], flush=True, **cfg)
        (launched,) = seen
        return launched[2:]  # (maxnreg, TILES)

    group_tiles = -(-P // 32) * (H // G)  # the default 32-row blocks, the heads of one group
    tiles = max(d for d in range(1, 17) if group_tiles % d == 0)
    assert tiles > 1
    for read_fmt in ("fp32", "bf16", "fp8e4m3"):
        assert launch(read_fmt, window_bound=5) == (255, tiles), read_fmt
    assert launch("bf16", upd_fmt="fp16-sr", window_bound=5) == (168, None)  # a 16-bit update copy
    assert launch("fp32") == (168, None)                                  # history tiles as wide as the ring
    assert launch("fp32", window_bound=20) == (168, None)                 # ... a bound that does not narrow them
    assert launch("fp32", window_bound=5, max_registers=168) == (168, None)
    assert launch("fp32", window_bound=5, tiles_per_program=2) == (168, 2)    # a tile count alone: the cap stays
    assert launch("nvfp4", window_bound=5) == (None, None)                # stores NVFP4: whole heads, uncapped
    assert launch("fp32", large=False, window_bound=5) == (168, None)    # inside the small-batch rule


def _grab_step_launches(monkeypatch, tiles: bool = False) -> list:
    """Replace the replay step and flush kernels by a recorder: each launch appends (BR, num_warps,
    maxnreg), with ``tiles`` also the flush kernel's TILES (None for the step kernel)."""
    from precision_lab.kernels.mamba2 import decode as md

    seen = []

    class Grab:
        def __getitem__(self, grid):
            def record(*a, **kw):
                seen.append((kw["BR"], kw["num_warps"], kw.get("maxnreg")) + ((kw.get("TILES"),) if tiles else ()))
            return record

    class Skip:  # the scores kernel of a two-launch step: not run (the pools here live on the CPU)
        def __getitem__(self, grid):
            return lambda *a, **kw: None

    monkeypatch.setattr(md, "mamba2_replay_step_kernel", Grab())
    monkeypatch.setattr(md, "mamba2_flush_kernel", Grab())
    monkeypatch.setattr(md, "mamba2_replay_scores_kernel", Skip())
    return seen


def test_flush_register_cap_rule(monkeypatch):
    """The autoregressive flush above the small-batch rule: with an fp32 update copy and an fp32, E4M3 or
    BF16 read copy, 8 tiles per program of 32 rows x 4 warps at 168 registers (the multi-tile flush kernel);
    otherwise one tile, capped (Triton's maxnreg): 32 rows x 4 warps at 128 registers when it stores
    only fp32, its usual shape at 128 otherwise; when it stores NVFP4, by its update format: fp16-SR
    144, FP8-SR 128, others 168. An explicit shape, cap or tile count wins, and other launches stay
    uncapped at one tile."""
    from precision_lab.kernels.decode_state import FMT_BF16, FMT_E4M3, FMT_FP16, FMT_FP32, FMT_NVFP4
    from precision_lab.kernels.mamba2 import decode as md

    assert md._flush_launch(True, (FMT_FP32, FMT_FP32), None, None, None) == (32, 4, 168, 8)
    assert md._flush_launch(True, (FMT_FP32, FMT_E4M3), None, None, None) == (32, 4, 168, 8)
    assert md._flush_launch(True, (FMT_FP32, FMT_BF16), None, None, None) == (32, 4, 168, 8)
    # a one-token flush that keeps its token as a record (the speculative flush's T = 1) is not tiled
    assert md._flush_launch(True, (FMT_FP32, FMT_FP32), None, None, None, None, False) == (32, 4, 128, 1)
    assert md._flush_launch(True, (FMT_FP16, FMT_E4M3), None, None, None) == (None, None, 128, 1)
    assert md._flush_launch(True, (FMT_FP16, FMT_NVFP4), None, None, None) == (None, None, 144, 1)
    assert md._flush_launch(True, (FMT_E4M3, FMT_NVFP4), None, None, None) == (None, None, 128, 1)
    assert md._flush_launch(True, (FMT_FP32, FMT_NVFP4), None, None, None) == (None, None, 168, 1)
    assert md._flush_launch(True, (FMT_NVFP4, FMT_NVFP4), None, None, None) == (None, None, 168, 1)
    assert md._flush_launch(True, (FMT_FP32, FMT_FP32), 32, None, None) == (32, None, 0, 1)      # explicit shape
    assert md._flush_launch(True, (FMT_FP32, FMT_FP32), None, None, 0) == (None, None, 0, 1)     # explicit: no cap
    assert md._flush_launch(True, (FMT_FP32, FMT_FP32), None, None, 96) == (None, None, 96, 1)
    assert md._flush_launch(True, (FMT_FP32, FMT_FP32), None, None, None, 1) == (None, None, 0, 1)  # one tile
    assert md._flush_launch(False, (), None, None, None) == (None, None, 0, 1)                   # not a T = 1 flush
    # over a ring of 32 or 64 records a flush storing only fp32 takes one tile at the ring's cap
    assert md.FLUSH_ONE_TILE_REGISTERS_BY_RING == {32: 128, 64: 168}
    assert md._flush_launch(True, (FMT_FP32, FMT_FP32), None, None, None, None, True, 32) == (32, 4, 128, 1)
    assert md._flush_launch(True, (FMT_FP32, FMT_FP32), None, None, None, None, True, 64) == (32, 4, 168, 1)
    assert md._flush_launch(True, (FMT_FP32, FMT_FP32), None, None, None, None, True, 128) == (32, 4, 168, 8)
    assert md._flush_launch(True, (FMT_FP32, FMT_E4M3), None, None, None, None, True, 32) == (32, 4, 168, 8)
    assert md._flush_launch(True, (FMT_FP32, FMT_FP32), None, None, None, 2, True, 32) == (None, None, 0, 2)
    # the wrapper hands the rule to the launch (large-batch rules forced on a small problem): the
    # multi-tile kernel at 2 tiles, the largest divisor of this problem's 2 heads per group up to 8
    seen = _grab_step_launches(monkeypatch, tiles=True)
    monkeypatch.setattr(md, "SMALL_BATCH_HEAD_MATRICES", 0)
    s = _replay_setup("cpu", "fp32", "fp32", W=5, T=1, exact=False)
    n = s["new"]
    args = (s["upd"], s["rd"], s["rec"], s["slots"], s["start"], s["wlen"], n["x"], n["dt"], n["A"], n["B"], n["C"],
            n["D"], n["dt_bias"], n["z"])
    mamba2_replay_step(*args, flush=True, fold_new=True, seq_ids=s["seq_ids"], fused_scores=True)
    mamba2_replay_step(*args, flush=True, fold_new=True, seq_ids=s["seq_ids"], fused_scores=True, max_registers=0)
    mamba2_replay_step(*args, seq_ids=s["seq_ids"], fused_scores=True)
    mamba2_replay_step(*args, flush=True, seq_ids=s["seq_ids"], fused_scores=False)   # T = 1, token kept
    assert seen[0] == (32, 4, 168, 2)
    assert seen[1][2:] == (None, None) and seen[2][2:] == (None, None)
    assert seen[3] == (32, 4, 128, None)
    # the wrapper hands the ring to the rule: a ring of 32 records, one tile at 128 in the step kernel
    s = _replay_setup("cpu", "fp32", "fp32", W=5, T=1, exact=False, ring=32)
    n = s["new"]
    mamba2_replay_step(s["upd"], s["rd"], s["rec"], s["slots"], s["start"], s["wlen"], n["x"], n["dt"], n["A"],
                       n["B"], n["C"], n["D"], n["dt_bias"], n["z"], flush=True, fold_new=True, seq_ids=s["seq_ids"],
                       fused_scores=True)
    assert seen[4] == (32, 4, 128, None)


def test_tiles_per_program_is_checked(device):
    s = _replay_setup(device, "fp32", "fp32", W=6, T=1, exact=True)
    n = s["new"]
    args = (s["upd"], s["rd"], s["rec"], s["slots"], s["start"], s["wlen"], n["x"], n["dt"], n["A"], n["B"], n["C"])
    with pytest.raises(ValueError, match="tiles_per_program must divide"):
        mamba2_replay_step(*args, flush=True, fold_new=True, block_r=4, tiles_per_program=4)  # 6 tiles per group
    with pytest.raises(ValueError, match="at least 1"):
        mamba2_replay_step(*args, flush=True, fold_new=True, tiles_per_program=0)
    with pytest.raises(ValueError, match="needs a flush"):
        mamba2_replay_step(*args, tiles_per_program=2)


def test_small_batch_flush_launch(monkeypatch):
    """Up to SMALL_BATCH_HEAD_MATRICES a flush that stores no NVFP4 runs SMALL_BATCH_FLUSH = 32 rows x 4
    warps, uncapped (the fastest small-batch shape on the H200, reports/bench/tune_small_batch_round2n.json);
    one that stores NVFP4 keeps the whole head and the large-batch cap rule; an explicit shape wins."""
    from precision_lab.kernels.mamba2 import decode as md

    seen = _grab_step_launches(monkeypatch)
    for read_fmt, cfg in (("fp32", {}), ("fp8e4m3", {}), ("nvfp4", {}), ("fp32", dict(block_r=16, num_warps=2))):
        s = _replay_setup("cpu", "fp32", read_fmt, W=5, T=1, exact=False)
        n = s["new"]
        assert n["x"].shape[0] * n["x"].shape[2] <= md.SMALL_BATCH_HEAD_MATRICES   # batch x heads
        mamba2_replay_step(s["upd"], s["rd"], s["rec"], s["slots"], s["start"], s["wlen"], n["x"], n["dt"], n["A"],
                           n["B"], n["C"], n["D"], n["dt_bias"], n["z"], flush=True, fold_new=True,
                           seq_ids=s["seq_ids"], fused_scores=True, **cfg)
    P = s["upd"].R
    assert md.SMALL_BATCH_FLUSH == (32, 4)
    assert seen[0] == (32, 4, None)
    assert seen[1] == (32, 4, None)
    assert seen[2] == (md.pow2(P), 4, md.FLUSH_NVFP4_MAX_REGISTERS)     # NVFP4 stored: whole head, capped
    assert seen[3] == (16, 2, None)


def test_fma_fold_flag_reaches_both_kernels(monkeypatch):
    """The multi-tile formats' fold adds its product by one FMA in both flush kernels (TILED_FMT), so that
    one tile per program and several store the same bits: the wrapper passes the same flag to the replay
    kernel (one tile) and the multi-tile kernel, True only for an autoregressive flush of those formats.
    (The interpreter rounds an FMA like a multiply and an add, so only a GPU sees the bits differ.)"""
    from precision_lab.kernels.mamba2 import decode as md

    seen = []

    class Grab:
        def __init__(self, name):
            self.name = name

        def __getitem__(self, grid):
            return lambda *a, **kw: seen.append((self.name, kw.get("TILED_FMT")))

    monkeypatch.setattr(md, "mamba2_replay_step_kernel", Grab("replay"))
    monkeypatch.setattr(md, "mamba2_flush_kernel", Grab("tiles"))
    monkeypatch.setattr(md, "mamba2_replay_scores_kernel", Grab("scores"))
    for upd_fmt, read_fmt, fold_new, tiles in (("fp32", "fp32", True, 1), ("fp32", "fp8e4m3", True, 2),
                                               ("fp32", "bf16", True, 1), ("fp32", "fp32", False, None),
                                               ("fp32", "nvfp4", True, None), ("fp16-sr", "fp8e4m3", True, 2)):
        s = _replay_setup("cpu", upd_fmt, read_fmt, W=5, T=1, exact=False)
        n = s["new"]
        seen.clear()
        mamba2_replay_step(s["upd"], s["rd"], s["rec"], s["slots"], s["start"], s["wlen"], n["x"], n["dt"], n["A"],
                           n["B"], n["C"], n["D"], n["dt_bias"], n["z"], flush=True, fold_new=fold_new,
                           seq_ids=s["seq_ids"], fused_scores=False, block_r=4, tiles_per_program=tiles)
        expect = fold_new and upd_fmt == "fp32" and read_fmt in ("fp32", "fp8e4m3", "bf16")
        flush_launches = [(k, f) for k, f in seen if k != "scores"]
        assert flush_launches == [("tiles" if tiles and tiles > 1 else "replay", expect)], (upd_fmt, read_fmt, seen)


def test_wrapper_passes_its_formats_to_the_launch_form_rule(monkeypatch):
    """``mamba2_replay_step`` asks ``fused_scores_launch`` with its own operator and stored formats: an
    entry of ONE_LAUNCH_BATCHES for one read format changes that format's launch form only."""
    from precision_lab.kernels.common import launch
    from precision_lab.kernels.mamba2 import decode as md

    seen = []

    class Grab:
        def __getitem__(self, grid):
            return lambda *a, **kw: seen.append(kw["FUSED"]) if "FUSED" in kw else None

    monkeypatch.setattr(md, "mamba2_replay_step_kernel", Grab())
    monkeypatch.setattr(md, "mamba2_replay_scores_kernel", Grab())
    monkeypatch.setitem(launch.ONE_LAUNCH_BATCHES, ("mamba2", "nonflush", "nvfp4"), range(0))
    for read_fmt, fused in (("fp32", True), ("nvfp4", False), (None, True)):
        s = _replay_setup("cpu", "fp32", read_fmt or "fp32", W=5, T=1, exact=False)
        n = s["new"]
        seen.clear()
        mamba2_replay_step(s["upd"], s["rd"] if read_fmt else None, s["rec"], s["slots"], s["start"], s["wlen"],
                           n["x"], n["dt"], n["A"], n["B"], n["C"], n["D"], n["dt_bias"], n["z"], seq_ids=s["seq_ids"])
        assert seen == [fused], (read_fmt, seen)


def test_small_batch_tiled_flush_rule(monkeypatch):
    """Inside the small-batch rule, from SMALL_BATCH_TILED_MIN_HEAD_MATRICES on, the autoregressive flush of
    an fp32 update copy with an fp32 / E4M3 / BF16 read copy (or shared) runs SMALL_BATCH_FLUSH_TILES tiles
    per program at the tiled cap; below it, for other formats, for the speculative flush and with an
    explicit keyword it keeps one tile, uncapped."""
    from precision_lab.kernels.decode_state import FMT_BF16, FMT_E4M3, FMT_FP16, FMT_FP32, FMT_NVFP4
    from precision_lab.kernels.mamba2 import decode as md

    lo = md.SMALL_BATCH_TILED_MIN_HEAD_MATRICES
    assert 0 < lo <= md.SMALL_BATCH_HEAD_MATRICES and md.SMALL_BATCH_FLUSH_TILES == 4
    none = (None, None, None)
    for fmts in ((FMT_FP32, FMT_FP32), (FMT_FP32, FMT_E4M3), (FMT_FP32, FMT_BF16)):
        assert md._small_batch_tiled(lo, fmts, True, none)
        assert not md._small_batch_tiled(lo - 1, fmts, True, none)
        assert not md._small_batch_tiled(lo, fmts, False, none)            # the speculative flush
        for i in range(3):                                                 # an explicit keyword wins
            assert not md._small_batch_tiled(lo, fmts, True, tuple(2 if j == i else None for j in range(3)))
    for fmts in ((FMT_FP16, FMT_E4M3), (FMT_FP32, FMT_NVFP4), (FMT_FP32, FMT_FP16)):
        assert not md._small_batch_tiled(lo, fmts, True, none)

    # through the wrapper (3 batch entries x H heads, the threshold at and just above that): a 32-row
    # block holds a whole head of P = 12 rows, so a group has H / G = 2 tiles and the rule's 4 falls back
    # to its largest divisor
    seen = _grab_step_launches(monkeypatch, tiles=True)
    for batch_heads in (3 * H, 3 * H + 1):
        monkeypatch.setattr(md, "SMALL_BATCH_TILED_MIN_HEAD_MATRICES", batch_heads)
        s = _replay_setup("cpu", "fp32", "fp32", W=5, T=1, exact=False)
        n = s["new"]
        assert n["x"].shape[0] * n["x"].shape[2] == 3 * H
        mamba2_replay_step(s["upd"], s["rd"], s["rec"], s["slots"], s["start"], s["wlen"], n["x"], n["dt"], n["A"],
                           n["B"], n["C"], n["D"], n["dt_bias"], n["z"], flush=True, fold_new=True,
                           seq_ids=s["seq_ids"], fused_scores=True)
    assert seen[0] == (32, 4, md.FLUSH_TILED_MAX_REGISTERS, H // G)
    assert seen[1] == (32, 4, None, None)


def test_nonflush_nvfp4_register_cap_rule(monkeypatch):
    """The two-launch output-only step from an NVFP4 read copy at its default shape is capped at
    NONFLUSH_NVFP4_MAX_REGISTERS; the one-launch form, other read formats, the "ptx" and "mma" element
    decodes, flushes, verify steps and launches with an explicit block_r / num_warps / max_registers
    are not."""
    from precision_lab.kernels.decode_state import FMT_E4M3, FMT_FP32, FMT_NVFP4
    from precision_lab.kernels.mamba2 import decode as md

    cap, none = md.NONFLUSH_NVFP4_MAX_REGISTERS, (None, None, None)
    assert 0 < cap <= 255
    assert md._nonflush_max_registers(1, False, False, FMT_NVFP4, none) == cap
    assert md._nonflush_max_registers(1, False, True, FMT_NVFP4, none) is None       # one launch
    assert md._nonflush_max_registers(1, True, False, FMT_NVFP4, none) is None       # a flush
    assert md._nonflush_max_registers(2, False, False, FMT_NVFP4, none) is None      # verify
    for fmt in (FMT_FP32, FMT_E4M3):
        assert md._nonflush_max_registers(1, False, False, fmt, none) is None
    for i in range(3):                                                              # an explicit keyword wins
        assert md._nonflush_max_registers(1, False, False, FMT_NVFP4, tuple(8 if j == i else None for j in range(3))) is None
    for decode in ("ptx", "mma"):                                                  # measured with "fp16" only
        assert md._nonflush_max_registers(1, False, False, FMT_NVFP4, none, decode) is None

    # through the wrapper: the cap reaches the step kernel in the two-launch form only, and a given cap wins
    seen = _grab_step_launches(monkeypatch)
    for fused, kw in ((False, {}), (True, {}), (False, {"max_registers": 0}), (False, {"fp4_decode": "mma"})):
        s = _replay_setup("cpu", "fp32", "nvfp4", W=5, T=1, exact=False)
        n = s["new"]
        mamba2_replay_step(s["upd"], s["rd"], s["rec"], s["slots"], s["start"], s["wlen"], n["x"], n["dt"], n["A"],
                           n["B"], n["C"], n["D"], n["dt_bias"], n["z"], seq_ids=s["seq_ids"], fused_scores=fused, **kw)
    assert [maxnreg for _, _, maxnreg in seen] == [cap, None, None, None]


@pytest.mark.parametrize("upd_fmt,read_fmt,block_r,num_warps", [
    ("fp32", "fp32", 32, 4), ("fp16-sr", "fp8e4m3", 32, 4), ("fp16-sr", "nvfp4", None, 4),
    ("fp8e4m3-sr", "nvfp4", None, 4)])
def test_flush_register_cap_changes_no_bit(upd_fmt, read_fmt, block_r, num_warps, device):
    """A register cap changes how the flush is compiled, not what it computes: at the rule's cap and
    uncapped, the same launch shape stores the same codes and scales and returns the same outputs,
    bit for bit (on a GPU two different compiled kernels; the interpreter ignores the cap)."""
    from precision_lab.kernels.mamba2 import decode as md

    results = []
    for cap in (None, 0):
        torch.manual_seed(0)  # the setup draws its checkpoint from the global generator
        s = _replay_setup(device, upd_fmt, read_fmt, W=5, T=1, exact=False)
        if cap is None:
            cap = md._flush_launch(True, (s["upd"].code, s["rd"].code), None, None, None)[2]
            assert cap > 0
        n = s["new"]
        y = mamba2_replay_step(s["upd"], s["rd"], s["rec"], s["slots"], s["start"], s["wlen"], n["x"], n["dt"],
                               n["A"], n["B"], n["C"], n["D"], n["dt_bias"], n["z"], flush=True, fold_new=True,
                               seq_ids=s["seq_ids"].to(device), events=2, seed=4, layer=1, block_r=block_r,
                               num_warps=num_warps, max_registers=cap)
        results.append([y] + [t for st in (s["upd"], s["rd"]) for t in (st.data, st.scale, st.gscale) if t is not None])
    for a, b in zip(*results):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


@pytest.mark.parametrize("upd_fmt,read_fmt,T", [("fp32", "fp32", 1), ("fp32", "fp8e4m3", 1), ("fp16-sr", "bf16-sr", 1),
                                                 ("fp32", "fp32", 3), ("fp32", "bf16", 3), ("fp32", "fp8e4m3", 3),
                                                 ("fp16-sr", "bf16-sr", 3), ("fp32", "nvfp4", 2)])
def test_flush_tiles_change_no_bit(upd_fmt, read_fmt, T, device):
    """Random inputs (decays != 1): the multi-tile flush kernel (2 and 6 tiles per program, 4-row
    blocks; the speculative flush and a flush that stores NVFP4 have whole heads as tiles, 2 per
    group) stores the same codes and records and returns the same outputs as one tile per program in
    the replay step kernel, bit for bit, at the tiled rule's register cap (on a GPU: different compiled
    kernels running the same operations in the same order). T = 1: the autoregressive flush; T > 1: the
    speculative flush, over a window that wraps the ring. One exception, seen on an H100: with a 16-bit
    update copy (fp16-SR, BF16-SR) the speculative flush's draft outputs differ between the two
    kernels in the last bits (up to 9.5e-7 absolute on O(1) outputs; reports/diagnostics/
    tiles-bits.jsonl) while the folded state, its codes and the records stay the same, and with fp32
    FMAs for either product they agree bit for bit: the compiled tensor-core products of the drafts
    round differently in the two kernels. Those outputs are compared to fp32 rounding."""
    from precision_lab.kernels.mamba2 import decode as md

    results = []
    for tiles in (1, 2) if read_fmt == "nvfp4" or T > 1 else (1, 2, 6):
        torch.manual_seed(0)  # the setup draws its checkpoint from the global generator
        s = _replay_setup(device, upd_fmt, read_fmt, W=5, T=T, exact=False, start=13)
        n = s["new"]
        y = mamba2_replay_step(s["upd"], s["rd"], s["rec"], s["slots"], s["start"], s["wlen"], n["x"], n["dt"],
                               n["A"], n["B"], n["C"], n["D"], n["dt_bias"], n["z"], flush=True, fold_new=T == 1,
                               seq_ids=s["seq_ids"].to(device), events=2, seed=4, layer=1, block_r=4, num_warps=4,
                               max_registers=md.FLUSH_TILED_MAX_REGISTERS, tiles_per_program=tiles)
        results.append([y, s["rec"].u, s["rec"].a, s["rec"].b] +
                       [t for st in (s["upd"], s["rd"]) for t in (st.data, st.scale, st.gscale) if t is not None])
    assert not torch.isnan(results[0][0]).any()
    outputs_to_rounding = T > 1 and upd_fmt != "fp32"
    first_bitwise = 1 if outputs_to_rounding else 0  # results[i][0] is the outputs
    for other in results[1:]:
        if outputs_to_rounding:
            torch.testing.assert_close(other[0], results[0][0], rtol=1e-5, atol=1e-5)
        for a, b in zip(results[0][first_bitwise:], other[first_bitwise:]):
            assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def test_spec_flush_tiles_over_row_blocks(device, monkeypatch):
    """The speculative flush's tiles over several row blocks of a head (P = 32 in 16-row blocks: 2 row
    blocks × 2 heads = 4 tiles per group, so a program's tiles cross row blocks and heads): the same
    codes, records (the drafts' log decays written once per head, by its first row block) and outputs
    bit for bit at 1, 2 and 4 tiles per program, and the outputs and state against the reference."""
    from precision_lab.kernels.mamba2 import decode as md

    monkeypatch.setattr(sys.modules[__name__], "P", 32)
    results = []
    for tiles in (1, 2, 4):
        torch.manual_seed(0)
        s = _replay_setup(device, "fp32", "bf16-sr", W=6, T=4, exact=False, start=14)
        s["rec"].a[:, [(14 + 6 + t) % 16 for t in range(4)]] = float("nan")  # the drafts' slots: unwritten stays NaN
        n = s["new"]
        args = [n[k] for k in ("x", "dt", "A", "B", "C", "D", "dt_bias", "z")]
        y = mamba2_replay_step(s["upd"], s["rd"], s["rec"], s["slots"], s["start"], s["wlen"], *args, flush=True,
                               seq_ids=s["seq_ids"].to(device), events=2, seed=4, layer=1, block_r=16,
                               max_registers=md.SPEC_FLUSH_MAX_REGISTERS, tiles_per_program=tiles)
        results.append([y, s["rec"].u, s["rec"].a] + [t for st in (s["upd"], s["rd"]) for t in (st.data, st.scale)
                                                      if t is not None])
    y_ref, new, S = mamba2_replay_step_ref(s["updq"], s["rdq"], s["hist"], *(a.cpu() if a is not None else None
                                           for a in args), flush=True)
    live = (s["slots"] >= 0).cpu()
    assert rel(y.cpu()[live], y_ref[live]) < 1e-5
    assert rel(gather(s["upd"], s["slots"]).dequantize(), S[live]) < 1e-6
    for b in (0, 2):
        sl = int(s["slots"][b])
        for t in range(4):
            q = (14 + 6 + t) % 16
            assert rel(s["rec"].a[sl, q].cpu(), new["a"][b, t]) < 1e-6
            assert rel(s["rec"].u[sl, q].cpu(), new["u"][b, t]) < 1e-6
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))



@pytest.mark.parametrize("flush,tiles", [(False, None), (True, None), (True, 2)])
def test_window_bound_changes_no_bit(flush, tiles, device):
    """``window_bound`` (T > 1): the history held as 16-position tiles instead of the ring's 32 (a window
    of 9 records that wraps the ring) stores the same records and codes and returns the same outputs,
    bit for bit, as without it, in verify and in the speculative flush (one tile per program and two:
    whole heads of 16 rows); a bound above 16 takes the ring's tiles again. A bound outside the ring is
    refused."""
    from precision_lab.kernels.mamba2 import decode as md

    results = []
    for bound in (None, 9, 20):
        torch.manual_seed(0)
        s = _replay_setup(device, "fp32", "bf16-sr", W=9, T=3, exact=False, start=27, ring=32)
        n = s["new"]
        y = mamba2_replay_step(s["upd"], s["rd"], s["rec"], s["slots"], s["start"], s["wlen"], n["x"], n["dt"],
                               n["A"], n["B"], n["C"], n["D"], n["dt_bias"], n["z"], flush=flush,
                               seq_ids=s["seq_ids"].to(device), events=2, seed=4, layer=1, block_r=16,
                               max_registers=md.SPEC_FLUSH_MAX_REGISTERS, tiles_per_program=tiles, window_bound=bound)
        results.append([y, s["rec"].u, s["rec"].a, s["rec"].b] +
                       [t for st in (s["upd"], s["rd"]) for t in (st.data, st.scale) if t is not None])
    y_ref, _, _ = mamba2_replay_step_ref(s["updq"], s["rdq"], s["hist"], *(n[k].cpu() if n[k] is not None else None
                                         for k in ("x", "dt", "A", "B", "C", "D", "dt_bias", "z")), flush=flush)
    live = (s["slots"] >= 0).cpu()
    assert rel(results[1][0].cpu()[live], y_ref[live]) < 1e-5
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    for bad in (-1, 33):  # a window holds at most the ring's 32 records
        with pytest.raises(ValueError, match="window_bound"):
            mamba2_replay_step(s["upd"], s["rd"], s["rec"], s["slots"], s["start"], s["wlen"], n["x"], n["dt"],
                               n["A"], n["B"], n["C"], flush=flush, window_bound=bad)



def test_window_bound_sets_the_history_tile(monkeypatch):
    """The history tile width (BW) a launch gets: max(pow2(window_bound), 16) for T > 1, at most the ring's
    (BJ); the ring's without a bound and for every one-token step."""
    from precision_lab.kernels.mamba2 import decode as md

    seen = []

    class Grab:
        def __getitem__(self, grid):
            return lambda *a, **kw: seen.append((kw["BJ"], kw["BW"]))

    monkeypatch.setattr(md, "mamba2_replay_step_kernel", Grab())
    monkeypatch.setattr(md, "mamba2_flush_kernel", Grab())
    monkeypatch.setattr(md, "mamba2_replay_scores_kernel", type("Skip", (), {"__getitem__": lambda self, g: (
        lambda *a, **k: None)})())
    s = _replay_setup("cpu", "fp32", "fp32", W=3, T=8, exact=False, ring=64)
    n = s["new"]
    for T, flush, bound, tiles in [(8, False, None, None), (8, False, 3, None), (8, True, 16, None),
                                   (8, True, 17, 2), (8, True, 56, None), (1, False, 3, None), (1, True, 3, None)]:
        args = [n[k][:, :T] for k in ("x", "dt")] + [n["A"]] + [n[k][:, :T] for k in ("B", "C")]
        mamba2_replay_step(s["upd"], s["rd"], s["rec"], s["slots"], s["start"], s["wlen"], *args, flush=flush,
                           fold_new=flush and T == 1, window_bound=bound, block_r=16 if tiles else None,
                           tiles_per_program=tiles)
    assert seen == [(64, 64), (64, 16), (64, 16), (64, 32), (64, 64), (64, 64), (64, 64)]


def test_conventional_launch_shapes(monkeypatch):
    """The conventional step: 16 rows x 8 warps at large batch, 4 rows x 1 warp at small batch
    (batch x heads <= SMALL_BATCH_HEAD_MATRICES); an NVFP4 state owns whole heads with the warps of
    its tile at any batch (the 1-warp rule was measured on 4-row blocks)."""
    from precision_lab.kernels.common.formats import KERNEL_FORMATS
    from precision_lab.kernels.decode_state import FMT_FP32, FMT_NVFP4
    from precision_lab.kernels.mamba2 import decode as md

    assert md._conventional_launch(64, 128, FMT_FP32, None, None, 256 * 128) == (16, 8)
    assert md._conventional_launch(64, 128, FMT_FP32, None, None, 16 * 128) == (4, 1)
    assert md._conventional_launch(64, 128, FMT_NVFP4, None, None, 16 * 128) == (64, 8)
    assert md._conventional_launch(64, 128, FMT_NVFP4, None, None, 256 * 128) == (64, 8)
    assert md._conventional_launch(64, 128, FMT_FP32, 32, None, 16 * 128) == (32, 4)   # explicit block_r
    # a 16-bit or FP8 state at large batch: the format's own shape; at small batch the 1-warp rule
    for fmt, shape in md.CONVENTIONAL_FORMAT_SHAPES.items():
        code = KERNEL_FORMATS[fmt][0]
        assert md._conventional_launch(64, 128, code, None, None, 256 * 128, fmt) == shape
        assert md._conventional_launch(64, 128, code, None, None, 16 * 128, fmt) == (4, 1)
        assert md._conventional_launch(64, 128, code, 16, None, 256 * 128, fmt)[0] == 16   # explicit block_r
    assert md._conventional_launch(64, 128, FMT_FP32, None, None, 256 * 128, "fp32") == (16, 8)
    assert md.CONVENTIONAL_FORMAT_SHAPES["fp16-sr"] == (32, 8)
    # the wrapper passes batch × heads and the state's format: batch 32 of 128 heads, fp16-SR
    launches = []
    monkeypatch.setattr(md, "mamba2_conventional_step_kernel", LaunchRecorder("conventional", launches))
    Bsz, H, G = 32, 128, 8
    pool = PackedState.empty("fp16-sr", Bsz, H, 64, 128)
    x = torch.zeros(Bsz, H, 64)
    md.mamba2_conventional_step(pool, torch.arange(Bsz), x, torch.zeros(Bsz, H), torch.zeros(H),
                                torch.zeros(Bsz, G, 128), torch.zeros(Bsz, G, 128))
    assert [(kw["_grid"], kw["BR"], kw["num_warps"]) for _, kw in launches] == [((2, H, Bsz), 32, 8)]


def test_shape_arguments_are_compile_time_constants():
    """Shape arguments of every Mamba-2 decode kernel are constexpr (why: ``assert_shape_constants``),
    and a slot's records stay within the int32 offsets the step kernel addresses them with."""
    from precision_lab.kernels.mamba2 import decode as md

    from tests._decode_kernel_checks import assert_shape_constants

    assert_shape_constants(md.mamba2_conventional_step_kernel, ("H", "G", "R", "C"))
    assert_shape_constants(md.mamba2_replay_scores_kernel, ("G", "C", "RING"))
    assert_shape_constants(md.mamba2_replay_step_kernel, ("H", "G", "R", "C", "RING"))
    with pytest.raises(ValueError, match="2\\^31"):
        md.Mamba2Records(1, 2 ** 16, 2 ** 9, 1, 2 ** 7, 16)  # refused before anything is allocated
