"""precision-lab: numerical precision of recurrent (SSM) states in hybrid LLMs.

Public API (docs/design.md §4–§6):

    from precision_lab import StatePolicy, run_layer, Mamba2Inputs, GDNInputs, KDAInputs
    y, stats = run_layer(inputs, StatePolicy.parse("split:fp16-sr/nvfp4@L16"), engine="decode")

    from precision_lab.quant import get_quantizer, register_quantizer
"""
from __future__ import annotations

__version__ = "0.1.0"

from .policy import StatePolicy

# Names resolved lazily so `import precision_lab` stays light (no transformers/triton import).
_LAZY = {
    "run_layer": "precision_lab.layer",
    "Mamba2Inputs": "precision_lab.layer",
    "GDNInputs": "precision_lab.layer",
    "KDAInputs": "precision_lab.layer",
    "LayerStats": "precision_lab.layer",
    "LayerState": "precision_lab.state",
    "Drafts": "precision_lab.layer",
    "random_inputs": "precision_lab.layer",
    "get_quantizer": "precision_lab.quant",
    "register_quantizer": "precision_lab.quant",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'precision_lab' has no attribute {name!r}")


__all__ = ["StatePolicy", "__version__", *_LAZY]
