"""Makes ``lm_eval --model replayssm`` work without importing precision-lab first.

lm-eval 0.4.13 finds models only in its own registry (``lm_eval.api.registry.model_registry``,
filled from the built-in table in ``lm_eval/models/__init__.py`` and by ``@register_model`` when a
module is imported); it reads no entry-point group, and its CLI has no option to import a plug-in
module. So an installed package cannot be found by name unless something registers it in every
process that runs lm-eval (including each data-parallel rank).

This module does that with the standard start-up hook: a one-line ``.pth`` file in site-packages
(``PTH_NAME``) calls ``install()``, which adds an import hook that waits for
``lm_eval.api.registry`` to be imported and then registers ``replayssm`` as a *lazy* placeholder
(``"precision_lab.evals.lmeval_model:ReplaySSMLM"``). Nothing heavy is imported at start-up, and a
process that never imports lm-eval pays only the cost of reading this file.

    python -m precision_lab.evals.lmeval_plugin --install     # writes the .pth by hand
    python -m precision_lab.evals.lmeval_plugin --check       # says whether lm_eval sees replayssm

Installing precision-lab writes the ``.pth`` (setup.py adds it to both the regular and the editable
wheel, so ``pip install -e .`` is enough); ``--install`` writes it by hand, e.g. into another
environment's site-packages with ``--site-dir``.
In Python, ``import precision_lab.evals.lmeval_model`` registers the model directly.
"""
from __future__ import annotations

import importlib.abc
import sys
from pathlib import Path

MODEL_NAME = "replayssm"
TARGET = "precision_lab.evals.lmeval_model:ReplaySSMLM"
PTH_NAME = "precision_lab_lmeval.pth"
# .pth lines that start with "import" are executed at interpreter start-up; install() never raises.
PTH_LINE = "import precision_lab.evals.lmeval_plugin as _pl_lmeval; _pl_lmeval.install()\n"
_HOOKED_MODULE = "lm_eval.api.registry"


def register() -> None:
    """Register ``replayssm`` (lazily) in lm-eval's model registry; idempotent."""
    # lm-eval fills its built-in table only while the registry is empty (get_model), so load that
    # table first: otherwise our entry would hide "hf", "vllm", ...
    import lm_eval.models  # noqa: F401
    from lm_eval.api.registry import model_registry

    if MODEL_NAME not in model_registry:
        model_registry.register(MODEL_NAME, target=TARGET)


class _RegisterAfterImport(importlib.abc.MetaPathFinder):
    """Finds lm_eval.api.registry through the other finders and registers us once it has run."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _HOOKED_MODULE:
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            _remove_hook()
            _register_quietly()

        spec.loader.exec_module = exec_module  # this spec's loader instance only
        return spec


def _remove_hook() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _RegisterAfterImport)]


def _register_quietly() -> None:
    try:
        register()
    except Exception as e:  # noqa: BLE001 - a broken plug-in must never break lm-eval itself
        print(f"precision-lab: could not register lm-eval model {MODEL_NAME!r}: {e}", file=sys.stderr)


def install() -> None:
    """Register now if lm-eval's registry is loaded, else when it gets imported. Never raises."""
    try:
        if _HOOKED_MODULE in sys.modules:
            _register_quietly()
        elif not any(isinstance(f, _RegisterAfterImport) for f in sys.meta_path):
            sys.meta_path.insert(0, _RegisterAfterImport())
    except Exception:  # noqa: BLE001 - runs at interpreter start-up
        pass


def write_pth(site_dir: str | Path | None = None) -> Path:
    """Write the start-up hook into ``site_dir`` (default: this interpreter's purelib)."""
    import sysconfig

    d = Path(site_dir) if site_dir is not None else Path(sysconfig.get_paths()["purelib"])
    p = d / PTH_NAME
    p.write_text(PTH_LINE)
    return p


def _check() -> int:
    from lm_eval.api.registry import get_model

    cls = get_model(MODEL_NAME)
    print(f"lm-eval resolves {MODEL_NAME!r} to {cls.__module__}.{cls.__name__}")
    return 0


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m precision_lab.evals.lmeval_plugin",
                                 description="Install or check the start-up hook that registers the lm-eval "
                                             "model 'replayssm'.")
    ap.add_argument("--install", action="store_true", help=f"write {PTH_NAME} into site-packages")
    ap.add_argument("--site-dir", default=None, help="where to write it (default: this Python's purelib)")
    ap.add_argument("--check", action="store_true", help="resolve 'replayssm' through lm-eval's registry")
    args = ap.parse_args(argv)
    if args.install:
        print(f"wrote {write_pth(args.site_dir)}")
    if args.check or not args.install:
        return _check()
    return 0


if __name__ == "__main__":
    sys.exit(main())
