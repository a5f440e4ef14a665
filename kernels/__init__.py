"""precision_lab.kernels — see docs/design.md §2. Installed as a subpackage of precision_lab.

Run from the repository root, a bare ``import kernels`` finds this folder before any installed
package of that name (Hugging Face's kernel hub, which transformers imports: optionally before 5.25,
as a hard dependency since). So the bare import stands aside:

* where a package named ``kernels`` is installed, the bare import returns that package (found on
  ``sys.path`` without the repository root): transformers, setuptools' entry points and anything
  else get the hub package they asked for;
* where none is, it gives an empty module with no ``__file__``, ``__path__`` or ``__version__``,
  which optional-package probes read as "not installed", and any use of it (``kernels.x``,
  ``from kernels import x``, ``import kernels.x``) raises an ImportError that says to import
  ``precision_lab.kernels``.

Either way nothing of this folder is loaded twice.
"""
if __name__ == "kernels":
    import importlib.machinery as _machinery
    import importlib.util as _util
    import os as _os
    import sys as _sys

    _ROOT = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
    _spec = _machinery.PathFinder.find_spec(
        "kernels", [p for p in _sys.path if _os.path.abspath(p or _os.curdir) != _ROOT])
    if _spec is not None and _spec.loader is not None:
        # the installed package replaces this module: the import statement returns sys.modules["kernels"]
        _installed = _util.module_from_spec(_spec)
        _sys.modules["kernels"] = _installed
        try:
            _spec.loader.exec_module(_installed)
        except BaseException:
            del _sys.modules["kernels"]
            raise
    else:
        _BARE_IMPORT = (
            "The folder 'kernels/' is installed as 'precision_lab.kernels'; import it under that name "
            "(pip install -e . first). From the repository root, this folder hides the PyPI package "
            "'kernels' (Hugging Face's kernel hub) when that is not installed."
        )
        del __file__, __path__  # noqa: F821 - module attributes set by the import system
        globals().pop("__cached__", None)

        def __getattr__(name: str):
            if name.startswith("__"):  # probes ask for __version__, __file__, ...: absent, not an error
                raise AttributeError(name)
            raise ImportError(_BARE_IMPORT)
    del _machinery, _util, _os, _sys, _ROOT, _spec
