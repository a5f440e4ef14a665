"""Provenance every result JSON carries (docs/design.md §11): versions, git hash, device, command line."""
from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

_PACKAGES = ("precision-lab", "torch", "triton", "transformers", "datasets", "lm-eval", "numpy")


def git_hash() -> str | None:
    """Commit of the source tree (with '-dirty' when it has uncommitted changes), or None. A copy of
    the tree shipped elsewhere (e.g. to a GPU machine) names its commit in the environment variable
    PRECISION_LAB_GIT, which wins: such a copy may carry no .git, or a stale one whose HEAD is not
    the commit of the files beside it."""
    if os.environ.get("PRECISION_LAB_GIT"):
        return os.environ["PRECISION_LAB_GIT"]
    root = Path(__file__).resolve().parent.parent
    try:
        h = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        if h.returncode != 0:
            return os.environ.get("PRECISION_LAB_GIT")
        d = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                           capture_output=True, text=True, timeout=5)
        return h.stdout.strip() + ("-dirty" if d.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return os.environ.get("PRECISION_LAB_GIT")


def versions() -> dict[str, str | None]:
    out = {}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    out["python"] = platform.python_version()
    return out


def device_info() -> dict:
    info: dict = {"host": platform.node(), "cpu": platform.processor() or platform.machine()}
    try:
        import torch

        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
            info["gpu_count"] = torch.cuda.device_count()
            info["cuda"] = torch.version.cuda
        else:
            info["gpu"] = None
    except ImportError:  # pragma: no cover
        pass
    info["triton_interpret"] = os.environ.get("TRITON_INTERPRET") == "1"
    return info


def provenance(**extra) -> dict:
    """A dict for the 'provenance' key of a result JSON; ``extra`` adds run settings (policy, model...)."""
    return {
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "git": git_hash(),
        "versions": versions(),
        "device": device_info(),
        **extra,
    }
