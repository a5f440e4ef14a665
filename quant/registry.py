"""Name → quantizer registry (docs/design.md §5).

Lookup order for ``get_quantizer(spec)``:
1. a ``Quantizer`` instance (or any object with ``fake``) is returned as is;
2. ``"package.module:attr"`` imports attr; a class or factory is called with the options. A module
   that is not importable from ``sys.path`` is looked up in the current directory too (as other
   command-line tools that take ``module:attr`` do), so ``mypkg/myq.py`` beside you works without
   setting ``PYTHONPATH``; the directory is on ``sys.path`` only for that import;
3. names registered with ``register_quantizer`` (the built-ins register themselves);
4. the entry-point group ``precision_lab.quantizers`` (loaded on first miss).
An unknown name raises ``ValueError`` listing every known name.
"""
from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from .base import Quantizer

ENTRY_POINT_GROUP = "precision_lab.quantizers"

_REGISTRY: dict[str, Callable[..., Any]] = {}
_entry_points_loaded = False
_builtins_loaded = False


def register_quantizer(name: str, factory: Callable[..., Any], *, overwrite: bool = False) -> None:
    """Register ``factory`` (a Quantizer subclass or a callable returning one) under ``name``."""
    if not name or any(c in name for c in ":/@ "):
        raise ValueError(f"quantizer name {name!r} must be non-empty and free of ':', '/', '@' and spaces")
    if name in _REGISTRY and not overwrite and _REGISTRY[name] is not factory:
        raise ValueError(f"a quantizer named {name!r} is already registered (pass overwrite=True to replace it)")
    _REGISTRY[name] = factory


def _load_builtins() -> None:
    global _builtins_loaded
    if not _builtins_loaded:
        _builtins_loaded = True
        importlib.import_module(".formats", __package__)  # registers the built-in formats


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in _REGISTRY:
            _REGISTRY[ep.name] = ep.load()


def known_quantizers() -> list[str]:
    _load_builtins()
    _load_entry_points()
    return sorted(_REGISTRY)


def _instantiate(factory: Callable[..., Any], options: dict[str, Any], label: str) -> Quantizer:
    q = factory(**options)
    if not hasattr(q, "fake"):
        raise TypeError(f"{label} did not produce a quantizer (an object with fake(x)); got {type(q).__name__}")
    return q


def _import_user_module(name: str):
    """Import ``name`` from sys.path, else from the current directory (for that import only)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        # Retry only when the missing module is the one asked for or a parent of it: an ImportError
        # raised inside the user's module is theirs to see unchanged.
        if e.name is None or not (name == e.name or name.startswith(e.name + ".")):
            raise
        cwd = os.getcwd()
        if any(os.path.abspath(p or os.curdir) == cwd for p in sys.path):
            raise
        sys.path.insert(0, cwd)
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as e2:
            raise ModuleNotFoundError(f"{e2} (looked on sys.path and in the current directory {cwd})",
                                      name=e2.name) from None
        finally:
            sys.path.remove(cwd)


def get_quantizer(spec: Any, **options: Any) -> Quantizer:
    """Resolve a format name, ``"module:attr"`` string or Quantizer instance to a Quantizer."""
    if not isinstance(spec, str):
        if hasattr(spec, "fake"):
            return spec
        raise TypeError(f"expected a format name or a quantizer, got {type(spec).__name__}")
    if ":" in spec:
        mod_name, _, attr = spec.partition(":")
        try:
            obj = getattr(_import_user_module(mod_name), attr)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"cannot load custom quantizer {spec!r}: {e}") from e
        return obj if hasattr(obj, "fake") and not isinstance(obj, type) else _instantiate(obj, options, spec)
    _load_builtins()
    if spec not in _REGISTRY:
        _load_entry_points()
    if spec not in _REGISTRY:
        raise ValueError(
            f"unknown quantization format {spec!r}. Known formats: {', '.join(known_quantizers())}; "
            "or give a custom quantizer as 'package.module:ClassName'."
        )
    return _instantiate(_REGISTRY[spec], options, spec)
