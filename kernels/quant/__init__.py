"""precision_lab.kernels.quant — Triton quantize/dequantize kernels (math: README.md here).

    from precision_lab.kernels.quant import quantize, dequantize, nvfp4_quantize
    qt = quantize(x, "nvfp4")          # == get_quantizer("nvfp4").quantize(x), bit for bit
    x_hat = dequantize(qt)             # where Triton cannot run, the torch reference serves both

``codecs`` holds the ``@triton.jit`` encode/decode helpers other kernels import.
"""
from .triton_quant import (
    TRITON_FORMATS,
    cast_dequantize,
    cast_quantize,
    dequantize,
    nvfp4_dequantize,
    nvfp4_quantize,
    quantize,
)

__all__ = [
    "TRITON_FORMATS",
    "cast_dequantize",
    "cast_quantize",
    "dequantize",
    "nvfp4_dequantize",
    "nvfp4_quantize",
    "quantize",
]
