"""``scripts/kernel_resources.py``'s reading of compiled code (no compile needed: SASS text by hand)."""
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests._scripts import load_script

kernel_resources = load_script("kernel_resources")


def _sass(*lines):
    return "\n".join(f"        /*{16 * i:04x}*/                   {t} ;   /* 0x0 */" for i, t in enumerate(lines))


def test_memory_rounds_follow_the_waits():
    rounds = kernel_resources.memory_rounds
    # slot, then the state tile at an address computed from it (one wait), then the output
    assert rounds(_sass("LDG.E R4, desc[UR4][R2.64]", "LDG.E.U16 R9, desc[UR4][R6.64]",
                        "IMAD.WIDE R10, R4, 0x4, R12", "@P0 LDG.E.128 R20, desc[UR4][R10.64]",
                        "@!P1 LDG.E.128 R24, desc[UR4][R10.64+0x10]", "FADD R30, R20, R24",
                        "STG.E desc[UR4][R14.64], R30")) == [2, 2]
    # a load written after a use of the tile goes out a round later; one that overwrote its register
    # first does not wait
    assert rounds(_sass("LDG.E.128 R20, desc[UR4][R2.64]", "FADD R30, R20, R21",
                        "LDG.E R40, desc[UR4][R6.64]", "MOV R41, 0x1", "FMUL R42, R41, R41",
                        "LDG.E R43, desc[UR4][R8.64]", "FADD R44, R40, R43")) == [1, 2]
    assert rounds(_sass("LDG.E R5, desc[UR4][R2.64]", "MOV R5, RZ", "FADD R6, R5, R5",
                        "LDG.E R7, desc[UR4][R2.64]")) == [2]
    # a store's operands are all reads: storing a loaded value waits for it
    assert rounds(_sass("LDG.E R5, desc[UR4][R2.64]", "STS [R9], R5", "LDG.E R7, desc[UR4][R2.64]")) == [1, 1]
    # copies to shared memory are waited for at DEPBAR
    assert rounds(_sass("LDGSTS.E [R95], desc[UR18][R2.64], P3", "LDGDEPBAR", "LDG.E R7, desc[UR4][R4.64]",
                        "DEPBAR.LE SB0, 0x0", "LDG.E R8, desc[UR4][R4.64]")) == [2, 1]
    assert rounds(_sass("FADD R1, R2, R3")) == []


def test_load_rounds_name_each_load_by_its_source_line():
    """``load_rounds``: every global load's round, opcode and the source line of nvdisasm's line comments
    above it ("?" before the first); the rounds are memory_rounds' own."""
    text = "\n".join(['\t//## File "/x/kernels/gdn/decode.py", line 31', _sass("LDG.E R4, desc[UR4][R2.64]"),
                      '\t//## File "/x/kernels/common/state_io.py", line 73',
                      _sass("IMAD.WIDE R10, R4, 0x4, R12", "LDG.E.128 R20, desc[UR4][R10.64]")])
    assert kernel_resources.load_rounds(text) == [(1, "LDG.E", "decode.py:31"), (2, "LDG.E.128", "state_io.py:73")]
    assert kernel_resources.memory_rounds(text) == [1, 1]
    assert kernel_resources.load_rounds(_sass("LDG.E R4, desc[UR4][R2.64]")) == [(1, "LDG.E", "?")]


def _rounds(line: str) -> list[int]:
    return [int(n) for n in re.search(r"rounds=([\d/]+)", line).group(1).split("/")]


@functools.cache
def _gdn_batch1_loads() -> tuple[str, ...]:
    """``scripts/kernel_resources.py --hw --ops gdn --batch 1 --loads``: each launch's line followed by
    one line per global load (its memory round trip, opcode and source line)."""
    if not Path(kernel_resources._BIN, "ptxas").exists():
        pytest.skip("Triton's ptxas is not installed")
    root = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "scripts/kernel_resources.py", "--hw", "--ops", "gdn", "--batch", "1",
                          "--loads"], cwd=root, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    return tuple(run.stdout.splitlines())


def _source_lines(path: Path, function: str, call: str) -> set[int]:
    """The line numbers of ``call`` inside ``function``'s body in ``path``."""
    text = path.read_text().splitlines()
    start = next(i for i, line in enumerate(text) if line.startswith(f"def {function}("))
    end = next(i for i in range(start + 1, len(text)) if text[i].startswith(("def ", "@triton.jit")))
    return {i + 1 for i in range(start, end) if call in text[i]}


def test_gdn_batch1_flush_requests_the_token_inputs_with_the_state():
    """The autoregressive flush at batch 1 (one launch, fp32 checkpoint: a small grid) requests the new
    token's v, g, β (``_token_inputs``) no later than the round trip that carries the state tile
    (``_load4``'s column quarters, ``_quarter_loads``), before the fold, instead of after the fold in
    a round trip of their own (``_token_first``; 4 fold stages there, ``FOLD_STAGES_SMALL_GRID``)."""
    line, loads = _launch_loads(_gdn_batch1_loads(),
                                lambda s: "T=1 FLUSH=True FOLD_NEW=True FUSED=True" in s and "RFMT=0 " in s
                                and "SPLIT=True" in s)
    token, token_rounds = _helper_rounds(loads, "_token_inputs")
    _, state_rounds = _helper_rounds(loads, "_quarter_loads")
    assert len(token) == 3 and token_rounds and state_rounds, loads
    assert max(token_rounds) <= min(state_rounds), loads
    assert len(_rounds(line)) <= 4, line


def test_gdn_batch1_shared_flush_requests_its_window_with_the_state():
    """The shared fp32 flush at batch 1 (one launch, a small grid) folds its window as products
    (``_fold_product``): the window's a and d records (``_window_records``, which
    ``_fold_buffered_product`` reads them through) and its k records (column quarters,
    ``_quarter_loads``) come in the round trip of the state tile, with no loop waiting for each
    record in turn, and the launch needs at most four round trips. The loop it replaced there
    compiled to five (rounds=4/1/17/17/7) and timed 0.2 µs per record
    (reports/diagnostics/gdn-fold-product-af710de.jsonl)."""
    line, loads = _launch_loads(_gdn_batch1_loads(),
                                lambda s: "T=1 FLUSH=True FOLD_NEW=True FUSED=True" in s and "SPLIT=False" in s)
    window, window_rounds = _helper_rounds(loads, "_window_records")
    _, quarter_rounds = _helper_rounds(loads, "_quarter_loads")
    assert len(window) == 2 and window_rounds and quarter_rounds, loads
    assert set(window_rounds) == {min(quarter_rounds)}, loads
    assert len(_rounds(line)) <= 4, line


def _helper_rounds(loads: list[tuple[int, str, int]], function: str) -> tuple[set[int], list[int]]:
    """The source lines of ``function``'s global loads in GDN's decode.py, and the memory round of each
    of those loads in ``loads`` (``_launch_loads``)."""
    lines = _source_lines(Path(__file__).resolve().parent.parent / "kernels" / "gdn" / "decode.py", function,
                          "tl.load(")
    return lines, [r for r, f, n in loads if f == "decode.py" and n in lines]


def _launch_loads(lines: tuple[str, ...], match) -> tuple[str, list[tuple[int, str, int]]]:
    """The one launch line that ``match`` accepts and its loads as (round, file, line)."""
    at = [i for i, line in enumerate(lines) if line.startswith("gdn replay") and match(line)]
    assert len(at) == 1, lines
    loads = []
    for line in lines[at[0] + 1:]:
        m = re.match(r"\s+round (\d+)\s+\S+\s+(\S+):(\d+)", line)
        if not m:
            break
        loads.append((int(m.group(1)), m.group(2), int(m.group(3))))
    return lines[at[0]], loads


def test_gdn_batch1_output_only_step_requests_q_and_k_first():
    """The one-launch output-only step from an fp32 read copy at batch 1 (``SMALL_GRID_OUTPUT_ROWS``-row
    blocks) requests the new token's q and k (``_joint_qk``, one load) with the slot lookup, and its
    state tile in the round trip right after. The state tile and the k window
    (``WINDOW_SCORES_IN_QUARTERS``) are both loaded as column quarters (``_quarter_loads``, four source
    lines). In 32-row programs every other load came in that second round trip too; in the 16-row
    programs the rule went back to, part of the quarter loads and the token's v, g, β come in a third
    (sm_90 compile, Triton 3.9), and these timed faster all the same, by 0.005-0.058 µs in 12 of 12
    rounds on an H100 (reports/diagnostics/gdn-batch1-rules-ab-*-h100.jsonl). Requested after the
    d-record tile's layout change, q and k had cost a memory round trip each (Nsight Compute, reports/diagnostics/ncu-batch1-2bd1ea1.json);
    requested first, batch 4 ran 5 % faster (gdn-early-qk-2516c10.jsonl). With the window scored as a
    [window, K] tile the k window and v, g, β came in a third round trip; the quarter tiles need no
    layout change before them, and that step ran 2 % faster at batch 1 (gdn-quarter-scores.jsonl).
    Round trips are not the measure by themselves: an earlier form with every load in two ran slower
    (gdn-batch1-forms.jsonl), as did the k window requested before the d-record tile
    (gdn-early-k-window-1031428.jsonl)."""
    from precision_lab.kernels.gdn import decode as gd

    line, loads = _launch_loads(_gdn_batch1_loads(), lambda s: "T=1 FLUSH=False" in s and "FUSED=True" in s
                                and "RFMT=0 " in s and "BJ=16 " in s)
    assert f"BR={gd.SMALL_GRID_OUTPUT_ROWS} " in line  # batch 1's rule for this step: 16-row blocks
    quarters, quarter_rounds = _helper_rounds(loads, "_quarter_loads")
    qk, qk_rounds = _helper_rounds(loads, "_joint_qk")
    assert len(qk) == 1 and qk_rounds, loads
    assert set(qk_rounds) == {1}, loads
    # the state tile's quarter loads and the k window's (the same four source lines) from round 2 on
    assert len(quarters) == 4 and min(quarter_rounds) == 2, loads
    last = 2 if gd.SMALL_GRID_OUTPUT_ROWS == 32 else 3  # the shape's last round trip (Triton 3.9's compile)
    # every load by then (the loads' line information names no helper reliably)
    assert max(r for r, _, _ in loads) == last and max(quarter_rounds) <= last, loads


def test_output_names_the_triton_that_compiled():
    """Counts differ between Triton versions (docs/pitfalls.md §18): the first line of the output
    names the version and install that produced them."""
    import triton

    first = _gdn_batch1_loads()[0]
    assert first.startswith(f"# Triton {triton.__version__} ("), first
    assert os.path.dirname(triton.__file__) in first, first


def test_straight_line_is_code_without_a_backward_branch():
    """``straight_line``: a forward branch or the padding self-branch after EXIT keeps code straight; a
    branch to an earlier address (a loop), predicated or not, does not."""
    straight = kernel_resources.straight_line
    assert straight(_sass("FADD R1, R2, R3", "@P0 BRA 0x30", "FADD R1, R2, R3", "EXIT", "BRA 0x40"))
    assert not straight(_sass("FADD R1, R2, R3", "ISETP.GE.AND P0, PT, R1, 0x4, PT", "@!P0 BRA 0x0", "EXIT"))
    assert not straight(_sass("FADD R1, R2, R3", "BRA.U 0x0", "EXIT"))
    assert straight(_sass("MOV R1, 0x10", "EXIT"))  # an immediate that is not a branch target


def test_issue_floor_counts_warp_instructions_over_the_schedulers():
    """``issue_floor_us``: programs x warps x instructions over SMs x 4 schedulers x clock; a grid's
    programs from a tuple or from a callable of the launch's keywords."""
    # 16384 one-warp programs of 1650 instructions on 132 SMs at 1980 MHz: 27,033,600 / 1,045,440 µs
    assert kernel_resources.issue_floor_us(16384, 1, 1650, 132, 1980.0) == pytest.approx(25.8586, abs=1e-4)
    assert kernel_resources.issue_floor_us(2, 4, 100, 1, 1.0) == 200.0
    assert kernel_resources.grid_programs((2, 32, 256), {}) == 2 * 32 * 256
    assert kernel_resources.grid_programs(lambda meta: (meta["n"] // 64, 3), {"n": 256}) == 12
    assert kernel_resources.grid_programs(7, {}) == 7


@pytest.mark.parametrize("op", ["gdn", "mamba2"])
def test_nonflush_keywords_reach_only_the_one_token_output_only_launches(op, monkeypatch):
    """``--nonflush-kw``: the keywords go to each operator's T = 1 non-flush launches and to no flush,
    draft or conventional launch (the wrappers stubbed: nothing is compiled)."""
    import precision_lab.kernels.gdn.decode as gd
    import precision_lab.kernels.mamba2.decode as m2

    mod, step, conv = (gd, "gdn_replay_step", "gdn_conventional_step") if op == "gdn" else \
        (m2, "mamba2_replay_step", "mamba2_conventional_step")
    calls = []
    # positional: update, read copy, records, three index tensors, then the token inputs [B, T, ...]
    monkeypatch.setattr(mod, step, lambda *a, **kw: calls.append(dict(kw, T=a[6].shape[1])))
    monkeypatch.setattr(mod, conv, lambda *a, **kw: None)
    configs = kernel_resources.gdn_configs if op == "gdn" else kernel_resources.mamba2_configs
    configs(nonflush_kw={"block_r": 128, "num_warps": 1})
    nonflush = [kw for kw in calls if not kw["flush"] and kw["T"] == 1]
    assert calls and all(("block_r" in kw) == (kw in nonflush) for kw in calls)
    assert nonflush and all(kw["block_r"] == 128 and kw["num_warps"] == 1 for kw in nonflush)
    assert len(nonflush) < len(calls)  # flushes and drafts are left alone
