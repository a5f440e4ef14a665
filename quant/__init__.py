"""precision_lab.quant — quantizer protocol, registry, built-in formats, rounding and RNG (docs/design.md §5).

    q = get_quantizer("nvfp4")              # or "fp16-sr", "mypkg.mod:MyQ", a Quantizer instance
    qt = q.quantize(x, rbits=None, seed=None)
    x_hat = q.dequantize(qt); x_hat = q.fake(x)
    register_quantizer("name", factory)     # also entry-point group "precision_lab.quantizers"
"""
if __name__ == "quant":  # a bare `import quant` from the repo root would load a second, unrelated copy
    raise ImportError(
        "The folder 'quant/' is installed as 'precision_lab.quant'; import it under that name "
        "(pip install -e . first). A bare 'import quant' would also shadow the PyPI package 'quant'."
    )

from .base import QTensor, Quantizer, fake_quantize
from .registry import ENTRY_POINT_GROUP, get_quantizer, known_quantizers, register_quantizer

__all__ = [
    "ENTRY_POINT_GROUP",
    "QTensor",
    "Quantizer",
    "fake_quantize",
    "get_quantizer",
    "known_quantizers",
    "register_quantizer",
]
