"""Test-wide setup: CPU runs Triton kernels under the interpreter; HF caches go to a scratch path."""
import os
import tempfile

# Must be set before triton is imported anywhere: without a GPU, kernels run in the interpreter.
try:
    import torch

    _has_cuda = torch.cuda.is_available()
except ImportError:  # pragma: no cover
    _has_cuda = False
if not _has_cuda:
    os.environ.setdefault("TRITON_INTERPRET", "1")

_scratch = tempfile.mkdtemp(prefix="precision-lab-tests-")
os.environ.setdefault("HF_DATASETS_CACHE", os.path.join(_scratch, "datasets"))
os.environ.setdefault("HF_HOME", os.path.join(_scratch, "hf"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest  # noqa: E402

# transformers probes for Hugging Face's `kernels` package; run that probe once, up front.
from precision_lab.models._hf import import_transformers  # noqa: E402

import_transformers()

# One intra-op thread per test process: CI runs two xdist workers on two cores, and oversubscribed
# OpenMP turns microsecond-sized CPU ops into milliseconds.
try:
    torch.set_num_threads(1)
except NameError:  # pragma: no cover - torch missing
    pass


@pytest.fixture
def device():
    """'cuda' where a GPU is present (the same tests then run the compiled kernels), else 'cpu'."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def policy_parses(monkeypatch):
    """Records every StatePolicy.parse call made while the test runs: ``strings`` (texts parsed) and
    ``built`` (StatePolicy objects given in and replaced by a new one, e.g. to change the seed).
    A parse of an object that returns the object itself is a no-op and is not recorded."""
    from types import SimpleNamespace

    from precision_lab.policy import StatePolicy

    rec = SimpleNamespace(strings=[], built=[])
    parse = StatePolicy.__dict__["parse"].__func__

    def counting(cls, text, *, seed=None):
        out = parse(cls, text, seed=seed)
        if isinstance(text, str):
            rec.strings.append(text)
        elif out is not text:
            rec.built.append(text)
        return out

    def clear():
        rec.strings.clear()
        rec.built.clear()

    rec.clear = clear
    monkeypatch.setattr(StatePolicy, "parse", classmethod(counting))
    return rec
