"""Custom quantizers used by the tests: each implements only fake(x), as a user's would."""
import torch


class HalfQuantizer:
    """Round to fp16 (RNE) and back: a valid custom quantizer with only fake()."""

    name = "test-half"

    def fake(self, x):
        return x.to(torch.float16).to(torch.float32)


class BrokenQuantizer:
    name = "test-broken"

    def fake(self, x):
        raise RuntimeError("this quantizer is broken on purpose")


class NaNQuantizer:
    name = "test-nan"

    def fake(self, x):
        return torch.full_like(x, float("nan"))
