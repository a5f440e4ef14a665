"""Checks shared by the Mamba-2 and GDN decode-kernel tests (pools are the same PackedState)."""
import torch
from precision_lab.kernels.decode_state import PackedState


def seeded_randn(*shape, seed, device):
    """Normal draws from a seeded CPU generator, moved to ``device``: a test's inputs never depend on
    which tests ran before it in the same process (the global generators do), and the CPU and GPU
    runs of a test see the same numbers."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(device)


def rel(a, b):
    """Per-tensor relative RMS error of a against b."""
    a, b = a.float().cpu(), b.float().cpu()  # (the kernels' tensors may be on the GPU)
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def state_cols(fmts):
    """Last state axis for a test: awkward (20) unless NVFP4 needs a multiple of 16."""
    return 32 if any(f.startswith("nvfp4") for f in fmts) else 20


def conventional_format_cases(fmts, table):
    """(format, launch shape) cases of a conventional-step test: each format at the test's default
    shape (None, None) and, where the wrappers' ``CONVENTIONAL_FORMAT_SHAPES`` ``table`` has one, at
    that format's own large-batch (rows, warps)."""
    return [(f, sh) for f in fmts for sh in [(None, None)] + ([table[f]] if f in table else [])]


def gather(pool, slots):
    """PackedState of the batch's live slots (bytes, for exact comparisons)."""
    live = slots >= 0
    sel = lambda t: None if t is None else t[slots[live]].cpu()  # noqa: E731
    return PackedState(pool.fmt, sel(pool.data), sel(pool.scale), sel(pool.gscale), pool.R, pool.C)


def assert_same_codes(a: PackedState, b: PackedState):
    """Stored codes equal bit for bit (floats compared as their integer patterns, so -0 and NaN count)."""
    for name in ("data", "scale", "gscale"):
        x, y = getattr(a, name), getattr(b, name)
        if x is None:
            assert y is None
            continue
        if x.dtype in (torch.bfloat16, torch.float16):
            x, y = x.view(torch.int16), y.view(torch.int16)
        elif x.dtype == torch.float32:
            x, y = x.view(torch.int32), y.view(torch.int32)
        assert torch.equal(x, y.to(x.dtype)), f"{name} codes differ in {(x != y).sum().item()} places"


class LaunchRecorder:
    """Stands in for a Triton kernel object: ``kernel[grid](*args, **kw)`` records (name, kw) in
    ``launches``, the grid as ``kw["_grid"]``, and launches nothing (tests of what a wrapper hands its
    kernels)."""

    def __init__(self, name: str, launches: list):
        self.name, self.launches = name, launches

    def __getitem__(self, grid):
        return lambda *a, **kw: self.launches.append((self.name, {**kw, "_grid": grid}))


def skip_without_pdl(device: str) -> None:
    """Skip a test that needs programmatic dependent launch (a GPU of compute capability ≥ 9)."""
    import pytest

    if device == "cpu" or torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs a GPU of compute capability 9.0 or newer")


def stub_overlapped_launches(monkeypatch, module, scores_kernel: str, step_kernel: str, launches: list) -> None:
    """Replace a decode module's scores and step kernels by ``LaunchRecorder``s and take the device to
    have programmatic dependent launch (the wrapper's ``measured_faster`` rule still applies)."""
    monkeypatch.setattr(module, "overlap_scores_launch",
                        lambda dev, override, measured_faster=True: measured_faster if override is None else override)
    monkeypatch.setattr(module, scores_kernel, LaunchRecorder("scores", launches))
    monkeypatch.setattr(module, step_kernel, LaunchRecorder("step", launches))


def assert_shape_constants(kernel, names) -> None:
    """The kernel takes the model's shape arguments ``names`` as compile-time constants: its masks,
    divisions by head counts and pointer arithmetic then fold at compile time (measured on the H200
    with them as runtime values: the NVFP4 output-only steps 11-12 % slower, some flushes up to
    10 %; docs/design.md §7)."""
    import inspect

    fn = getattr(kernel, "fn", kernel)  # the Python function under the JIT (or interpreter) object
    annotation = {name: str(p.annotation) for name, p in inspect.signature(fn).parameters.items()}
    runtime = [n for n in names if "constexpr" not in annotation[n]]
    assert not runtime, f"runtime shape arguments: {runtime}"


def with_rule_both_ways(monkeypatch, module, rule: str, run) -> list:
    """``run()`` with the kernel module's rule constant ``rule`` set True, then False: both results, in
    that order (for the load-order switches, whose two forms must agree)."""
    out = []
    for on in (True, False):
        monkeypatch.setattr(module, rule, on)
        out.append(run())
    return out
