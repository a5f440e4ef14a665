"""Test-wide setup: tests import this checkout; CPU runs Triton kernels under the interpreter; HF caches
go to a scratch path."""
import os
import tempfile
from pathlib import Path


def _import_this_checkout() -> None:
    """Tests import this checkout's code, also in a second git worktree whose editable install belongs
    to another checkout (tests/_this_checkout.py); interpreters the tests start do too, through a
    ``sitecustomize`` put first on their PYTHONPATH."""
    import importlib.util

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("_this_checkout", Path(__file__).with_name("_this_checkout.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if not mod.mapped_elsewhere(root):
        return
    mod.install(root)
    boot = Path(tempfile.mkdtemp(prefix="precision-lab-checkout-"))
    (boot / "sitecustomize.py").write_text(
        "import importlib.util as _u\n"
        f"_s = _u.spec_from_file_location('_this_checkout', {str(Path(__file__).with_name('_this_checkout.py'))!r})\n"
        "_m = _u.module_from_spec(_s); _s.loader.exec_module(_m)\n"
        f"_m.install({str(root)!r})\n")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(boot), *filter(None, [os.environ.get("PYTHONPATH")])])


_import_this_checkout()

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
