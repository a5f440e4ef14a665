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
from precision_lab.kernels.common.formats import (
    FMT_BF16,
    FMT_E4M3,
    FMT_E5M2,
    FMT_FP16,
    FMT_FP32,
    FMT_NVFP4,
    KERNEL_FORMATS,
)

# the device helpers (kernels/common/state_io.py), importable from here as before
from precision_lab.kernels.common.state_io import (  # noqa: F401
    _e2m1_pairs_hw,
    load_state,
    read_state_dot,
    softplus,
    store_state,
)

_STORAGE_DTYPE = {FMT_FP32: torch.float32, FMT_BF16: torch.bfloat16, FMT_FP16: torch.float16,
                  FMT_E4M3: torch.uint8, FMT_E5M2: torch.uint8, FMT_NVFP4: torch.uint8}
_WORD_FORMATS = (FMT_FP32, FMT_BF16, FMT_FP16)  # stored as float words (the others as byte codes)


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

        rbits: [S, H, R, C] integer SR values for SR formats (quant/philox.py ``state_rbits``).
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
        return cls(fmt, data.to(_STORAGE_DTYPE[code]).contiguous() if code in _WORD_FORMATS else data.contiguous(),
                   None, None, R, C)

    def dequantize(self) -> torch.Tensor:
        """fp32 [S, H, R, C] values the codes stand for (through the format's torch quantizer)."""
        code = self.code
        if code in _WORD_FORMATS:
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
        if self.code == FMT_NVFP4 and (d.data_ptr() % 4 or d.stride(0) % 4):
            # the non-flush step reads the codes as 32-bit words (state_io._nvfp4_dot_words)
            raise ValueError("an NVFP4 pool must start at a 4-byte aligned address and have a slot stride "
                             "that is a multiple of 4 bytes")
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


def rbits_for(shape, fmt: str, *, seed: int, layer: int, seq_ids: torch.Tensor, events: torch.Tensor,
              copy: int) -> torch.Tensor | None:
    """SR values [B, H, R, C] for one write of a batch of states, or None for an RNE format."""
    if not format_code(fmt)[1]:
        return None
    from precision_lab.quant.philox import state_rbits

    B, H, R, C = shape
    dev = seq_ids.device
    return state_rbits(seed, layer, seq_ids.view(B, 1), torch.arange(H, device=dev).view(1, H),
                       torch.as_tensor(events, device=dev).view(B, 1), (R, C), copy, device=dev)
