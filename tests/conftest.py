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
