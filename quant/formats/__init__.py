"""Built-in formats; importing this package registers them (``precision-lab formats`` lists them).

- ``element``: fp32, bf16, fp16, fp8e4m3, fp8e5m2 (+ -sr; FP8 also -mat / -row fp32 scales)
- ``nvfp4``:   nvfp4 (+ -row, -2d, -sr), NVIDIA's two-level scale chain (docs/design.md §5)
- ``mx``:      mxfp8, mxfp4 (+ -floor, -sr), OCP MX with E8M0 block scales
"""
from . import element, mx, nvfp4
from .element import ElementQuantizer
from .mx import MXQuantizer
from .nvfp4 import NVFP4Quantizer

__all__ = ["ElementQuantizer", "MXQuantizer", "NVFP4Quantizer", "element", "mx", "nvfp4"]
