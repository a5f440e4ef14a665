"""One colour per policy across every figure of a report, and shared plot helpers."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# The reference is always black; other policies take palette colours in sorted-name order, so a
# policy keeps its colour in every figure of the report whatever order the files came in.
_PALETTE = list(plt.get_cmap("tab10").colors) + list(plt.get_cmap("Dark2").colors)


# Curves of policies that track each other (split:fp32/nvfp4 and split:fp16-sr/nvfp4 often coincide)
# must stay visible: each policy also keeps one line style, cycled in the same sorted order.
_STYLES = ("-", "--", "-.", ":")


class PolicyColors:
    def __init__(self, names):
        others = sorted({n for n in names if n != "fp32"})
        self._map = {"fp32": (0.0, 0.0, 0.0)}
        self._style = {"fp32": "-"}
        for i, n in enumerate(others):
            self._map[n] = _PALETTE[i % len(_PALETTE)]
            self._style[n] = _STYLES[i % len(_STYLES)]

    def __call__(self, name: str):
        return self._map.get(name, (0.5, 0.5, 0.5))

    def style(self, name: str) -> str:
        """The policy's line style (solid for fp32 and for names the report does not know)."""
        return self._style.get(name, "-")


def new_figure(width: float = 7.0, height: float = 4.5):
    fig, ax = plt.subplots(figsize=(width, height), dpi=110)
    ax.grid(True, which="both", alpha=0.3)
    return fig, ax


def save(fig, path) -> None:
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")  # keeps legends placed outside the axes
    plt.close(fig)
