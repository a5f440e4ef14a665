"""The layer API (precision_lab.layer): entry point, inputs, LayerState/LayerStats, clear errors."""
import pytest
import torch

import precision_lab
from precision_lab import StatePolicy
from precision_lab.layer import (
    Drafts,
    GDNInputs,
    KDAInputs,
    LayerState,
    LayerStats,
    Mamba2Inputs,
    random_inputs,
    run_layer,
)


def test_readme_snippet_runs():
    # --- the README "Layer API" snippet, verbatim ---
    import torch

    from precision_lab import StatePolicy, run_layer
    from precision_lab.layer import Mamba2Inputs

    B, T, H, P, G, N = 1, 256, 4, 16, 1, 32
    g = torch.Generator().manual_seed(0)
    inputs = Mamba2Inputs(x=torch.randn(B, T, H, P, generator=g), dt=torch.randn(B, T, H, generator=g) - 2,
                          A=-torch.rand(H, generator=g), B=torch.randn(B, T, G, N, generator=g) / N ** 0.5,
                          C=torch.randn(B, T, G, N, generator=g))
    y_ref, _ = run_layer(inputs, "fp32")
    y, stats = run_layer(inputs, StatePolicy.parse("split:fp16-sr/nvfp4@L16"), engine="decode")
    err = ((y - y_ref).norm() / y_ref.norm()).item()
    print(f"rel. error {err:.2e}, {stats.state_writes} state writes for {T} tokens ({stats.implementation})")
    # --- end of snippet ---
    assert y.shape == (B, T, H, P) and stats.state_writes == T // 16 and 1e-4 < err < 0.5


def test_lazy_top_level_exports():
    assert precision_lab.run_layer is run_layer
    assert precision_lab.Mamba2Inputs is Mamba2Inputs and precision_lab.GDNInputs is GDNInputs
    assert precision_lab.KDAInputs is KDAInputs and precision_lab.LayerStats is LayerStats


@pytest.mark.parametrize("kind,shape", [("mamba2", (2, 10, 4, 8)), ("gdn", (2, 10, 4, 8)), ("kda", (2, 10, 4, 8))])
def test_result_shape_dtype_and_stats(kind, shape):
    inp = random_inputs(kind, batch=2, tokens=10, dtype=torch.float32)
    y, st = run_layer(inp, "split:fp16-sr/nvfp4@L4")
    assert y.shape == shape and y.dtype == torch.float32
    assert isinstance(st, LayerStats) and st.engine == "decode" and "replay" in st.implementation
    assert (st.state_writes, st.flushes, st.copy_writes, st.record_writes) == (2, 2, 4, 8)
    s = st.state
    assert isinstance(s, LayerState) and s.kind == kind and s.update.shape == (2, 4, 8, 16)
    assert s.window == 2 and s.step == 10 and s.writes == 2 and s.records["k"].shape == (2, 2, 4, 16)
    assert s.records["a"].shape == ((2, 2, 4, 16) if kind == "kda" else (2, 2, 4, 1))
    y_c, st_c = run_layer(inp, "conventional:bf16")
    assert "conventional" in st_c.implementation and st_c.state.read is st_c.state.update
    assert st_c.state.records == {} and st_c.record_writes == 0


def test_half_inputs_return_half_outputs():
    inp = random_inputs("mamba2", batch=1, tokens=8, dtype=torch.bfloat16)
    y, st = run_layer(inp, "shared:fp32")
    assert y.dtype == torch.bfloat16 and st.state.update.dtype == torch.float32


def test_engine_errors():
    inp = random_inputs("gdn", batch=1, tokens=8)
    with pytest.raises(ValueError, match="unknown engine 'fast'"):
        run_layer(inp, "fp32", engine="fast")
    with pytest.raises(ValueError, match="runs token by token: engine .decode. or .triton-decode."):
        run_layer(inp, "shared:fp32", engine="scan", drafts=Drafts(1, [1] * 8))
    with pytest.raises(TypeError, match="Mamba2Inputs, GDNInputs or KDAInputs"):
        run_layer({"q": inp.q}, "fp32")
    with pytest.raises(ValueError, match="unknown mode .half."):
        run_layer(inp, "half:fp16")
    with pytest.raises(ValueError, match="unknown quantization format 'fp7'"):
        run_layer(inp, "split:fp32/fp7")


def test_custom_quantizer_failing_its_own_fake_is_reported():
    class Broken:
        name = "broken"

        def fake(self, x):
            return x[..., :1]

    from precision_lab.quant import register_quantizer

    register_quantizer("test-broken-probe", lambda: Broken(), overwrite=True)
    with pytest.raises(ValueError, match="test-broken-probe.*failed on a probe"):
        run_layer(random_inputs("mamba2", batch=1, tokens=4), "split:fp32/test-broken-probe")


def test_custom_fake_only_quantizer_works():
    """A user's quantizer with a plain fake(x) (no rbits) serves the read copy."""
    class Round3:
        name = "round3"

        def fake(self, x):
            return torch.round(x * 8) / 8

    from precision_lab.quant import register_quantizer

    register_quantizer("test-round3", lambda: Round3(), overwrite=True)
    inp = random_inputs("mamba2", batch=1, tokens=20, dtype=torch.float32)
    y, st = run_layer(inp, "split:fp32/test-round3@L8")
    assert torch.equal(st.state.read, torch.round(st.state.update * 8) / 8)
    y0, _ = run_layer(inp, "fp32")
    assert not torch.allclose(y, y0)


def test_state_and_argument_errors():
    inp = random_inputs("mamba2", batch=2, tokens=8)
    _, st = run_layer(inp, "shared:fp32@L4")
    with pytest.raises(ValueError, match="initial_state and prefill_len"):
        run_layer(inp, "shared:fp32@L4", state=st.state, prefill_len=2)
    with pytest.raises(ValueError, match="produced under policy 'shared:fp32@L4'"):
        run_layer(inp, "split:fp32/fp32@L4", state=st.state)
    with pytest.raises(ValueError, match="seed"):
        run_layer(inp, StatePolicy.parse("shared:fp32@L4", seed=1), state=st.state)
    with pytest.raises(ValueError, match="mamba2 layer, inputs are gdn"):
        run_layer(random_inputs("gdn", batch=2, tokens=8), "shared:fp32@L4", state=st.state)
    with pytest.raises(ValueError, match="compute dtype"):
        run_layer(random_inputs("mamba2", batch=2, tokens=8, dtype=torch.float32), "shared:fp32@L4", state=st.state)
    with pytest.raises(ValueError, match="layer_index 1 differs"):
        run_layer(inp, "shared:fp32@L4", state=st.state, layer_index=1)
    with pytest.raises(ValueError, match="initial_state must have shape"):
        run_layer(inp, "fp32", initial_state=torch.zeros(2, 4, 16, 8))
    with pytest.raises(ValueError, match="seq_ids must be an integer tensor of shape"):
        run_layer(inp, "fp32", seq_ids=torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="prefill_len 9 exceeds"):
        run_layer(inp, "fp32", prefill_len=9)
    with pytest.raises(ValueError, match="prefill_len must be"):
        run_layer(inp, "fp32", prefill_len=-1)


def test_scan_and_triton_engines_are_dispatched():
    """engine='scan'/'triton' reach their modules (or fail with a clear message naming them)."""
    inp = random_inputs("mamba2", batch=1, tokens=8, dtype=torch.float32)
    for engine, module in (("scan", "precision_lab.engines.torch_scan"), ("triton", "precision_lab.engines.triton_scan")):
        try:
            y, st = run_layer(inp, "fp32", engine=engine)
        except RuntimeError as e:
            assert f"engine {engine!r} is not available" in str(e) and module in str(e)
        else:
            assert st.engine == engine and y.shape == inp.x.shape


def test_layer_state_save_load_and_corruption(tmp_path):
    inp = random_inputs("kda", batch=2, tokens=30, dtype=torch.float32)
    pol = StatePolicy.parse("split:fp16-sr/nvfp4-sr@L8", seed=5)
    y_full, s_full = run_layer(inp, pol)
    first = KDAInputs(**{k: (v[:, :13] if isinstance(v, torch.Tensor) else v) for k, v in vars(inp).items()})
    rest = KDAInputs(**{k: (v[:, 13:] if isinstance(v, torch.Tensor) else v) for k, v in vars(inp).items()})
    _, s1 = run_layer(first, pol)
    torch.save(s1.state.to_dict(), tmp_path / "state.pt")
    loaded = LayerState.from_dict(torch.load(tmp_path / "state.pt"))
    y2, _ = run_layer(rest, pol, state=loaded)
    assert torch.equal(y2, y_full[:, 13:])
    bad = s1.state.to_dict()
    bad["records"]["k"] = bad["records"]["k"][:, :1]
    with pytest.raises(ValueError, match="corrupted LayerState: record 'k'"):
        LayerState.from_dict(bad)
    with pytest.raises(ValueError, match="not a saved precision-lab LayerState"):
        LayerState.from_dict({"update": torch.zeros(1)})
