"""Make an interpreter import this checkout's precision_lab.{quant,kernels,evals}.

setup.py maps the top-level folders quant/, kernels/ and evals/ to precision_lab.quant, .kernels and
.evals. An editable install made from another checkout (the main one, when the tests run in a second
git worktree) maps them to that checkout's folders, and its lm-eval start-up hook may already have
imported ``precision_lab.evals`` from there. ``install(root)`` puts a finder for this checkout's
folders first and drops such modules, so they are imported again from here. ``tests/conftest.py``
calls it for the test processes and, through ``sitecustomize``, for the interpreters they start.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from pathlib import Path

FOLDERS = ("quant", "kernels", "evals")


class _ThisCheckout(importlib.abc.MetaPathFinder):
    def __init__(self, mapped: dict[str, Path]):
        self.mapped = mapped

    def find_spec(self, fullname, path, target=None):
        folder = self.mapped.get(fullname)
        if folder is None or not (folder / "__init__.py").is_file():
            return None
        return importlib.util.spec_from_file_location(fullname, folder / "__init__.py",
                                                      submodule_search_locations=[str(folder)])


def mapped_elsewhere(root: Path) -> bool:
    """Whether ``precision_lab`` is this checkout's while a mapped subpackage resolves to other files."""
    spec = importlib.util.find_spec("precision_lab")
    if spec is None or spec.origin is None or Path(spec.origin).resolve().parent != root / "precision_lab":
        return False  # precision_lab itself is an installed copy (or absent): leave everything as it is
    for d in FOLDERS:
        sub = importlib.util.find_spec(f"precision_lab.{d}")
        if sub is None or sub.origin is None or not Path(sub.origin).resolve().is_relative_to(root / d):
            return True
    return False


def install(root: Path) -> None:
    root = Path(root).resolve()
    mapped = {f"precision_lab.{d}": root / d for d in FOLDERS}
    if not any(isinstance(f, _ThisCheckout) for f in sys.meta_path):
        sys.meta_path.insert(0, _ThisCheckout(mapped))
    pkg = sys.modules.get("precision_lab")
    dropped = set()
    for name in list(sys.modules):
        top = ".".join(name.split(".")[:2])
        where = getattr(sys.modules[name], "__file__", None)
        if top in mapped and where and not Path(where).resolve().is_relative_to(mapped[top]):
            del sys.modules[name]
            dropped.add(name)
            if name == top and pkg is not None and hasattr(pkg, name.split(".")[1]):
                delattr(pkg, name.split(".")[1])
    # import hooks the dropped modules installed (the other checkout's lm-eval start-up hook) go too,
    # and this checkout's hook takes their place: two copies would call each other without end
    hooks = [f for f in sys.meta_path if type(f).__module__ in dropped]
    if hooks:
        sys.meta_path[:] = [f for f in sys.meta_path if f not in hooks]
        if any(type(f).__module__ == "precision_lab.evals.lmeval_plugin" for f in hooks):
            from precision_lab.evals import lmeval_plugin

            lmeval_plugin.install()
