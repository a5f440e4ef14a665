"""Packed state pools for the decode-step kernels (``mamba2/decode.py``, ``gdn/decode.py``).

A decode server keeps one state matrix per (slot, head) in a pool; a batch addresses it through a
slot index array (``slots[b] = -1`` marks a NULL/padded entry: the kernels then read nothing, write
no state and write a zero output; a live slot must not appear twice in one launch). ``PackedState`` is one copy of such a pool in its storage format:

=========  ===========================================  ===========================  ===============
format     data                                          scale                        gscale
=========  ===========================================  ===========================  ===============
fp32       float32  [S, H, R, C]                         —                            —
bf16, fp16 bfloat16/float16 [S, H, R, C] (±SR)           —                            —
fp8e4m3/   uint8 codes [S, H, R, C] (±SR)                —                            —
fp8e5m2
nvfp4      uint8 [S, H, R, C/2], element 2i low nibble   uint8 E4M3 bytes [S,H,R,C/16] float32 [S, H]
=========  ===========================================  ===========================  ===============

Only the slot axis may be strided (a paged pool); inside a slot the [H, R, C] block is contiguous.
The codes are exactly the ``QTensor`` fields of the built-in quantizers (``precision_lab.quant``),
which is how the torch references and the tests check them byte for byte.

Device side (``load_state``, ``store_state``, ``read_state_dot``): ``kernels/common/state_io.py``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
from precision_lab.kernels.common.formats import FMT_FP32, FMT_NVFP4, KERNEL_FORMATS

# the device helpers (kernels/common/state_io.py), importable from here as before
from precision_lab.kernels.common.state_io import (  # noqa: F401
    _e2m1_pairs_hw,
    load_state,
    read_state_dot,
    softplus,
    store_state,
)

COPY_BIT = -(1 << 63)  # bit 63 of the SR counter as an int64 (quant/philox.py COPY_READ)

_STORAGE_DTYPE = {0: torch.float32, 1: torch.bfloat16, 2: torch.float16, 3: torch.uint8, 4: torch.uint8,
                  5: torch.uint8}


def format_code(name: str) -> tuple[int, bool]:
    """(kernel format code, stochastic) for a quantizer name; a clear error for other formats."""
    if name not in KERNEL_FORMATS:
        raise ValueError(f"format {name!r} has no Triton decode kernel; kernel formats: "
                         f"{', '.join(KERNEL_FORMATS)} (use the torch decode engine for others)")
    return KERNEL_FORMATS[name]


@dataclass
class PackedState:
    """One copy of a state pool in a storage format (see the module table for the layouts)."""

    fmt: str
    data: torch.Tensor
    scale: torch.Tensor | None
    gscale: torch.Tensor | None
    R: int
    C: int

    @property
    def code(self) -> int:
        return format_code(self.fmt)[0]

    @property
    def sr(self) -> bool:
        return format_code(self.fmt)[1]

    @classmethod
    def empty(cls, fmt: str, slots: int, H: int, R: int, C: int, device="cpu") -> PackedState:
        """An uninitialised pool (fill it with ``quantize`` or let a flush write it)."""
        code, _ = format_code(fmt)
        if code == FMT_NVFP4:
            if C % 16:
                raise ValueError(f"NVFP4 blocks run along the last axis in 16s: C = {C} is not a multiple of 16")
            return cls(fmt, torch.empty(slots, H, R, C // 2, dtype=torch.uint8, device=device),
                       torch.empty(slots, H, R, C // 16, dtype=torch.uint8, device=device),
                       torch.empty(slots, H, dtype=torch.float32, device=device), R, C)
        return cls(fmt, torch.empty(slots, H, R, C, dtype=_STORAGE_DTYPE[code], device=device), None, None, R, C)

    @classmethod
    def quantize(cls, x: torch.Tensor, fmt: str, rbits: torch.Tensor | None = None) -> PackedState:
        """Pack a float state ``x [S, H, R, C]`` with the format's torch quantizer (the reference).

        rbits: [S, H, R, C] integer words for SR formats (quant/philox.py ``state_rbits``).
        """
        code, sr = format_code(fmt)
        S, H, R, C = x.shape
        if code == FMT_FP32:
            return cls(fmt, x.to(torch.float32, copy=True).contiguous(), None, None, R, C)
        from precision_lab.quant import get_quantizer

        qt = get_quantizer(fmt).quantize(x.to(torch.float32), rbits=rbits if sr else None)
        data = qt.data
        if data.dtype == torch.float8_e4m3fn or data.dtype == torch.float8_e5m2:
            data = data.view(torch.uint8)
        if code == FMT_NVFP4:
            return cls(fmt, data.contiguous(), qt.scale.view(torch.uint8).contiguous(),
                       qt.global_scale.to(torch.float32).reshape(S, H).contiguous(), R, C)
        return cls(fmt, data.to(_STORAGE_DTYPE[code]).contiguous() if code <= 2 else data.contiguous(),
                   None, None, R, C)

    def dequantize(self) -> torch.Tensor:
        """fp32 [S, H, R, C] values the codes stand for (through the format's torch quantizer)."""
        code = self.code
        if code in (0, 1, 2):
            return self.data.to(torch.float32)
        from precision_lab.quant import QTensor, get_quantizer

        q = get_quantizer(self.fmt)
        shape = (*self.data.shape[:-1], self.C)
        if code == FMT_NVFP4:
            qt = QTensor(self.data, self.scale.view(torch.float8_e4m3fn), self.gscale, shape, self.fmt)
        else:
            qt = QTensor(self.data, None, None, shape, self.fmt)  # FP8 codes travel as uint8
        return q.dequantize(qt).to(torch.float32)

    def clone(self) -> PackedState:
        c = (lambda t: None if t is None else t.clone())
        return PackedState(self.fmt, self.data.clone(), c(self.scale), c(self.gscale), self.R, self.C)

    def kernel_args(self) -> tuple:
        """(data, scale, gscale, data slot stride, scale slot stride, gscale slot stride) for a launch.

        bf16/fp16 travel as int16 bit patterns (the codecs work on bits)."""
        d = self.data
        if d.dtype in (torch.bfloat16, torch.float16):
            d = d.view(torch.int16)
        if d.stride(-1) != 1 or d[0].is_contiguous() is False:
            raise ValueError("a state pool must be contiguous inside a slot ([H, R, C]); only the slot axis may be strided")
        sc = self.scale if self.scale is not None else d
        gs = self.gscale if self.gscale is not None else d
        return (d, sc, gs, d.stride(0), sc.stride(0) if self.scale is not None else 0,
                gs.stride(0) if self.gscale is not None else 0)


def torch_softplus(v: torch.Tensor) -> torch.Tensor:
    """The kernels' softplus in torch (same expression, same threshold)."""
    return torch.where(v > 20.0, v, torch.log(1.0 + torch.exp(v)))


def sr_seed(seed: int, layer: int) -> int:
    from precision_lab.quant.philox import layer_seed

    return layer_seed(seed, layer)


def round_to(x: torch.Tensor, fmt: str, *, seed: int, layer: int, seq_ids: torch.Tensor, events: torch.Tensor,
             copy: int) -> torch.Tensor:
    """Reference: the fp32 values a kernel stores for x [B, H, R, C] in ``fmt`` (SR words from the
    (seq_ids[b], head, events[b]) counters of quant/philox.py)."""
    return PackedState.quantize(x, fmt, rbits_for(x.shape, fmt, seed=seed, layer=layer, seq_ids=seq_ids,
                                                  events=events, copy=copy)).dequantize()


def rbits_for(shape, fmt: str, *, seed: int, layer: int, seq_ids: torch.Tensor, events: torch.Tensor,
              copy: int) -> torch.Tensor | None:
    """SR words [B, H, R, C] for one write of a batch of states, or None for an RNE format."""
    if not format_code(fmt)[1]:
        return None
    from precision_lab.quant.philox import state_rbits

    B, H, R, C = shape
    return state_rbits(seed, layer, seq_ids.cpu().view(B, 1), torch.arange(H).view(1, H),
                       events.cpu().view(B, 1), (R, C), copy)


def initial_pool(S0: torch.Tensor, fmt: str, slots: torch.Tensor, pool_slots: int, *, seq_ids: torch.Tensor,
                 seed: int, layer: int, copy: int) -> PackedState:
    """A pool of ``pool_slots`` slots holding the initial states S0 [B, H, R, C] cast to ``fmt`` at SR
    event 0 (the start of a stream) in the slots ``slots`` [B] (-1 entries are left out)."""
    Bsz, H, R, C = S0.shape
    ev = torch.zeros(Bsz, dtype=torch.int64)
    packed = PackedState.quantize(S0.cpu(), fmt, rbits_for(S0.shape, fmt, seed=seed, layer=layer,
                                                           seq_ids=seq_ids.cpu(), events=ev, copy=copy))
    pool = PackedState.empty(fmt, pool_slots, H, R, C, device=S0.device)
    live = (slots >= 0).cpu()
    for name in ("data", "scale", "gscale"):
        src, dst = getattr(packed, name), getattr(pool, name)
        if src is not None:
            dst.zero_()
            dst[slots.cpu()[live].to(dst.device)] = src[live].to(dst.device)
    return pool


def commit(start: torch.Tensor, wlen: torch.Tensor, accepted: torch.Tensor | int, flushed: bool,
           ring: int) -> None:
    """Advance the window pointers in place after a step that verified T tokens and kept ``accepted``.

    Non-flush: W += a. Flush: the history moved into the checkpoint, the accepted tokens' records
    (at positions W..W+a-1) become the new window: start += W, W = a. An autoregressive flush
    (fold_new) keeps nothing: call with accepted = 0.
    """
    if flushed:
        start.add_(wlen).bitwise_and_(ring - 1)
        wlen.zero_().add_(accepted)
    else:
        wlen.add_(accepted)


def decode_stream(T: int, state_shape: tuple[int, ...], policy, make_records, conventional_step, replay_step, *,
                  S0: torch.Tensor | None, seq_ids: torch.Tensor | None, layer: int,
                  slots: torch.Tensor | None, pool_slots: int | None, device):
    """The autoregressive stream driver behind ``mamba2_decode_stream`` and ``gdn_decode_stream``: the
    pools (initial state S0 [B, H, R, C] at SR event 0, zeros if None), the record ring buffers, and
    the token loop with its flushes every ``policy.buffer_len`` tokens and window commits.

    make_records(pool_slots, ring) builds the operator's records; conventional_step(t, state, slots,
    kw) and replay_step(t, update, read, records, slots, start, wlen, flush, kw) run token t's step
    and return its output [B, ...] (kw: the SR counters seq_ids, seed, layer, events of the step).
    Returns (outputs [B, T, ...], update pool, read pool, state writes).
    """
    from precision_lab.quant.philox import COPY_READ, COPY_UPDATE

    Bsz = state_shape[0]
    slots = torch.arange(Bsz, device=device) if slots is None else slots.to(device)
    n_slots = int(pool_slots or int(slots.max()) + 1)
    seq_ids = torch.arange(Bsz, device=device) if seq_ids is None else seq_ids.to(device)
    S0 = torch.zeros(state_shape, device=device) if S0 is None else S0.float()
    kw = dict(seq_ids=seq_ids, seed=policy.seed, layer=layer)
    update = initial_pool(S0, policy.update, slots, n_slots, copy=COPY_UPDATE, **kw)
    read = initial_pool(S0, policy.read, slots, n_slots, copy=COPY_READ, **kw) if policy.mode == "split" else None
    L = policy.buffer_len
    records = make_records(n_slots, triton.next_power_of_2(L)) if policy.is_replay else None
    start = torch.zeros(Bsz, dtype=torch.int32, device=device)
    wlen = torch.zeros(Bsz, dtype=torch.int32, device=device)
    outs, writes = [], 0
    for t in range(T):
        step_kw = dict(kw, events=writes + 1)
        if not policy.is_replay:
            outs.append(conventional_step(t, update, slots, step_kw))
            writes += 1
            continue
        flush = t % L == L - 1
        outs.append(replay_step(t, update, read, records, slots, start, wlen, flush, step_kw))
        commit(start, wlen, 0 if flush else 1, flush, records.ring)
        writes += int(flush)
    return torch.stack(outs, 1), update, (update if read is None else read), writes
