"""Storage-format codes of every Triton kernel: one table.

A kernel takes a state format as a constexpr code (``FMT_*`` on the host; the same values as the
``C_*`` constexpr globals a ``@triton.jit`` body reads). Stochastic rounding is a separate flag, so
a quantizer name maps to (code, SR) in ``KERNEL_FORMATS``; formats outside it have no kernel and go
to the torch engines.
"""
from __future__ import annotations

import triton.language as tl

FMT_FP32, FMT_BF16, FMT_FP16, FMT_E4M3, FMT_E5M2, FMT_NVFP4 = 0, 1, 2, 3, 4, 5
C_FP32, C_BF16, C_FP16 = tl.constexpr(FMT_FP32), tl.constexpr(FMT_BF16), tl.constexpr(FMT_FP16)
C_E4M3, C_E5M2, C_NVFP4 = tl.constexpr(FMT_E4M3), tl.constexpr(FMT_E5M2), tl.constexpr(FMT_NVFP4)

#: quantizer name -> (format code, stochastic rounding)
KERNEL_FORMATS: dict[str, tuple[int, bool]] = {
    "fp32": (FMT_FP32, False),
    "bf16": (FMT_BF16, False), "bf16-sr": (FMT_BF16, True),
    "fp16": (FMT_FP16, False), "fp16-sr": (FMT_FP16, True),
    "fp8e4m3": (FMT_E4M3, False), "fp8e4m3-sr": (FMT_E4M3, True),
    "fp8e5m2": (FMT_E5M2, False), "fp8e5m2-sr": (FMT_E5M2, True),
    "nvfp4": (FMT_NVFP4, False), "nvfp4-sr": (FMT_NVFP4, True),
}

#: bytes per element of the element formats (NVFP4: ``nvfp4_matrix_bytes``)
ELEMENT_BYTES = {FMT_FP32: 4, FMT_BF16: 2, FMT_FP16: 2, FMT_E4M3: 1, FMT_E5M2: 1}


def nvfp4_matrix_bytes(R: int, C: int) -> float:
    """Storage of one [R, C] NVFP4 matrix: 4-bit codes, one E4M3 scale per 16 elements, an fp32
    global scale."""
    return R * C / 2 + R * C / 16 + 4


def matrix_bytes(code: int, R: int, C: int) -> float:
    """Storage bytes of one [R, C] state matrix in the format ``code``."""
    if code == FMT_NVFP4:
        return nvfp4_matrix_bytes(R, C)
    return R * C * ELEMENT_BYTES[code]
