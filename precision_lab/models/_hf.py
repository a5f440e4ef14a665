"""Import transformers safely from the repository root.

transformers probes ``import kernels`` (Hugging Face's kernel hub) at import time. When the current
directory is the repository root (``python -m pytest``, ``python -c``), that finds our top-level
``kernels/`` folder, whose ``__init__`` refuses a bare import on purpose (docs/design.md §2), and
transformers' import fails. The probe runs once per process, so we run it here with the repository
root hidden from ``sys.path``; transformers then records the hub package as absent (it is not
installed) and never probes again.
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
