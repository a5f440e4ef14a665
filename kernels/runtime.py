"""Can a Triton kernel run on this tensor's device? One answer for every launcher.

Triton compiles for CUDA devices; on the CPU it runs only under its interpreter, which must be
switched on with ``TRITON_INTERPRET=1`` *before* triton is imported. Without either, a launch dies
deep inside triton with "0 active drivers"; launchers ask here first and say what to do instead.
"""
from __future__ import annotations

import os

import torch


def triton_unavailable_reason(device: torch.device | str) -> str | None:
    """None when Triton kernels can run on ``device``, else a short reason."""
    device = torch.device(device)
    if device.type == "cuda":
        return None
    if device.type == "cpu":
        if os.environ.get("TRITON_INTERPRET") == "1":
            return None
        return "CPU tensors and TRITON_INTERPRET is not 1"
    return f"no Triton backend for device type {device.type!r}"


def require_triton(device: torch.device | str, what: str) -> None:
    """Raise a RuntimeError that says how to proceed when Triton cannot run on ``device``."""
    reason = triton_unavailable_reason(device)
    if reason is not None:
        raise RuntimeError(f"{what}: Triton kernels cannot run here ({reason}). Use CUDA tensors, or set "
                           "TRITON_INTERPRET=1 before importing triton to run them in the CPU interpreter")
