"""One renderer per result kind. Each takes the results of one kind and one setup (see
``results.setup_key``) and returns document blocks; figures go through ``Context.figure``."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..style import PolicyColors, save


@dataclass
class Context:
    """What every section shares: the report folder, the policy colours, the figure names used."""

    out_dir: Path
    colors: PolicyColors
    figures: list[Path] = field(default_factory=list)

    def figure(self, fig, stem: str) -> str:
        """Save ``fig`` as figures/<stem>.png (made unique) and return its path relative to the report."""
        safe = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-") or "figure"
        name, n = safe, 1
        while any(p.stem == name for p in self.figures):
            n += 1
            name = f"{safe}-{n}"
        path = self.out_dir / "figures" / f"{name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        save(fig, path)
        self.figures.append(path)
        return f"figures/{name}.png"


def renderers():
    """kind → render(results, ctx) -> blocks (imported lazily: matplotlib is heavy)."""
    from . import (
        bench_generate_section,
        bench_section,
        kl_layers_section,
        kl_section,
        lmeval_section,
        sim_section,
    )

    return {"sim": sim_section.render, "kl": kl_section.render, "kl-layers": kl_layers_section.render,
            "lmeval": lmeval_section.render, "bench-kernels": bench_section.render_kernels,
            "bench-scan": bench_section.render_scan, "bench-quant": bench_section.render_quant,
            "bench-kl": bench_section.render_kl, "bench-generate": bench_generate_section.render}
