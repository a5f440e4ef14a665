"""Teacher-forced Triton scans (kernels/{mamba2,gdn}/scan.py) against their torch references.

The format step (``quantize_tile``: codes, scales, SR bits) is compared bit for bit with the torch
quantizers; the scans, whose matrix products sum in another order than torch's, by relative RMS
of outputs and final states. Outputs and states are written into NaN-filled buffers, so anything
a kernel leaves unwritten fails. Shapes are awkward on purpose: T not a multiple of L, head dims
that are not powers of two and span two row blocks (40 = 32 + 8), batch 1.
"""
from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from precision_lab.kernels.common.formats import KERNEL_FORMATS
from precision_lab.kernels.common.tiles import quantize_tile
from precision_lab.kernels.gdn.scan import gdn_recurrent_scan, gdn_replay_scan
from precision_lab.kernels.gdn.scan_reference import gdn_recurrent_scan_ref, gdn_replay_scan_ref
from precision_lab.kernels.mamba2.scan import mamba2_recurrent_scan, mamba2_replay_scan
from precision_lab.kernels.mamba2.scan_reference import mamba2_recurrent_scan_ref, mamba2_replay_scan_ref
from precision_lab.quant import fake_quantize, get_quantizer
from precision_lab.quant.philox import layer_seed, state_rbits


def _tol(device: str, sr: bool = False) -> float:
    # CPU: the interpreter multiplies in numpy fp32 (only the summation order differs from torch).
    # That order moves a few stochastic roundings across their threshold: each is a one-code flip of
    # an element (an fp16 code: ~1e-5 of the state's RMS at these shapes), so SR-written states get
    # room for a handful of them. GPU: 3xTF32 products and FMA; a rare flip of a quantized code moves
    # a small state by ~1e-3.
    if device != "cpu":
        return 3e-3
    return 5e-5 if sr else 1e-5


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    assert torch.isfinite(a).all(), "kernel output has NaN/Inf (unwritten memory?)"
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def nan_like(t: torch.Tensor, dtype=None) -> torch.Tensor:
    return torch.full_like(t, float("nan"), dtype=dtype)


# ---------------------------------------------------------------------------------------------
# The format step, bit for bit
# ---------------------------------------------------------------------------------------------
@triton.jit
def _quantize_tile_kernel(x_ptr, y_ptr, seq_ptr, R, C, seed, event, COPY: tl.constexpr, FMT: tl.constexpr,
                          SR: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    head = tl.program_id(0)
    o_r = tl.arange(0, BLOCK_R)
    o_c = tl.arange(0, BLOCK_C)
    m = (o_r < R)[:, None] & (o_c < C)[None, :]
    p = head * R * C + o_r[:, None] * C + o_c[None, :]
    x = tl.load(x_ptr + p, mask=m, other=0.0)
    seq = tl.load(seq_ptr).to(tl.int64)
    y = quantize_tile(x, m, seed, seq, head, event.to(tl.int64), o_r, C, COPY, FMT, SR, BLOCK_R, BLOCK_C)
    tl.store(y_ptr + p, y, mask=m)


@pytest.mark.parametrize("fmt,C", [("bf16", 32), ("bf16-sr", 32), ("fp16-sr", 32), ("fp8e4m3", 32), ("fp8e5m2-sr", 32),
                                   ("nvfp4", 32), ("nvfp4-sr", 32), ("fp16-sr", 20), ("fp8e5m2-sr", 13)])
def test_quantize_tile_bit_exact(fmt, C, device):
    """quantize_tile (format dispatch + SR counters) == the torch quantizer with state_rbits; C = 20
    and 13 end their rows in a partial group of 8 inside a 32-wide tile."""
    H, R = 3, 12
    seq, seed, layer, event, copy = 9, 77, 5, 6, 1
    g = torch.Generator().manual_seed(1)
    x = torch.randn(H, R, C, generator=g) * torch.tensor([1.0, 2.0 ** -7, 300.0]).view(H, 1, 1)
    x[0, 0, :4] = torch.tensor([0.0, -0.0, 1.0 + 2.0 ** -8, 2.0 ** -20])  # zero, signed zero, a bf16 tie, tiny
    y = torch.full_like(x, float("nan"))
    code, sr = KERNEL_FORMATS[fmt]
    xd, yd = x.to(device), y.to(device)
    _quantize_tile_kernel[(H,)](xd, yd, torch.tensor([seq], device=device), R, C, layer_seed(seed, layer), event,
                                COPY=copy, FMT=code, SR=sr, BLOCK_R=16, BLOCK_C=32)
    q = get_quantizer(fmt)
    rbits = state_rbits(seed, layer, seq, torch.arange(H), event, (R, C), copy) if q.stochastic else None
    ref = fake_quantize(q, x, rbits)
    got = yd.cpu()
    assert torch.equal(got.view(torch.int32), ref.view(torch.int32)), \
        f"{fmt}: {(got != ref).sum().item()} elements differ from the torch quantizer"


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------
def mamba2_args(B, T, H, P, G, N, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)
    return dict(x=r(B, T, H, P), dt=r(B, T, H) - 1, A=-torch.rand(H, generator=g) * 2 - 0.1,
                B=r(B, T, G, N) * 0.5, C=r(B, T, G, N) * 0.5, D=r(H), dt_bias=r(H) * 0.1, z=r(B, T, H, P))


def gdn_args(B, T, HK, HV, K, V, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)
    return dict(q=r(B, T, HK, K), k=r(B, T, HK, K), v=r(B, T, HV, V), g=-torch.rand(B, T, HV, generator=g) * 0.4,
                beta=torch.rand(B, T, HV, generator=g))


def _to(d: dict, device: str) -> dict:
    return {k: v.to(device) for k, v in d.items()}


M2_ORDER = ("x", "dt", "A", "B", "C", "D", "dt_bias", "z")
GDN_ORDER = ("q", "k", "v", "g", "beta")

# (update, read, split, gdn recompute, fold_partial, L)
REPLAY_CASES = {
    "fp32-chunked": ("fp32", "fp32", False, True, True, 16),
    "shared-nvfp4-sr": ("nvfp4-sr", "nvfp4-sr", False, True, False, 8),
    "split-fp16sr-nvfp4": ("fp16-sr", "nvfp4", True, True, False, 8),
    "split-fp16sr-nvfp4-buffered": ("fp16-sr", "nvfp4", True, False, False, 8),
    "split-bf16sr-fp8e4m3": ("bf16-sr", "fp8e4m3", True, True, False, 8),
    "split-nvfp4-nvfp4sr": ("nvfp4", "nvfp4-sr", True, True, False, 8),
}


# Mamba-2 records do not depend on the state, so it has no gdn_fold variant.
REPLAY_PARAMS = [(arch, case) for arch in ("mamba2", "gdn") for case in REPLAY_CASES
                 if arch == "gdn" or REPLAY_CASES[case][3]]


@pytest.mark.parametrize("arch,case", REPLAY_PARAMS)
def test_replay_scan_matches_reference(arch, case, device):
    upd, rd, split, recompute, fold_partial, L = REPLAY_CASES[case]
    B, T = 2, 37
    uf, us = KERNEL_FORMATS[upd]
    rf, rs = KERNEL_FORMATS[rd]
    common = dict(L=L, seq_ids=torch.tensor([3, 11]), seed=17, layer=2, event0=4, split=split,
                  fold_partial=fold_partial)
    if arch == "mamba2":
        H, R, C = 4, 40, 32
        a = mamba2_args(B, T, H, R, 2, C)
        args = [a[k] for k in M2_ORDER]
        run, ref, extra = mamba2_replay_scan, mamba2_replay_scan_ref, {}
        y_like = a["x"]
    else:
        H, R, C = 2, 40, 32
        a = gdn_args(B, T, 1, H, C, R)
        args = [a[k] for k in GDN_ORDER]
        run, ref, extra = gdn_replay_scan, gdn_replay_scan_ref, dict(scale=None, qk_l2norm=True, recompute=recompute)
        y_like = a["v"]
    g = torch.Generator().manual_seed(5)
    u0 = torch.randn(B, H, R, C, generator=g).mul(0.3).to(torch.bfloat16).float()
    r0 = (u0 + 0.01).to(torch.bfloat16).float() if split else u0
    out = (nan_like(y_like).to(device), torch.full((B, H, R, C), float("nan"), device=device),
           torch.full((B, H, R, C), float("nan"), device=device))
    y, u, r = run(*[t.to(device) if t is not None else None for t in args], u0.to(device), r0.to(device),
                  upd_fmt=uf, upd_sr=us, read_fmt=rf, read_sr=rs, out=out, **common, **extra)
    yr, ur, rr = ref(*args, u0, r0, update=upd, read=rd, **common, **extra)
    tol = _tol(device)
    assert rel(y, yr) < tol
    assert rel(u, ur) < _tol(device, us)
    assert rel(r, rr) < _tol(device, rs)
    if split:  # the two copies really are different formats
        assert not torch.equal(u.cpu(), r.cpu())


@pytest.mark.parametrize("arch,fmt", [("mamba2", "bf16-sr"), ("mamba2", "nvfp4-sr"), ("gdn", "fp16-sr"),
                                      ("gdn", "nvfp4")])
def test_recurrent_scan_matches_reference(arch, fmt, device):
    """Conventional mode: the state rounded after every token (event0 + t), batch 1."""
    B, T = 1, 19
    code, sr = KERNEL_FORMATS[fmt]
    common = dict(seq_ids=torch.tensor([6]), seed=3, layer=1, event0=2)
    if arch == "mamba2":
        H, R, C = 2, 40, 32
        a = mamba2_args(B, T, H, R, 1, C, seed=2)
        args = [a[k] for k in M2_ORDER]
        run, ref, extra, y_like = mamba2_recurrent_scan, mamba2_recurrent_scan_ref, {}, a["x"]
    else:
        H, R, C = 2, 40, 32
        a = gdn_args(B, T, 1, H, C, R, seed=2)
        args = [a[k] for k in GDN_ORDER]
        run, ref, extra, y_like = gdn_recurrent_scan, gdn_recurrent_scan_ref, dict(scale=0.3, qk_l2norm=True), a["v"]
    s0 = torch.randn(B, H, R, C, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16).float()
    out = (nan_like(y_like).to(device), torch.full((B, H, R, C), float("nan"), device=device))
    y, s = run(*[t.to(device) for t in args], s0.to(device), fmt=code, sr=sr, out=out, **common, **extra)
    yr, sr_ = ref(*args, s0, fmt=fmt, **common, **extra)
    tol = _tol(device)
    assert rel(y, yr) < tol
    assert rel(s, sr_) < _tol(device, sr)


@pytest.mark.parametrize("arch", ["mamba2", "gdn"])
def test_fp32_chunked_scan_equals_recurrence(arch, device):
    """fp32 mode: the window scan with fold_partial is the plain recurrence (any chunk size)."""
    B, T = 1, 45
    common = dict(seq_ids=torch.tensor([0]), seed=0, layer=0, event0=1)
    if arch == "mamba2":
        a = mamba2_args(B, T, 2, 24, 1, 16, seed=7)
        args = [a[k] for k in M2_ORDER]
        s0 = torch.randn(B, 2, 24, 16, generator=torch.Generator().manual_seed(8))
        yr, sr_ = mamba2_recurrent_scan_ref(*args, s0, **common)
        y, u, _ = mamba2_replay_scan(*[t.to(device) for t in args], s0.to(device), s0.to(device), L=16, upd_fmt=0,
                                     upd_sr=False, read_fmt=0, read_sr=False, split=False, fold_partial=True, **common)
    else:
        a = gdn_args(B, T, 1, 2, 16, 24, seed=7)
        args = [a[k] for k in GDN_ORDER]
        s0 = torch.randn(B, 2, 24, 16, generator=torch.Generator().manual_seed(8)) * 0.2
        yr, sr_ = gdn_recurrent_scan_ref(*args, s0, scale=None, qk_l2norm=True, **common)
        y, u, _ = gdn_replay_scan(*[t.to(device) for t in args], s0.to(device), s0.to(device), scale=None,
                                  qk_l2norm=True, L=16, upd_fmt=0, upd_sr=False, read_fmt=0, read_sr=False,
                                  split=False, recompute=True, fold_partial=True, **common)
    tol = _tol(device)
    assert rel(y, yr) < tol
    assert rel(u, sr_) < tol


def test_nvfp4_needs_blocks_of_16():
    """The NVFP4 path refuses a last axis that is not a multiple of 16 (no silent truncation)."""
    a = gdn_args(1, 8, 1, 1, 24, 16)
    with pytest.raises(Exception, match="16"):
        gdn_replay_scan(*[a[k] for k in GDN_ORDER], torch.zeros(1, 1, 16, 24), torch.zeros(1, 1, 16, 24),
                        scale=None, qk_l2norm=True, L=8, seq_ids=torch.tensor([0]), seed=0, layer=0, event0=1,
                        upd_fmt=KERNEL_FORMATS["nvfp4"][0], upd_sr=False, read_fmt=KERNEL_FORMATS["nvfp4"][0],
                        read_sr=False, split=False, recompute=True)
