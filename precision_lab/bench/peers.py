"""Peer implementations timed beside ours: flash-linear-attention's fused recurrent decode steps
(``fused_recurrent_simple_gla`` as the Mamba-2-like peer, ``fused_recurrent_gated_delta_rule`` for
GDN), at the same shapes, with an fp32 state.
"""
from __future__ import annotations

import os
import sys
from importlib import metadata

import torch

from .byte_models import bytes_fla_step
from .problems import GDN, MAMBA2
from .timing import n_sets, time_launches

#: the distributions a peer run may come from (fla ships as both)
FLA_PACKAGES = ("flash-linear-attention", "fla-core")


def fla_versions() -> dict[str, str | None]:
    """{distribution: version} of the installed flash-linear-attention packages; an fla importable
    without package metadata (a source checkout on the path) as {"fla": its __version__}."""
    out = {}
    for name in FLA_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    if not out and sys.modules.get("fla") is not None:
        out["fla"] = getattr(sys.modules["fla"], "__version__", None)
    return out


def fla_autotuners() -> list:
    """The triton Autotuner objects of the imported fla kernels (unwrapping heuristics wrappers)."""
    from triton.runtime.autotuner import Autotuner

    found = []
    for name, mod in list(sys.modules.items()):
        if not name.startswith("fla.ops") or mod is None:
            continue
        for v in vars(mod).values():
            while v is not None and not isinstance(v, Autotuner) and hasattr(v, "fn"):
                v = v.fn
            if isinstance(v, Autotuner) and all(v is not f for f in found):
                found.append(v)
    return found


def fla_peer(op, B, dev):
    """A result row timing fla's fused recurrent step for ``op`` at batch B (an "error" row when fla is
    not importable or the call fails)."""
    # fla autotunes its kernels with keys that leave out the batch size and caches the choice on disk:
    # the config picked at the first (batch 1) call would then time every batch (one run measured the
    # Mamba-2-like peer 30% slower at every batch that way). A peer gets its best: the disk cache is
    # off and the in-memory choices are cleared before each batch, so it autotunes at that batch.
    os.environ.setdefault("FLA_CACHE_RESULTS", "0")
    try:
        # fla imports transformers, whose probe for the 'kernels' package must not see this
        # repository's kernels/ folder: run the probe with the root hidden first
        from precision_lab.models._hf import import_transformers

        import_transformers()
        if op == "gdn":
            from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as fn
        else:
            from fla.ops.simple_gla import fused_recurrent_simple_gla as fn
    except Exception as e:  # noqa: BLE001
        return {"op": op, "kernel": "fla", "batch": B, "error": f"fla not importable: {e}"}
    bf = torch.bfloat16
    nbytes = bytes_fla_step(op, B)
    if op == "gdn":
        Hk, Hv, V, K = GDN["Hk"], GDN["Hv"], GDN["V"], GDN["K"]

        def make():
            return dict(q=torch.randn(B, 1, Hk, K, device=dev, dtype=bf), k=torch.randn(B, 1, Hk, K, device=dev, dtype=bf),
                        v=torch.randn(B, 1, Hv, V, device=dev, dtype=bf),
                        g=-0.1 * torch.rand(B, 1, Hv, device=dev, dtype=bf),
                        beta=torch.rand(B, 1, Hv, device=dev, dtype=bf),
                        initial_state=0.1 * torch.randn(B, Hv, K, V, device=dev))

        def call(a):
            return fn(a["q"], a["k"], a["v"], g=a["g"], beta=a["beta"], initial_state=a["initial_state"],
                      output_final_state=True, use_qk_l2norm_in_kernel=True)
    else:
        H, P, N = MAMBA2["H"], MAMBA2["P"], MAMBA2["N"]

        def make():
            return dict(q=torch.randn(B, 1, H, N, device=dev, dtype=bf), k=torch.randn(B, 1, H, N, device=dev, dtype=bf),
                        v=torch.randn(B, 1, H, P, device=dev, dtype=bf),
                        g=-0.1 * torch.rand(B, 1, H, device=dev, dtype=torch.float32),
                        initial_state=0.1 * torch.randn(B, H, N, P, device=dev))

        def call(a):
            return fn(a["q"], a["k"], a["v"], g=a["g"], initial_state=a["initial_state"], output_final_state=True)
    nsets = n_sets(nbytes)
    sets = [make() for _ in range(nsets)]
    tuners = fla_autotuners()
    for at in tuners:
        at.cache.clear()
    try:
        with torch.no_grad():
            us, how = time_launches(lambda i: call(sets[i]), nsets)
    except Exception as e:  # noqa: BLE001
        return {"op": op, "kernel": "fla", "batch": B, "error": f"{type(e).__name__}: {e}"}
    sets.clear()
    torch.cuda.empty_cache()
    chosen = {getattr(at, "base_fn", at.fn).__name__: str(at.best_config) for at in tuners if at.cache}
    return {"op": op, "kernel": "fla", "batch": B, "us": us, "bytes": nbytes, "GBps": nbytes / us / 1e3,
            "timing": how, "buffer_sets": nsets, "autotuned_at_this_batch": chosen,
            "implementation": fn.__module__ + "." + fn.__name__}
