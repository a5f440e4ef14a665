"""The inputs every benchmark times: model shapes, decode-step buffer sets, scan inputs, quantizer
states.

Decode steps (``Mamba2Problem``, ``GDNProblem``): one object is one *buffer set* — the state pools
of B slots in their storage formats, the record ring buffers and the inputs of one launch — so a
benchmark can cycle over several independent sets and start every launch with a cold L2.
"""
from __future__ import annotations

import torch

from precision_lab.kernels.common.formats import FMT_FP32
from precision_lab.kernels.decode_state import PackedState, format_code
from precision_lab.kernels.gdn.decode import GDNRecords, gdn_conventional_step, gdn_replay_step
from precision_lab.kernels.mamba2.decode import Mamba2Records, mamba2_conventional_step, mamba2_replay_step
from precision_lab.layer import GDNInputs, Mamba2Inputs

#: Nemotron-3-Super's Mamba-2 layer: 128 heads of a [P, N] = [64, 128] state, 8 groups of B/C.
MAMBA2 = dict(H=128, P=64, N=128, G=8)
#: Qwen3.5-4B's GDN layer: 16 key / 32 value heads, a [V, K] = [128, 128] state per value head.
GDN = dict(Hk=16, Hv=32, V=128, K=128)


def state_dims(op: str) -> dict[str, int]:
    """H (state heads), R x C (state matrix), Gk (groups of B/C or key heads) of an operator."""
    if op == "mamba2":
        d = MAMBA2
        return dict(H=d["H"], R=d["P"], C=d["N"], Gk=d["G"])
    if op == "gdn":
        d = GDN
        return dict(H=d["Hv"], R=d["V"], C=d["K"], Gk=d["Hk"])
    raise ValueError(f"unknown operator {op!r}; benchmarked operators: mamba2, gdn")


# ---------------------------------------------------------------------------------------------
# decode steps
# ---------------------------------------------------------------------------------------------
def _pool(fmt, B, H, R, C, dev):
    """A pool of B slots in fmt. fp32 pools hold random states; others start at 0 (code 0 is 0.0 in every
    format) and are given real values by one conventional step of the problem (``_seed_pools``), so no
    format is ever timed on zeros and no CPU quantizer runs on GB-sized states."""
    if format_code(fmt)[0] == FMT_FP32:
        return PackedState(fmt, 0.1 * torch.randn(B, H, R, C, device=dev), None, None, R, C)
    p = PackedState.empty(fmt, B, H, R, C, device=dev)
    for t in (p.data, p.scale, p.gscale):
        if t is not None:
            t.zero_()
    return p


def _seed_pools(prob):
    for name in ("upd", "read"):
        pool = getattr(prob, name)
        if pool is not None and format_code(pool.fmt)[0] != FMT_FP32:
            keep = prob.upd
            prob.upd = pool
            prob.conventional()
            prob.upd = keep


def packed_to(p, dev):
    """A copy of the PackedState ``p`` on ``dev``."""
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


# ---------------------------------------------------------------------------------------------
# teacher-forced scans
# ---------------------------------------------------------------------------------------------
def gdn_scan_inputs(Bsz, T, HK, HV, K, V, device, dtype, gen):
    """GDNInputs of B sequences x T tokens (q, k, v in ``dtype``; g < 0 and beta in fp32)."""
    r = lambda *s: torch.randn(*s, device=device, generator=gen)
    return GDNInputs(q=r(Bsz, T, HK, K).to(dtype), k=r(Bsz, T, HK, K).to(dtype), v=r(Bsz, T, HV, V).to(dtype),
                     g=-torch.rand(Bsz, T, HV, device=device, generator=gen) * 0.2 - 0.01,
                     beta=torch.rand(Bsz, T, HV, device=device, generator=gen))


def mamba2_scan_inputs(Bsz, T, H, P, G, N, device, dtype, gen):
    """Mamba2Inputs of B sequences x T tokens (x, dt, B, C, z in ``dtype``)."""
    r = lambda *s: torch.randn(*s, device=device, generator=gen)
    return Mamba2Inputs(x=r(Bsz, T, H, P).to(dtype), dt=(r(Bsz, T, H) - 2).to(dtype),
                        A=-torch.rand(H, device=device, generator=gen) - 0.1,
                        B=(r(Bsz, T, G, N) * 0.3).to(dtype), C=(r(Bsz, T, G, N) * 0.3).to(dtype),
                        D=r(H), dt_bias=r(H) * 0.1, z=r(Bsz, T, H, P).to(dtype))


# ---------------------------------------------------------------------------------------------
# quantizers
# ---------------------------------------------------------------------------------------------
def quant_state(shape, device) -> torch.Tensor:
    """An fp32 "state" [..., R, C]: randn times a per-matrix power of two in 2^-8..2^8 (so matrices
    have different global scales, as the heads of a real state do)."""
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(shape, device=device, generator=g)
    lead = shape[:-2]
    exps = torch.randint(-8, 9, lead, device=device, generator=g).to(torch.float32)
    return x * torch.exp2(exps)[..., None, None]
