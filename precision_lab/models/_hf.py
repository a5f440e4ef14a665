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


def hub_unreachable_reason(timeout: float = 3.0) -> str | None:
    """None when the model hub may be reachable; else why it is not (offline mode, or its host does
    not answer within ``timeout`` seconds). Without this check an unreachable hub costs about a
    minute of retries inside ``from_pretrained`` before its error."""
    import os
    import socket
    from concurrent.futures import ThreadPoolExecutor
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return "offline mode (HF_HUB_OFFLINE is set)"
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None  # traffic goes through a proxy; a direct probe would say nothing
    url = urlparse(constants.ENDPOINT)
    host, port = url.hostname or "", url.port or (443 if url.scheme == "https" else 80)

    def connect():
        with socket.create_connection((host, port), timeout=timeout):
            pass

    pool = ThreadPoolExecutor(max_workers=1)  # name resolution has no timeout of its own
    try:
        pool.submit(connect).result(timeout=timeout + 1)
    except Exception as e:  # noqa: BLE001 - any failure to connect means the same to the caller
        return f"cannot connect to {constants.ENDPOINT} ({type(e).__name__}: {e or 'timed out'})"
    finally:
        pool.shutdown(wait=False)
    return None
