"""Benchmarks as a library: what ``scripts/bench_*.py`` run, and what their result files are.

Modules by role (none imports torch or triton until its own module is imported):

- ``timing``         cold-L2 launch timing (CUDA-graph replay over independent buffer sets), CUDA-event
                     medians, ``do_bench`` medians
- ``ceiling``        the copy-bandwidth ceiling each GPU run measures beside its kernels
- ``byte_models``    the explicit bytes each timed call must move (GB/s and "% of copy" come from them)
- ``problems``       model shapes and the inputs timed: decode-step buffer sets, scan inputs, states
- ``peers``          flash-linear-attention's decode steps, timed as peers, and their versions
- ``decode_kernels`` / ``quant_kernels`` / ``scan_kernels`` / ``kl_engine``: the four kernel and engine
                     benchmarks (their result classes in ``schema``)
- ``generate``       whole-model generation against plain transformers (its result class in
                     ``generate_schema``)
- ``tables``, ``plots`` Markdown tables and PNGs a benchmark writes beside its JSON

A script is argument parsing plus one call into its benchmark module.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

_MAPPED = ("quant", "kernels", "evals")


def use_checkout(root: str | Path) -> None:
    """Make ``precision_lab.{quant,kernels,evals}`` importable from the checkout at ``root`` when the
    package is not installed (a copy of the tree on a GPU machine): they live in top-level folders
    that an install maps under ``precision_lab``. A no-op where they already import."""
    root = Path(root).resolve()
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    import precision_lab

    for folder in _MAPPED:
        name = f"precision_lab.{folder}"
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
            continue
        except ImportError:
            pass
        spec = importlib.util.spec_from_file_location(name, root / folder / "__init__.py",
                                                      submodule_search_locations=[str(root / folder)])
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        setattr(precision_lab, folder, mod)
