"""The simulator (precision_lab.sim, ``precision-lab sim``): result JSON and PNG, window statistics,
the ordering of the policies' errors, and the float64 equivalence / write-count demonstration."""
import json

import pytest
import torch

from precision_lab import sim
from precision_lab.cli import main
from precision_lab.policy import StatePolicy


def test_window_ends_and_summary():
    assert sim.window_ends(32768) == [256, 1024, 4096, 16384, 32768]
    assert sim.window_ends(4096) == [256, 1024, 4096]
    assert sim.window_ends(500) == [256, 500]
    assert sim.window_ends(100) == [100]
    err = torch.arange(1, 1001, dtype=torch.float64)       # e_t = t
    s = sim.summarize(err, [256, 1000], avg=100, bins=10)
    assert s["mean_rel_error_last"] == [pytest.approx((157 + 256) / 2), pytest.approx((901 + 1000) / 2)]
    assert s["mean_rel_error_window"] == [pytest.approx(128.5), pytest.approx((257 + 1000) / 2)]
    curve = s["curve"]
    assert curve["step"][-1] == 1000 and curve["step"] == sorted(curve["step"])
    assert all(a <= b for a, b in zip(curve["mean_rel_error"], curve["mean_rel_error"][1:]))


def test_step_errors():
    y_ref = torch.ones(2, 3, 2, 4, dtype=torch.float64)
    y = y_ref.clone().float()
    y[0, 1] *= 1.5    # sequence 0, step 1: relative error 0.5
    e = sim.step_errors(y, y_ref)
    assert e.tolist() == pytest.approx([0.0, 0.25, 0.0])


def test_inputs_and_config_checks():
    cfg = sim.SimConfig(steps=8, heads=4, decay=(0.9, 0.9999))
    taus = 1 / (1 - sim.head_decays(cfg))
    assert taus.tolist() == pytest.approx([10, 100, 1000, 10000], rel=1e-6)   # log-spaced memories
    inp = sim.make_inputs(cfg)
    assert inp.x.dtype == torch.float32 and tuple(inp.x.shape) == (1, 8, 4, 64)
    for bad in ({"decay": (0.9, 1.0)}, {"arch": "rwkv"}, {"steps": 0}, {"heads": 3, "groups": 2},
                {"input_scale": float("nan")}):
        with pytest.raises(ValueError):
            sim.SimConfig(**bad)
    with pytest.raises(ValueError, match="unknown"):
        sim.run_sim(sim.SimConfig(steps=16, heads=1, rows=8, cols=16, policies=("shared:nofmt",)))


def test_sim_cli_default_policies(tmp_path, capsys):
    out = tmp_path / "m512"
    assert main(["sim", "--steps", "512", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    res = json.loads(out.with_suffix(".json").read_text())
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert res["kind"] == "sim" and res["schema_version"] == 1 and "git" in res["provenance"]
    assert res["settings"]["steps"] == 512 and res["settings"]["decay"] == [0.9, 0.9999]
    names = [StatePolicy.parse(p).short_str() for p in sim.DEFAULT_POLICIES]
    assert list(res["results"]) == names
    assert res["window_ends"] == [256, 512]
    for name in names:
        assert name in printed
        r = res["results"][name]
        assert r["engine"] == "scan" and r["window_ends"] == [256, 512]
        assert len(r["mean_rel_error_last"]) == 2 and len(r["curve"]["step"]) == len(r["curve"]["mean_rel_error"])
    last = {n: r["mean_rel_error_last"] for n, r in res["results"].items()}
    # the expected shape: fp32 at rounding level; split flat and smallest of the lossy ones; FP16-SR
    # update tracking FP32; shared in between and growing; conventional (every step) worst
    assert last["fp32"][-1] < 1e-5
    assert last["fp32"][-1] < last["split:fp32/nvfp4"][-1] < last["shared:nvfp4-sr"][-1] \
        < last["conventional:nvfp4-sr"][-1]
    assert last["split:fp16-sr/nvfp4"][-1] == pytest.approx(last["split:fp32/nvfp4"][-1], rel=0.05)
    assert last["shared:nvfp4-sr"][1] > 1.2 * last["shared:nvfp4-sr"][0]
    assert last["split:fp32/nvfp4"][1] < 1.5 * last["split:fp32/nvfp4"][0]
    writes = {n: r["state_writes"] for n, r in res["results"].items()}
    assert writes["conventional:nvfp4-sr"] == 512 and writes["shared:nvfp4-sr"] == 512 // 16


@pytest.mark.parametrize("arch", ["gdn", "kda"])
def test_sim_delta_rule_archs(arch):
    cfg = sim.SimConfig(arch=arch, steps=300, heads=2, rows=16, cols=32, groups=1,
                        policies=("fp32", "split:fp32/nvfp4@L8", "shared:nvfp4-sr@L8"))
    res = sim.run_sim(cfg, log=lambda *a: None)
    last = {n: r["mean_rel_error_last"][-1] for n, r in res["results"].items()}
    assert last["fp32"] < 1e-5 < last["split:fp32/nvfp4@L8"] < last["shared:nvfp4-sr@L8"]
    assert "split:fp32/nvfp4@L8" in sim.format_table(res)


def test_equivalence_mode(tmp_path, capsys):
    res = sim.equivalence_result(["mamba2", "kda"], steps=200, rows=16, cols=32, L=16, drafts=4, rounds=40,
                                 log=print)
    assert res["kind"] == "sim" and res["mode"] == "equivalence" and list(res["results"]) == ["mamba2", "kda"]
    d, s = res["results"]["kda"]["decode"], res["results"]["kda"]["speculative"]
    assert d["max_rel_diff"] <= 1e-12
    assert (d["replay_state_writes"], d["conventional_state_writes"]) == (200 // 16, 200)
    assert s["max_rel_diff"] <= 1e-12
    assert s["snapshot_state_writes"] == 40 * 5 and s["replay_state_writes"] < s["snapshot_state_writes"] / 4
    out = tmp_path / "eq"
    assert main(["sim", "--mode", "equivalence", "--arch", "gdn", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    res = json.loads(out.with_suffix(".json").read_text())
    assert list(res["results"]) == ["gdn"] and "git" in res["provenance"]
    dec = res["results"]["gdn"]["decode"]
    assert dec["max_rel_diff"] <= 1e-12 and (dec["replay_state_writes"], dec["conventional_state_writes"]) == (62, 1000)
    assert "62" in printed and "1000" in printed


def test_sim_cli_checks_policies_and_output_before_any_work(tmp_path, capsys):
    out = tmp_path / "s"
    small = ["sim", "--steps", "32", "--heads", "1", "--rows", "16", "--cols", "16", "--avg", "8", "--no-plot",
             "-o", str(out)]
    for bad, named in (("shared:nofmt", "policy 'shared:nofmt': unknown quantization format"),
                       ("shared:nvfp4@L0", "policy 'shared:nvfp4@L0': buffer length")):
        assert main([*small, "--policies", "fp32", bad]) == 2
        printed = capsys.readouterr()
        assert printed.out == "" and named in printed.err      # no header before the refusal
    assert main([*small, "--policies", "fp32"]) == 0
    first = out.with_suffix(".json").read_text()
    capsys.readouterr()
    assert main([*small, "--policies", "fp32", "--seed", "1"]) == 2   # an existing result is not overwritten
    printed = capsys.readouterr()
    assert printed.out == "" and "--force" in printed.err and out.with_suffix(".json").read_text() == first
    assert main([*small, "--policies", "fp32", "--seed", "1", "--force"]) == 0
    assert json.loads(out.with_suffix(".json").read_text())["settings"]["seed"] == 1
