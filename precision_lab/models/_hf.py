"""Import transformers, preferring an installed Hugging Face ``kernels`` package to our folder.

transformers probes for the optional package ``kernels`` (Hugging Face's kernel hub). From the
repository root that probe finds our top-level ``kernels/`` folder, whose bare import is an empty
module the probe reads as "not installed" (``kernels/__init__.py``), so any import order works.
Running the first probe with the repository root hidden from ``sys.path`` lets transformers find the
real package instead when it is installed.
"""
from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]


def import_transformers():
    if "transformers.integrations.hub_kernels" in sys.modules:
        import transformers

        return transformers
    saved = list(sys.path)
    try:
        sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _ROOT]
        import transformers
        import transformers.integrations.hub_kernels  # noqa: F401  (the probe)
    finally:
        sys.path[:] = saved
    return transformers
