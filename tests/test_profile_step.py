"""``scripts/profile_step.py``'s reading of Nsight Compute exports (CSV text by hand; no GPU)."""
import json

import pytest

from tests._scripts import load_script

profile_step = load_script("profile_step")

SASS_HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
               "# Samples", "Instructions Executed"]


def _sass_csv(tmp_path, rows):
    lines = ['"Kernel Name","gdn_replay_step_kernel",', ",".join(f'"{h}"' for h in SASS_HEADER)]
    lines += [",".join(f'"{c}"' for c in (addr, src, samples, samples, samples, "64")) for addr, src, samples in rows]
    p = tmp_path / "sass.csv"
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def test_timeline_keeps_the_waits_and_the_loads(tmp_path):
    path = _sass_csv(tmp_path, [
        ("0x7f0000001000", "      LDC R1, c[0x0][0x28]", "5"),
        ("0x7f0000001010", "      LDG.E R4, desc[UR6][R2.64]", "0"),       # a load: always kept
        ("0x7f0000001020", "      IMAD R5, R4, 0x4, RZ", "2"),             # 2 samples: dropped
        ("0x7f0000001030", "      BAR.SYNC.DEFER_BLOCKING 0x0", "1"),      # a barrier: always kept
        ("0x7f0000001040", "      STS [R9], R5", "40"),                    # a wait
        ("0x7f0000001050", "  @!P0  EXIT", ""),
    ])
    s = profile_step.summarise(path)
    assert s["samples"] == 48 and s["sass_instructions"] == 6 and s["barriers"] == 1
    assert [(t["offset"], t["samples"], t["running"]) for t in s["timeline"]] == [
        ("0x0", 5, 5), ("0x10", 0, 5), ("0x30", 1, 8), ("0x40", 40, 48), ("0x50", 0, 48)]
    assert s["timeline"][3]["sass"] == "STS [R9], R5" and s["timeline"][4]["sass"] == "@!P0 EXIT"
    assert [t["offset"] for t in profile_step.summarise(path, min_samples=1)["timeline"]] == [
        "0x0", "0x10", "0x20", "0x30", "0x40", "0x50"]


def test_metrics_take_each_first_value_with_its_unit(tmp_path):
    p = tmp_path / "details.csv"
    p.write_text('"ID","Section Name","Metric Name","Metric Unit","Metric Value"\n'
                 '"0","GPU Speed Of Light Throughput","Duration","us","5.63"\n'
                 '"0","Launch Statistics","Grid Size","","256"\n'
                 '"0","Other","Duration","us","9.99"\n'
                 '"0","Other","Not Kept","x","1"\n')
    assert profile_step.read_metrics(str(p)) == {"Duration": "5.63 us", "Grid Size": "256"}


def test_summarise_writes_json_and_refuses_other_csv(tmp_path):
    path = _sass_csv(tmp_path, [("0x10", "LDG.E R4, desc[UR6][R2.64]", "3")])
    out = tmp_path / "t.json"
    profile_step.main(["--summarise", path, "-o", str(out)])
    assert json.loads(out.read_text())["timeline"][0]["samples"] == 3
    other = tmp_path / "other.csv"
    other.write_text('"a","b"\n"1","2"\n')
    with pytest.raises(SystemExit, match="not an ncu source-page export"):
        profile_step.summarise(str(other))
    with pytest.raises(SystemExit, match="unknown kind"):
        profile_step.launch("gdn", "verify", 1, 7)
