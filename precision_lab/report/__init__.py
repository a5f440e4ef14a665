"""Report builder (``precision-lab report``): result JSON in, Markdown + static HTML + PNG figures out.

``build_report(paths, out_dir)`` is in ``build.py``; it is imported lazily so that
``precision_lab.report.style`` (used by the simulator's own plot) stays light.
"""
from __future__ import annotations

from .results import ResultError, load_result, load_results

__all__ = ["ResultError", "build_report", "load_result", "load_results"]


def __getattr__(name: str):
    if name == "build_report":
        from .build import build_report

        return build_report
    raise AttributeError(name)
