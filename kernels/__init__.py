"""precision_lab.kernels — see docs/design.md §2. Installed as a subpackage of precision_lab.

Run from the repository root, a bare ``import kernels`` finds this folder instead of an installed
package of that name (Hugging Face's kernel hub). transformers imports ``kernels`` to ask whether
that optional package is installed, so the bare import must not raise: it gives an empty module
with no ``__file__``, ``__path__`` or ``__version__``, which such probes read as "not installed",
and any use of it (``kernels.x``, ``from kernels import x``, ``import kernels.x``) raises an
ImportError that says to import ``precision_lab.kernels``. Nothing of this folder is loaded twice.
"""
if __name__ == "kernels":
    _BARE_IMPORT = (
        "The folder 'kernels/' is installed as 'precision_lab.kernels'; import it under that name "
        "(pip install -e . first). From the repository root, this folder hides the PyPI package 'kernels' "
        "(Hugging Face's kernel hub); run from another directory to use that one."
    )
    del __file__, __path__  # noqa: F821 - module attributes set by the import system
    globals().pop("__cached__", None)

    def __getattr__(name: str):
        if name.startswith("__"):  # probes ask for __version__, __file__, ...: absent, not an error
            raise AttributeError(name)
        raise ImportError(_BARE_IMPORT)
