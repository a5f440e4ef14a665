"""Every measured number in README.md comes from a committed result file under reports/.

``CLAIMS`` maps each README phrase (a format string) to the JSON file it comes from and the values
that fill it, rounded as the README prints them. A claim passes when the README, with whitespace
collapsed, contains the formatted phrase; so the test fails when the README's number changes and
when the JSON changes enough to change the printed number. ``test_every_measured_number_is_tied``
then checks that no number with a unit (µs, ms, s, GB/s, %, ×, or a float in e-notation) appears
in the README outside a checked claim, apart from the few fixed values in ``NOT_MEASUREMENTS``.
"""
from __future__ import annotations

import functools
import json
import math
import re
from pathlib import Path

import pytest

from precision_lab.bench.byte_models import step_bytes

ROOT = Path(__file__).resolve().parent.parent
QUANT = "reports/bench/bench_quant.json"
KERNELS = "reports/bench/bench_kernels.json"
SCAN = "reports/bench/bench_scan.json"
KL = "reports/bench/bench_kl_h200.json"
SIM_32K = "reports/sim/mamba2-32768.json"
SIM_4K = "reports/sim/mamba2-4096.json"
SIM_1HEAD = "reports/sim/mamba2-8192-1head-tau1e4.json"
EQUIV = "reports/sim/equivalence.json"
GENERATE = "reports/bench/bench_generate.json"
STUDY = {"nemotron-h": "reports/trained-study-data/kl-gutenberg-nemotron-h.json",
         "qwen3.5": "reports/trained-study-data/kl-gutenberg-qwen3.5.json"}


def study_row(pol):
    def values(d):
        (a,) = [x["mean"] for x in d["results"][pol]["buckets"]["log2"] if x["lo"] == 256]
        (b,) = [x["mean"] for x in d["results"][pol]["buckets"]["log2"] if x["lo"] == 65536]
        return (a, b, d["results"][pol]["overall"]["floor_mean"])
    return values
QWEN_CARD = "precision_lab/assets/models/gutenberg-qwen3.5/card.json"


QWEN, NEMO, PLAIN_ROW = "qwen3.5-4b-shape", "nemotron-3-nano-4b-shape", "plain transformers"
GEN_ROWS = [("plain transformers (`model.generate`)", PLAIN_ROW), ("`fp32` (fast path)", "fp32"),
            ("`split:fp16-sr/nvfp4`", "split:fp16-sr/nvfp4"), ("`shared:nvfp4-sr`", "shared:nvfp4-sr")]
SR_ROWS = ("shared:nvfp4-sr", "split:fp16-sr/nvfp4", "split:fp8e4m3-sr/nvfp4")


def gen_all() -> dict:
    """The rows of the four generation runs (bench_generate*.json), each of which passed its check."""
    files = [load(f"reports/bench/{n}") for n in ("bench_generate.json", "bench_generate_nemotron.json",
                                                  "bench_generate_b64.json", "bench_generate_nemotron_b64.json")]
    assert all(f["check"]["ok"] for f in files)
    return {"rows": [r for f in files for r in f["rows"]]}


def gen_row(d, row, batch, preset=QWEN):
    (r,) = [r for r in d["rows"] if r["preset"] == preset and r["row"] == row and r["batch"] == batch]
    return r


def gen_ms(d, row, batch, preset=QWEN):
    return gen_row(d, row, batch, preset)["step_ms_median"]


def prefill_span(sr: bool, batch: int, preset: str) -> tuple[float, float]:
    """(min, max) prefill seconds of the SR policy rows (sr) or of the other policy rows."""
    v = [r["prefill_s"] for r in gen_all()["rows"] if r["preset"] == preset and r["batch"] == batch
         and r["row"] != PLAIN_ROW and (r["row"] in SR_ROWS) == sr]
    return min(v), max(v)
NEMO_CARD = "precision_lab/assets/models/gutenberg-nemotron-h/card.json"


TASK = {m: f"reports/trained-study-data/lmeval-{m}.json" for m in ("gutenberg-qwen3.5", "gutenberg-nemotron-h")}
TASK_POLICIES = ("fp32", "shared:nvfp4-sr", "split:fp16-sr/nvfp4", "split:fp32/nvfp4", "conventional:bf16",
                 "shared:fp8e4m3-sr", "split:fp8e4m3-sr/nvfp4", "conventional:fp8e4m3-sr")


def _task(d):
    return d["tasks"]["shakespeare_speaker_choice"]


def task_row_text(model: str, pol: str) -> str:
    """The README row of one policy of the play-task table (a format string)."""
    if pol == "fp32":
        return f"| {model} | `fp32` | {{:.1f}} | — | — | — |"
    if pol not in _task(load(TASK[model]))["policies"]:
        return f"| {model} | `{pol}` | not run{{}} | — | — | — |"
    return f"| {model} | `{pol}` | {{:.1f}} | {{:+.1f}} [{{:+.1f}}, {{:+.1f}}] | {{}} / {{}} | {{:.2f}} |"


def task_row_values(d, *, pol: str) -> tuple:
    e = _task(d)
    if pol == "fp32":
        return (100 * e["fp32"]["accuracy"],)
    pe = e["policies"].get(pol)
    if pe is None:
        return ("",)
    dl, mc = pe["delta"], pe["mcnemar"]
    return (100 * pe["accuracy"], 100 * dl["delta"], 100 * dl["ci_low"], 100 * dl["ci_high"], mc["b"], mc["c"],
            mc["p_value"])


def card_row(c):
    m = c["ssm_memory"]
    return (c["parameters"] / 1e6, c["training"]["best_step"], c["results"]["heldout_bpb"],
            m["counts"][">=100"], m["counts"][">=1000"], m["counts"][">=10000"], m["n_heads"])


@functools.cache
def load(rel: str) -> dict:
    return json.loads((ROOT / rel).read_text())


@functools.cache
def readme() -> str:
    return re.sub(r"\s+", " ", (ROOT / "README.md").read_text())


# --- values derived from the result files --------------------------------------------------------
def scan_rows(d, **match):
    return [t for t in d["timings"] if all(t.get(k) == v for k, v in match.items())]


def scan_ms(d, arch, policy, batch=1):
    (row,) = scan_rows(d, arch=arch, policy=policy, B=batch, kernel="replay")
    return row["ms"]


def kernel_rows(d, op, kernel, tag, read):
    (row,) = [r for r in d["rows"] if r["op"] == op and r["kernel"] == kernel and r["tag"] == tag
              and r["read"] == read and r["batch"] == 256]
    return row


def summ(d, op):
    return d["summary"][op]


def target(d, op, name):
    return summ(d, op)["targets"][name]


def b256(d, op):
    return summ(d, op)["batch"]["256"]


def sim_row(d, policy):
    return "| " + policy + " | " + " | ".join(f"{v:.3g}" for v in d["results"][policy]["mean_rel_error_last"]) + " |"


def sim_header(d):
    ends = d["window_ends"]
    return "| policy | " + " | ".join([f"1–{ends[0]:,}"] + [f"to {e:,}" for e in ends[1:]]) + " |"


def equiv(d, part, key):
    return [d["results"][a][part][key] for a in ("mamba2", "gdn", "kda")]


def one(values):
    (v,) = set(values)
    return v


@functools.cache
def diagnostics_rows(rel: str) -> tuple[dict, ...]:
    """The rows of a JSON-lines result file (reports/diagnostics/*.jsonl), read once per file."""
    return tuple(json.loads(line) for line in (ROOT / rel).read_text().splitlines())


def run6_mamba2_nvfp4_us() -> list[float]:
    """The Mamba-2 NVFP4 output-only step at the wrapper's rule, measured in the device call of
    bench_kernels_round2u_mamba2_quick.json (run 6 of the diagnostics file)."""
    rows = diagnostics_rows("reports/diagnostics/nonflush-order.jsonl")
    return [r["us"] for r in rows if r["run"] == 6 and r["op"] == "mamba2" and r["read"] == "nvfp4" and r["cfg"] == {}]


def tune_us(d, op, read, cfg) -> float:
    """The tuning row (batch 256) of the output-only step from read copy ``read`` at launch keywords ``cfg``."""
    (row,) = [r for r in d["rows"] if r["op"] == op and r["kernel"] == "nonflush" and r["tag"] == "tune"
              and r["read"] == read and r["cfg"] == cfg]
    return row["us"]


def now_and_before(d, before: str, op: str, *path: str) -> tuple[float, float]:
    """One summary value of a kernel benchmark run and of the earlier run it is quoted against."""
    def at(result):
        v = summ(result, op)
        for key in path:
            v = v[key]
        return v
    return at(d), at(load(before))


# --- the table: README phrase -> result file -> values (rounded by the format spec) ---------------
# The README's table of where the round-two targets stand: both operators from the thirty-first run
# (H200). The twenty-ninth run before it, as measured (MEASURED_H200) and with its bytes recounted
# with the corrected bytes model (RECOUNTED_H200); PREVIOUS_H200: the H200 run before that.
STANDING = {"mamba2": "reports/bench/bench_kernels_round2zh_quick.json",
            "gdn": "reports/bench/bench_kernels_round2zh_quick.json"}
MEASURED_H200 = "reports/bench/bench_kernels_round2zf_quick.json"
RECOUNTED_H200 = "reports/bench/bench_kernels_round2zf_quick_recounted.json"
PREVIOUS_H200 = "reports/bench/bench_kernels_round2zd_quick.json"
STANDING_ROWS = [  # (README label, target name, value format)
    ("ReplaySSM `shared:fp32` ÷ conventional step (≥ 1.80× / 1.75×)", "replay_vs_conventional", "{:.2f}×"),
    ("ReplaySSM `shared:fp32` ÷ fla peer (≥ 2.0× / 2.3×)", "replay_vs_fla", "{:.2f}×"),
    ("`split:fp16-sr/nvfp4` per token ÷ fp32 conventional (≥ 3×)", "split_fp16-sr_nvfp4_vs_conventional", "{:.2f}×"),
    ("`split:fp8e4m3-sr/nvfp4` per token ÷ fp32 conventional (≥ 3×)", "split_fp8e4m3-sr_nvfp4_vs_conventional", "{:.2f}×"),
    ("NVFP4 output-only step, % of its byte bound (≥ 80 %)", "nvfp4_nonflush_pct_byte_bound", "{:.1f} %"),
    ("fp16-SR/NVFP4 flush ÷ fp16-SR conventional step (≤ 1.3×)", "fp16sr_flush_vs_fp16sr_conventional", "{:.2f}×"),
    ("verify T = 8 + amortised speculative flush ÷ conventional (≤ 1.3×)", "verify_T8_vs_conventional", "{:.2f}×"),
    ("batch 1: ReplaySSM amortised ÷ conventional (≥ 1.0×)", "batch1_replay_vs_conventional", "{:.2f}×"),
]


# The same targets read on an H100: a second table under the first, from one full --quick run at the
# kernels as they stand; EARLIER_H100: the full H100 run of the first table's kernels, its bytes recounted.
STANDING_H100 = {"mamba2": "reports/bench/bench_kernels_round2zp_quick_h100.json",
                 "gdn": "reports/bench/bench_kernels_round2zp_quick_h100.json"}
EARLIER_H100 = "reports/bench/bench_kernels_round2zg_quick_h100_recounted.json"


def h100_moves(d) -> tuple[float, float]:
    """The largest change of the H100 table's ratio rows (batch 1 aside) and of its NVFP4 row from the
    earlier full H100 run to the table's, rounded up to the README's precision (a bound, as it says)."""
    names = [name for _, name, _ in STANDING_ROWS if name != "batch1_replay_vs_conventional"]
    moves = {name: max(abs(target(d, op, name)["value"] - target(load(EARLIER_H100), op, name)["value"])
                       for op in ("mamba2", "gdn")) for name in names}
    ratio = max(v for k, v in moves.items() if "pct" not in k)
    pct = max(v for k, v in moves.items() if "pct" in k)
    return math.ceil(ratio * 1000) / 1000, math.ceil(pct * 10) / 10


def batch1_rounds(d, op) -> tuple:
    """An operator's batch-1 ratio, its spread over the rounds, the verdict over them and the median
    round's output-only and conventional steps (µs)."""
    t = target(d, op, "batch1_replay_vs_conventional")
    lo, hi = t["spread"]
    verdict = ("met in every round" if lo >= t["target"] else "missed in every round" if hi < t["target"]
               else "met in some rounds only")
    b1 = summ(d, op)["batch"]["1"]
    return (t["value"], lo, hi, verdict, b1["nonflush_us"], b1["conventional_us"])


def standing_row(label, name, fmt, files=STANDING, bounds=True) -> str:
    """One row of the README's standing table, rendered from the two result files (``files``); with
    ``bounds`` the byte-bound column too (the H100 table has none: its summary's bounds take the
    reference copy ceiling of the H200)."""
    cells = []
    for op in ("mamba2", "gdn"):
        t = target(load(files[op]), op, name)
        cells.append(fmt.format(t["value"]) + (" met" if t["met"] else " missed"))
    if not bounds:
        return f"| {label} | {cells[0]} | {cells[1]} |"
    byte_bounds = [target(load(files[op]), op, name)["byte_bound"] for op in ("mamba2", "gdn")]
    bound = "—" if None in byte_bounds else " / ".join(fmt.format(b) for b in byte_bounds)
    return f"| {label} | {cells[0]} | {cells[1]} | {bound} |"


def conv_rule_fastest(op: str, fmt: str, shape: str) -> float:
    """The fastest repetition of one conventional row in reports/diagnostics/conv-rule.jsonl (``shape``:
    "rule", the wrappers' per-format shape, or "fp32-shape")."""
    rows = diagnostics_rows("reports/diagnostics/conv-rule.jsonl")
    return min(r["us"] for r in rows if r["op"] == op and r["update"] == fmt and r["shape"] == shape)


def batch1_forms_range() -> tuple[float, float, float, float]:
    """GDN's batch-1 output-only step at W = 7 in reports/diagnostics/gdn-batch1-forms.jsonl: the order
    kept (``old``), then the two-round-trip order that was removed (``cur``), each as (min, max) over its
    repetitions."""
    rows = diagnostics_rows("reports/diagnostics/gdn-batch1-forms.jsonl")
    us = {f: [r["us"] for r in rows if r.get("form") == f and r.get("batch") == 1 and r.get("W") == 7 and not r.get("cfg")]
          for f in ("cur", "old")}
    return min(us["old"]), max(us["old"]), min(us["cur"]), max(us["cur"])


def chunked_fold_slowdown() -> float:
    """The tensor-core chunked fold of GDN's fp16-SR/NVFP4 flush against the recurrent fold in
    reports/diagnostics/gdn-chunked-fold.jsonl: its fastest repetition over the recurrent one's slowest."""
    rows = diagnostics_rows("reports/diagnostics/gdn-chunked-fold.jsonl")
    us = [(r["form"], r["us"]) for r in rows if "us" in r and r["update"] == "fp16-sr"]
    return min(u for f, u in us if f == "chunked") / max(u for f, u in us if f == "recurrent")


def hw_block_scales_flushes() -> tuple[float, ...]:
    """NVFP4-storing flushes with the hardware block-scale rounding (tree "new") against the integer
    one ("main") in reports/diagnostics/hw-block-scales-6100878.jsonl, first call: fp16-SR/NVFP4 of
    Mamba-2 and of GDN, then Mamba-2's FP8-SR/NVFP4, each new then main."""
    rows = diagnostics_rows("reports/diagnostics/hw-block-scales-6100878.jsonl")

    def us(op, upd, tree):
        (r,) = [r for r in rows if r["call"] == 1 and r["op"] == op and r["kernel"] == "flush"
                and r["update"] == upd and r["read"] == "nvfp4" and r["tree"] == tree]
        return r["us"]
    return tuple(us(op, upd, tree) for op, upd in (("mamba2", "fp16-sr"), ("gdn", "fp16-sr"), ("mamba2", "fp8e4m3-sr"))
                 for tree in ("new", "main"))


def flush_warps_range() -> tuple[float, float, float]:
    """GDN's fp16-SR/NVFP4 flush in reports/diagnostics/gdn-flush-warps.jsonl: the fastest and slowest
    repetition over the launch shapes other than the rule's, and the rule's fastest."""
    rows = diagnostics_rows("reports/diagnostics/gdn-flush-warps.jsonl")
    us = [(r["cfg"], r["us"]) for r in rows if "us" in r and r["update"] == "fp16-sr"]
    other = [u for c, u in us if c]
    return min(other), max(other), min(u for c, u in us if not c)


CLAIMS: list[tuple[str, str, object]] = [
    ("(SR flushes {:.0f} / {:.0f} µs from {:.0f} / {:.0f}; FP16-SR quantize at {:.1f} % of copy",
     "reports/bench/bench_kernels_round2c_quick.json",
     lambda d: (summ(d, "mamba2")["update"]["fp16-sr"]["flush_us"], summ(d, "gdn")["update"]["fp16-sr"]["flush_us"],
                summ(load("reports/bench/bench_kernels_round2b_quick.json"), "mamba2")["update"]["fp16-sr"]["flush_us"],
                summ(load("reports/bench/bench_kernels_round2b_quick.json"), "gdn")["update"]["fp16-sr"]["flush_us"],
                100 * load("reports/bench/bench_quant_round2c.json")["kernels"]["fp16-sr quantize"]["frac_of_copy"])),
    ("(GDN's fp8-SR/NVFP4 flush {:.0f} µs from {:.0f}, Mamba-2's {:.0f} from {:.0f}; FP8-SR quantize at {:.1f} % of copy",
     "reports/bench/bench_kernels_round2d_quick.json",
     lambda d: (summ(d, "gdn")["update"]["fp8e4m3-sr"]["flush_us"],
                summ(load("reports/bench/bench_kernels_round2c_quick.json"), "gdn")["update"]["fp8e4m3-sr"]["flush_us"],
                summ(d, "mamba2")["update"]["fp8e4m3-sr"]["flush_us"],
                summ(load("reports/bench/bench_kernels_round2c_quick.json"), "mamba2")["update"]["fp8e4m3-sr"]["flush_us"],
                100 * load("reports/bench/bench_quant_round2d.json")["kernels"]["fp8e4m3-sr quantize"]["frac_of_copy"])),
    ("a chunked form of GDN's fold measured {:.1f}× slower than the recurrent one",
     "reports/bench/bench_kernels_round2d_quick.json",
     lambda d: tuple(
         [r["us"] for r in d["rows"] if r["op"] == "gdn" and r["kernel"] == "flush" and r["tag"] == "tune"
          and r["cfg"].get("fold_form") == "chunked"][0]
         / [r["us"] for r in d["rows"] if r["op"] == "gdn" and r["kernel"] == "flush" and r["tag"] == "tune"
            and r["cfg"].get("fold_form") == "recurrent"][0] for _ in (0,))),
    ("(GDN's NVFP4 non-flush step {:.1f} µs from {:.1f}, its FP8 one {:.1f} from {:.1f}, Mamba-2's NVFP4 one "
     "{:.1f} from {:.1f}; `split:fp16-sr/nvfp4` per token {:.2f}× / {:.2f}× the fp32",
     "reports/bench/bench_kernels_round2e_quick.json",
     lambda d: (*now_and_before(d, "reports/bench/bench_kernels_round2d_quick.json", "gdn", "read", "nvfp4", "nonflush_us"),
                *now_and_before(d, "reports/bench/bench_kernels_round2d_quick.json", "gdn", "read", "fp8e4m3", "nonflush_us"),
                *now_and_before(d, "reports/bench/bench_kernels_round2d_quick.json", "mamba2", "read", "nvfp4", "nonflush_us"),
                target(d, "gdn", "split_fp16-sr_nvfp4_vs_conventional")["value"],
                target(d, "mamba2", "split_fp16-sr_nvfp4_vs_conventional")["value"])),
    ("register cap (`max_registers`; Triton's `maxnreg`): the fp32 flush {:.1f} µs from {:.1f}, the "
     "fp16-SR/NVFP4 one {:.1f} from {:.1f}, ReplaySSM `shared:fp32` {:.2f}× the conventional step and "
     "`split:fp16-sr/nvfp4` per token {:.2f}×",
     "reports/bench/bench_kernels_round2f_mamba2_quick.json",
     lambda d: (*now_and_before(d, "reports/bench/bench_kernels_round2e_quick.json", "mamba2", "L", "16", "flush_us"),
                *now_and_before(d, "reports/bench/bench_kernels_round2e_quick.json", "mamba2", "update", "fp16-sr",
                                "flush_us"),
                target(d, "mamba2", "replay_vs_conventional")["value"],
                target(d, "mamba2", "split_fp16-sr_nvfp4_vs_conventional")["value"])),
    ("(`kernels/common/products.py`, the same bits as Triton's `tf32x3`): verify of 8 drafts {:.1f} µs from "
     "{:.1f}, the fp16-SR/NVFP4 flush {:.1f} from {:.1f}, `split:fp16-sr/nvfp4` per token {:.2f}×",
     "reports/bench/bench_kernels_round2g_quick.json",
     lambda d: (*now_and_before(d, "reports/bench/bench_kernels_round2f_mamba2_quick.json", "mamba2", "drafts", "8",
                                "verify_us"),
                *now_and_before(d, "reports/bench/bench_kernels_round2f_mamba2_quick.json", "mamba2", "update",
                                "fp16-sr", "flush_us"),
                target(d, "mamba2", "split_fp16-sr_nvfp4_vs_conventional")["value"])),
    ("at 168 registers: the GDN `shared:fp32` flush {:.1f} µs from {:.1f}, its output-only step from an fp32 "
     "read copy {:.1f} from {:.1f}, ReplaySSM `shared:fp32` {:.2f}× GDN's conventional step from {:.2f}×",
     "reports/bench/bench_kernels_round2h_quick.json",
     lambda d: (*now_and_before(d, "reports/bench/bench_kernels_round2g_quick.json", "gdn", "L", "16", "flush_us"),
                *now_and_before(d, "reports/bench/bench_kernels_round2g_quick.json", "gdn", "L", "16", "nonflush_us"),
                *now_and_before(d, "reports/bench/bench_kernels_round2g_quick.json", "gdn", "L", "16",
                                "speedup_vs_conventional"))),
    ("operators after the fix for windows a speculative flush round leaves: ReplaySSM `shared:fp32` "
     "{:.2f}× Mamba-2's conventional step and {:.2f}× GDN's",
     "reports/bench/bench_kernels_round2i_quick.json",
     lambda d: (target(d, "mamba2", "replay_vs_conventional")["value"],
                target(d, "gdn", "replay_vs_conventional")["value"])),
    ("the Mamba-2 `shared:fp32` flush {:.1f} µs from {:.1f}, GDN's output-only step from an fp32 read copy "
     "{:.1f} from {:.1f}, ReplaySSM `shared:fp32` {:.2f}× GDN's conventional step and {:.2f}× its fla peer; "
     "Mamba-2's stays at {:.2f}×, short of 1.80×",
     "reports/bench/bench_kernels_round2j_quick.json",
     lambda d: (*now_and_before(d, "reports/bench/bench_kernels_round2i_quick.json", "mamba2", "batch", "256",
                                "flush_us"),
                *now_and_before(d, "reports/bench/bench_kernels_round2i_quick.json", "gdn", "batch", "256",
                                "nonflush_us"),
                target(d, "gdn", "replay_vs_conventional")["value"], target(d, "gdn", "replay_vs_fla")["value"],
                target(d, "mamba2", "replay_vs_conventional")["value"])),
    ("the fp16-SR/NVFP4 flush {:.1f} µs from {:.1f}, `split:fp16-sr/nvfp4` per token {:.2f}× the fp32 "
     "conventional step. Its `shared:fp32` ratio read {:.2f}× with the tenth run's kernels",
     "reports/bench/bench_kernels_round2k_mamba2_quick.json",
     lambda d: (*now_and_before(d, "reports/bench/bench_kernels_round2j_quick.json", "mamba2", "update", "fp16-sr",
                                "flush_us"),
                target(d, "mamba2", "split_fp16-sr_nvfp4_vs_conventional")["value"],
                target(d, "mamba2", "replay_vs_conventional")["value"])),
    ("NVFP4 output-only step {:.1f} µs from {:.1f} (Mamba-2) and {:.1f} from {:.1f} (GDN), `split:fp16-sr/nvfp4` "
     "per token {:.2f}× Mamba-2's fp32 conventional step (target 3×, met by {:.0f} %, about the run-to-run",
     "reports/bench/bench_kernels_round2l_quick.json",
     lambda d: (*now_and_before(d, "reports/bench/bench_kernels_round2k_mamba2_quick.json", "mamba2", "read", "nvfp4",
                                "nonflush_us"),
                *now_and_before(d, "reports/bench/bench_kernels_round2j_quick.json", "gdn", "read", "nvfp4",
                                "nonflush_us"),
                target(d, "mamba2", "split_fp16-sr_nvfp4_vs_conventional")["value"],
                100 * (target(d, "mamba2", "split_fp16-sr_nvfp4_vs_conventional")["value"] / 3 - 1))),
    ("spread) and {:.2f}× GDN's, ReplaySSM `shared:fp32` {:.2f}× GDN's conventional step and {:.2f}× its fla "
     "peer; Mamba-2's `shared:fp32` reads {:.2f}×, still short of 1.80×",
     "reports/bench/bench_kernels_round2l_quick.json",
     lambda d: (target(d, "gdn", "split_fp16-sr_nvfp4_vs_conventional")["value"],
                target(d, "gdn", "replay_vs_conventional")["value"], target(d, "gdn", "replay_vs_fla")["value"],
                target(d, "mamba2", "replay_vs_conventional")["value"])),
    ("kernels (`bench_kernels_round2m_mamba2_quick.json`) read `split:fp16-sr/nvfp4` {:.2f}× and `shared:fp32` {:.2f}×",
     "reports/bench/bench_kernels_round2m_mamba2_quick.json",
     lambda d: (target(d, "mamba2", "split_fp16-sr_nvfp4_vs_conventional")["value"],
                target(d, "mamba2", "replay_vs_conventional")["value"])),
    ("FP8 states decoded by the hardware FP8 conversion: the FP8-SR/NVFP4 flush {:.1f} µs from {:.1f}, "
     "the fp16-SR/NVFP4 one {:.1f} from {:.1f}, `split:fp16-sr/nvfp4` and `split:fp8e4m3-sr/nvfp4` per "
     "token {:.2f}× and {:.2f}× Mamba-2's fp32 conventional step (target 3×: both met), `shared:fp32` {:.2f}×",
     "reports/bench/bench_kernels_round2o_quick.json",
     lambda d: (*now_and_before(d, "reports/bench/bench_kernels_round2l_quick.json", "mamba2", "update", "fp8e4m3-sr",
                                "flush_us"),
                *now_and_before(d, "reports/bench/bench_kernels_round2l_quick.json", "mamba2", "update", "fp16-sr",
                                "flush_us"),
                target(d, "mamba2", "split_fp16-sr_nvfp4_vs_conventional")["value"],
                target(d, "mamba2", "split_fp8e4m3-sr_nvfp4_vs_conventional")["value"],
                target(d, "mamba2", "replay_vs_conventional")["value"])),
    ("(target 1.80×; {:.2f}× in the first run at these kernels, `bench_kernels_round2n_quick.json`",
     "reports/bench/bench_kernels_round2n_quick.json",
     lambda d: (target(d, "mamba2", "replay_vs_conventional")["value"],)),
    ("move (`shared:fp32` {:.2f}×)", "reports/bench/bench_kernels_round2o_quick.json",
     lambda d: (target(d, "gdn", "replay_vs_conventional")["value"],)),
    ("(`bench_kernels_round2p_mamba2_quick.json`) read `shared:fp32` {:.2f}× and `split:fp8e4m3-sr/nvfp4` {:.2f}×",
     "reports/bench/bench_kernels_round2p_mamba2_quick.json",
     lambda d: (target(d, "mamba2", "replay_vs_conventional")["value"],
                target(d, "mamba2", "split_fp8e4m3-sr_nvfp4_vs_conventional")["value"])),
    ("program, each tile's inputs loaded while the previous tile folds: the `shared:fp32` flush {:.1f} µs "
     "from {:.1f}, ReplaySSM `shared:fp32` {:.2f}× its fla peer (target 2.0×: met) and {:.4f}× its "
     "conventional step, short of 1.80× by {:.2f} %",
     "reports/bench/bench_kernels_round2q_mamba2_quick.json",
     lambda d: (*now_and_before(d, "reports/bench/bench_kernels_round2o_quick.json", "mamba2", "L", "16", "flush_us"),
                target(d, "mamba2", "replay_vs_fla")["value"], target(d, "mamba2", "replay_vs_conventional")["value"],
                100 * (1 - target(d, "mamba2", "replay_vs_conventional")["value"] / 1.8))),
    ("on a machine whose copy ceiling read {:.1f} % lower than the thirteenth run's",
     "reports/bench/bench_kernels_round2q_mamba2_quick.json",
     lambda d: (100 * (1 - d["ceiling"]["GBps"] / load("reports/bench/bench_kernels_round2o_quick.json")["ceiling"]["GBps"]),)),
    ("(the output-only step, at the copy ceiling, read {:.1f} µs", "reports/bench/bench_kernels_round2q_mamba2_quick.json",
     lambda d: (summ(d, "mamba2")["L"]["16"]["nonflush_us"],)),
    ("the `shared:fp32` flush {:.1f} µs from {:.1f}, the fp32/E4M3 and fp32/BF16 flushes {:.1f} and {:.1f} µs "
     "from {:.1f} and {:.1f}", "reports/bench/bench_kernels_round2r_mamba2_quick.json",
     lambda d: (*now_and_before(d, "reports/bench/bench_kernels_round2q_mamba2_quick.json", "mamba2", "L", "16", "flush_us"),
                summ(d, "mamba2")["read"]["fp8e4m3"]["flush_us"], summ(d, "mamba2")["read"]["bf16"]["flush_us"],
                summ(load("reports/bench/bench_kernels_round2q_mamba2_quick.json"), "mamba2")["read"]["fp8e4m3"]["flush_us"],
                summ(load("reports/bench/bench_kernels_round2q_mamba2_quick.json"), "mamba2")["read"]["bf16"]["flush_us"])),
    ("ReplaySSM `shared:fp32` {:.4f}× its conventional step (target 1.80×: met, by {:.2f} %) and {:.2f}× its fla peer",
     "reports/bench/bench_kernels_round2r_mamba2_quick.json",
     lambda d: (target(d, "mamba2", "replay_vs_conventional")["value"],
                100 * (target(d, "mamba2", "replay_vs_conventional")["value"] / 1.8 - 1),
                target(d, "mamba2", "replay_vs_fla")["value"])),
    ("flushes (batch 16: {:.1f} µs from {:.1f})", "reports/bench/bench_kernels_round2r_mamba2_quick.json",
     lambda d: now_and_before(d, "reports/bench/bench_kernels_round2q_mamba2_quick.json", "mamba2", "batch", "16", "flush_us")),
    ("the batch-4 and batch-16 flushes {:.1f} and {:.1f} µs, the `shared:fp32` flush at batch 256 {:.1f} µs, "
     "ReplaySSM `shared:fp32` {:.4f}× its conventional step and {:.2f}× its fla peer, `split:fp16-sr/nvfp4` and "
     "`split:fp8e4m3-sr/nvfp4` per token {:.2f}× and {:.2f}× the fp32 conventional step",
     "reports/bench/bench_kernels_round2s_mamba2_quick.json",
     lambda d: (summ(d, "mamba2")["launch_forms"]["4"]["flush_one_launch_us"], summ(d, "mamba2")["batch"]["16"]["flush_us"],
                summ(d, "mamba2")["L"]["16"]["flush_us"], target(d, "mamba2", "replay_vs_conventional")["value"],
                target(d, "mamba2", "replay_vs_fla")["value"],
                target(d, "mamba2", "split_fp16-sr_nvfp4_vs_conventional")["value"],
                target(d, "mamba2", "split_fp8e4m3-sr_nvfp4_vs_conventional")["value"])),
    ("the NVFP4 output-only step {:.1f} µs from {:.1f} (Mamba-2) and {:.1f} from {:.1f} (GDN), {:.1f} % and {:.1f} % "
     "of its byte bound (target 80 %: missed)", "reports/bench/bench_kernels_round2t_quick.json",
     lambda d: (*now_and_before(d, "reports/bench/bench_kernels_round2s_mamba2_quick.json", "mamba2", "read", "nvfp4",
                                "nonflush_us"),
                *now_and_before(d, "reports/bench/bench_kernels_round2o_quick.json", "gdn", "read", "nvfp4",
                                "nonflush_us"),
                target(d, "mamba2", "nvfp4_nonflush_pct_byte_bound")["value"],
                target(d, "gdn", "nvfp4_nonflush_pct_byte_bound")["value"])),
    ("per token {:.2f}× and {:.2f}× Mamba-2's fp32 conventional step and {:.2f}× and {:.2f}× GDN's (target 3×: GDN "
     "missed). Batch 1 stays at {:.2f}× (Mamba-2) and {:.2f}× (GDN)", "reports/bench/bench_kernels_round2t_quick.json",
     lambda d: (target(d, "mamba2", "split_fp16-sr_nvfp4_vs_conventional")["value"],
                target(d, "mamba2", "split_fp8e4m3-sr_nvfp4_vs_conventional")["value"],
                target(d, "gdn", "split_fp16-sr_nvfp4_vs_conventional")["value"],
                target(d, "gdn", "split_fp8e4m3-sr_nvfp4_vs_conventional")["value"],
                target(d, "mamba2", "batch1_replay_vs_conventional")["value"],
                target(d, "gdn", "batch1_replay_vs_conventional")["value"])),
    ("which turn the cap off: {:.1f} µs there", "reports/bench/bench_kernels_round2u_mamba2_quick.json",
     lambda d: (summ(d, "mamba2")["read"]["nvfp4"]["nonflush_us"],)),
    ("the step at the wrapper's rule read {:.1f}-{:.1f} µs in the same device call", "reports/bench/bench_kernels_round2u_mamba2_quick.json",
     lambda d: (min(run6_mamba2_nvfp4_us()), max(run6_mamba2_nvfp4_us()))),
    ("times the caps: the Mamba-2 NVFP4 output-only step {:.1f} µs at the wrapper's rule in the tuning rows and "
     "{:.1f} µs in the sweep, {:.1f} % of its byte bound (target 80 %: missed); batch 1 {:.2f}× (Mamba-2) and {:.2f}× (GDN)",
     "reports/bench/bench_kernels_round2v_quick.json",
     lambda d: (tune_us(d, "mamba2", "nvfp4", {"fp4_decode": "fp16"}), summ(d, "mamba2")["read"]["nvfp4"]["nonflush_us"],
                target(d, "mamba2", "nvfp4_nonflush_pct_byte_bound")["value"],
                target(d, "mamba2", "batch1_replay_vs_conventional")["value"],
                target(d, "gdn", "batch1_replay_vs_conventional")["value"])),
    ("(`fp4_decode=\"ptx\"`: {:.1f} µs at the rule)", "reports/bench/bench_kernels_round2v_quick.json",
     lambda d: (tune_us(d, "mamba2", "nvfp4", {"fp4_decode": "ptx"}),)),
    ("conventional step costs ({:.2f} µs and {:.2f} µs), and ReplaySSM reaches {:.2f}× of the conventional step (target "
     "1.0×: missed, by the flush); GDN stays at {:.2f}×", "reports/bench/bench_kernels_round2w_quick.json",
     lambda d: (summ(d, "mamba2")["batch"]["1"]["nonflush_us"], summ(d, "mamba2")["batch"]["1"]["conventional_us"],
                target(d, "mamba2", "batch1_replay_vs_conventional")["value"],
                target(d, "gdn", "batch1_replay_vs_conventional")["value"])),
    ("none of it was kept (`reports/diagnostics/early-inputs.jsonl`), and batch 1 read {:.2f}× (Mamba-2) and "
     "{:.2f}× (GDN)", "reports/bench/bench_kernels_round2x_quick.json",
     lambda d: (target(d, "mamba2", "batch1_replay_vs_conventional")["value"],
                target(d, "gdn", "batch1_replay_vs_conventional")["value"])),
    ("GDN's batch-1 steps at 2 warps: its batch-1 ReplaySSM step reaches {:.2f}× of the conventional step "
     "(Mamba-2 {:.2f}×; target 1.0×: missed)", "reports/bench/bench_kernels_round2y_quick.json",
     lambda d: (target(d, "gdn", "batch1_replay_vs_conventional")["value"],
                target(d, "mamba2", "batch1_replay_vs_conventional")["value"])),
    ("GDN's `shared:fp32` target was beyond its bound as that run counted its bytes: {:.2f}× measured, at most "
     "{:.2f}× with both steps at the ceiling (target {:.2f}×)", "reports/bench/bench_kernels_round2y_quick.json",
     lambda d: (target(d, "gdn", "replay_vs_conventional")["value"], target(d, "gdn", "replay_vs_conventional")["byte_bound"],
                target(d, "gdn", "replay_vs_conventional")["target"])),
    ("(GDN `split:fp16-sr/nvfp4` {:.2f}× against a bound of {:.2f}×)", "reports/bench/bench_kernels_round2y_quick.json",
     lambda d: (target(d, "gdn", "split_fp16-sr_nvfp4_vs_conventional")["value"],
                target(d, "gdn", "split_fp16-sr_nvfp4_vs_conventional")["byte_bound"])),
    ("they would still take {:.2f}× (Mamba-2) and {:.2f}× (GDN) the fp16-SR conventional step (target ≤ {:.1f}×)",
     "reports/diagnostics/ncu-targets-8cb208f.json",
     lambda d: (*(sum(k["issue_bound_us"] for k in d["kernels"] if k["config"] == f"{p}-flush-fp16sr-nvfp4")
                  / summ(load("reports/bench/bench_kernels_round2y_quick.json"), op)["conventional_formats"]["fp16-sr"]["us"]
                  for p, op in (("m2", "mamba2"), ("gdn", "gdn"))),
                target(load("reports/bench/bench_kernels_round2y_quick.json"), "gdn",
                       "fp16sr_flush_vs_fp16sr_conventional")["target"])),
    ("GDN's NVFP4 output-only step, its records counted as the kernel reads them, would reach only {:.0f} % of its "
     "byte bound even issuing on every cycle (target {:.0f} %).", "reports/diagnostics/ncu-targets-8cb208f.json",
     lambda d: (100 * step_bytes("gdn", "nonflush", 256, "fp32", "nvfp4", 7)
                / (summ(load("reports/bench/bench_kernels_round2y_quick.json"), "gdn")["ceiling_for_targets_GBps"] * 1e3)
                / sum(k["issue_bound_us"] for k in d["kernels"] if k["config"] == "gdn-nf-nvfp4"),
                target(load("reports/bench/bench_kernels_round2y_quick.json"), "gdn",
                       "nvfp4_nonflush_pct_byte_bound")["target"])),
    ("its NVFP4 output-only step reaches {:.1f} % of its byte bound (target {:.0f} %: missed) and "
     "`split:fp16-sr/nvfp4` {:.2f}× (target {:.0f}×: missed)", "reports/bench/bench_kernels_round2z_gdn_quick.json",
     lambda d: (target(d, "gdn", "nvfp4_nonflush_pct_byte_bound")["value"],
                target(d, "gdn", "nvfp4_nonflush_pct_byte_bound")["target"],
                target(d, "gdn", "split_fp16-sr_nvfp4_vs_conventional")["value"],
                target(d, "gdn", "split_fp16-sr_nvfp4_vs_conventional")["target"])),
    *[("{}", STANDING["gdn"], (lambda d, r=r: (standing_row(*r),))) for r in STANDING_ROWS],
    *[("{}", STANDING_H100["gdn"], (lambda d, r=r: (standing_row(*r, files=STANDING_H100, bounds=False),))) for r in STANDING_ROWS],
    ("H100 copy ceiling measured in the run ({:.0f} GB/s) the NVFP4 output-only steps run at {:.1f} % (Mamba-2) and {:.1f} % (GDN) of their byte bound",
     STANDING_H100["mamba2"],
     lambda d: (d["ceiling"]["GBps"], *(100 * summ(d, op)["read"]["nvfp4"]["nonflush_GBps"] / d["ceiling"]["GBps"]
                                         for op in ("mamba2", "gdn")))),
    ("run at `{}` with the kernels as they stand (`reports/bench/bench_kernels_round2zp_quick_h100.json`: "
     "`--ops {}`, then `--ops {}`, joined by `--resummarise`; {:d} of {:d} correctness checks passed",
     STANDING_H100["gdn"],
     lambda d: (one(m["git"] for m in d["provenance"]["merged_from"]),
                *(m["settings"]["ops"][0] for m in sorted(d["provenance"]["merged_from"], key=lambda m: m["created"])),
                sum(c["ok"] for c in d["correctness"].values()), len(d["correctness"]))),
    # the table's run against the earlier full H100 run
    ("the batch-1 targets moved: Mamba-2's from {:.2f}× to {:.2f}× and GDN's from {:.2f}× to {:.2f}×. Every other "
     "ratio of the table moved by at most {:.3f}, and the NVFP4 row by at most {:.1f} points.", STANDING_H100["gdn"],
     lambda d: (*(target(r, op, "batch1_replay_vs_conventional")["value"]
                  for op in ("mamba2", "gdn") for r in (load(EARLIER_H100), d)),
                *h100_moves(d))),
    ("a loop that waited for each record in turn (GDN's batch-1 flush {:.2f} µs in the earlier run, {:.2f} in "
     "this one)", STANDING_H100["gdn"],
     lambda d: tuple(summ(r, "gdn")["batch"]["1"]["flush_us"] for r in (load(EARLIER_H100), d))),
    ("In the run of this table Mamba-2's batch 1 reads {:.3f}× ({:.3f}× to {:.3f}× over the rounds), {}, its "
     "output-only step at {:.2f} µs against the conventional step's {:.2f}; GDN's reads {:.3f}× ({:.3f}× to "
     "{:.3f}×), {}, its output-only step at {:.2f} µs against the conventional step's {:.2f} and its flush at "
     "{:.2f}.", STANDING_H100["gdn"],
     lambda d: (*batch1_rounds(d, "mamba2"), *batch1_rounds(d, "gdn"), summ(d, "gdn")["batch"]["1"]["flush_us"])),
    # the bytes recount: the measured file's summary (earlier bytes model) against the recounted one
    ("but it changes what GDN's misses are made of. In the twenty-ninth run, GDN's NVFP4 output-only step "
     "runs at {:.1f} % of its byte bound, not the {:.1f} % the run first reported. The byte bound of GDN's "
     "`shared:fp32` target rises from {:.2f}× to {:.2f}× there, so the {:.2f}× target is no longer beyond the "
     "bytes; it needs both of its ReplaySSM steps at {:.1f} % of the copy ceiling. The bound of GDN's "
     "target against the fla peer rises from {:.2f}× to {:.2f}×. In the run of the table above, whose "
     "conventional step timed faster, that bound is {:.3f}×", RECOUNTED_H200,
     lambda d: (target(d, "gdn", "nvfp4_nonflush_pct_byte_bound")["value"],
                target(load(MEASURED_H200), "gdn", "nvfp4_nonflush_pct_byte_bound")["value"],
                target(load(MEASURED_H200), "gdn", "replay_vs_conventional")["byte_bound"],
                target(d, "gdn", "replay_vs_conventional")["byte_bound"],
                target(d, "gdn", "replay_vs_conventional")["target"],
                100 * target(d, "gdn", "replay_vs_conventional")["target"]
                / target(d, "gdn", "replay_vs_conventional")["byte_bound"],
                target(load(MEASURED_H200), "gdn", "replay_vs_fla")["byte_bound"],
                target(d, "gdn", "replay_vs_fla")["byte_bound"],
                target(load(STANDING["gdn"]), "gdn", "replay_vs_conventional")["byte_bound"])),
    # the thirty-first run against the twenty-ninth (recounted)
    ("the fp16-SR/NVFP4 flush took {:.1f} µs against {:.1f} (Mamba-2) and {:.1f} against {:.1f} (GDN), "
     "the FP8-SR/NVFP4 flush {:.1f} against {:.1f} (Mamba-2); the flush target reads {:.2f}× against "
     "{:.2f}× (Mamba-2) and {:.2f}× against {:.2f}× (GDN)", STANDING["mamba2"],
     lambda d: (*(summ(r, op)["update"][upd]["flush_us"]
                  for op, upd in (("mamba2", "fp16-sr"), ("gdn", "fp16-sr"), ("mamba2", "fp8e4m3-sr"))
                  for r in (d, load(RECOUNTED_H200))),
                *(target(r, op, "fp16sr_flush_vs_fp16sr_conventional")["value"]
                  for op in ("mamba2", "gdn") for r in (d, load(RECOUNTED_H200))))),
    ("Mamba-2's batch-1 target reads missed, {:.2f}× against {:.2f}×, by the spread of two runs", STANDING["mamba2"],
     lambda d: tuple(summ(r, "mamba2")["batch"]["1"]["speedup_vs_conventional"] for r in (d, load(RECOUNTED_H200)))),
    ("and its conventional step timed {:.2f} µs against {:.2f} while the ReplaySSM steps amortised to {:.2f} µs "
     "against {:.2f}", STANDING["mamba2"],
     lambda d: (*(summ(r, "mamba2")["batch"]["1"]["conventional_us"] for r in (d, load(RECOUNTED_H200))),
                *(summ(r, "mamba2")["batch"]["1"]["replay_amortised_us"] for r in (d, load(RECOUNTED_H200))))),
    ("Mamba-2's NVFP4 output-only step took {:.1f} µs against {:.1f} with its kernel unchanged, {:.1f} % of "
     "its byte bound against {:.1f} %", STANDING["mamba2"],
     lambda d: (*(summ(r, "mamba2")["read"]["nvfp4"]["nonflush_us"] for r in (d, load(RECOUNTED_H200))),
                *(target(r, "mamba2", "nvfp4_nonflush_pct_byte_bound")["value"] for r in (d, load(RECOUNTED_H200))))),
    ("({:.3f}× in the run of the table above)", STANDING["mamba2"],
     lambda d: (target(d, "mamba2", "replay_vs_conventional")["value"],)),
    ("on one H200 (`--ops mamba2`, {:.0f} s, then `--ops gdn`, {:.0f} s) joined by `--resummarise`; {:d} of {:d} "
     "correctness checks passed", STANDING["mamba2"],
     lambda d: (*(m["seconds"] for m in d["provenance"]["merged_from"]),
                sum(c["ok"] for c in d["correctness"].values()), len(d["correctness"]))),
    ("verify of 8 drafts {:.1f} → {:.1f} µs, speculative flush {:.1f} → {:.1f} µs, and the verify round {:.2f}× → "
     "{:.2f}× a conventional step (target ≤ {:.1f}×: missed)", "reports/bench/bench_kernels_round2za_quick.json",
     lambda d: (*(summ(r, "mamba2")["drafts"]["8"][k]
                  for k in ("verify_us", "spec_flush_us")
                  for r in (load("reports/bench/bench_kernels_round2y_quick.json"), d)),
                target(load("reports/bench/bench_kernels_round2y_quick.json"), "mamba2", "verify_T8_vs_conventional")["value"],
                target(d, "mamba2", "verify_T8_vs_conventional")["value"],
                target(d, "mamba2", "verify_T8_vs_conventional")["target"])),
    ("{:.3f}× there against {:.3f}×, because its conventional step timed {:.2f} µs against {:.2f} while the "
     "ReplaySSM steps amortised to the same {:.2f} µs against {:.2f}.", MEASURED_H200,
     lambda d: (*(summ(r, "mamba2")["batch"]["1"]["speedup_vs_conventional"] for r in (d, load(PREVIOUS_H200))),
                *(summ(r, "mamba2")["batch"]["1"]["conventional_us"] for r in (d, load(PREVIOUS_H200))),
                *(summ(r, "mamba2")["batch"]["1"]["replay_amortised_us"] for r in (d, load(PREVIOUS_H200))))),
    ("GDN's batch-1 ratio rose from {:.2f}× to {:.2f}×: the output-only step took {:.2f} µs against {:.2f}",
     MEASURED_H200,
     lambda d: (summ(load(PREVIOUS_H200), "gdn")["batch"]["1"]["speedup_vs_conventional"],
                summ(d, "gdn")["batch"]["1"]["speedup_vs_conventional"],
                summ(d, "gdn")["batch"]["1"]["nonflush_us"],
                summ(load(PREVIOUS_H200), "gdn")["batch"]["1"]["nonflush_us"])),
    ("(an H100 A/B in one process had timed it at {:.2f}-{:.2f} µs against {:.2f}-{:.2f} for the order removed)",
     STANDING["gdn"], lambda d: batch1_forms_range()),  # (the diagnostics file is JSON lines)
    ("GDN's flush ratio read {:.2f}× against {:.2f}× with the flush itself unchanged ({:.1f} µs against {:.1f})",
     MEASURED_H200,
     lambda d: (target(d, "gdn", "fp16sr_flush_vs_fp16sr_conventional")["value"],
                target(load(PREVIOUS_H200), "gdn", "fp16sr_flush_vs_fp16sr_conventional")["value"],
                *(summ(r, "gdn")["update"]["fp16-sr"]["flush_us"] for r in (d, load(PREVIOUS_H200))))),
    ("divides by it), {:.1f} µs against {:.1f} at fp32's shape in the run before", MEASURED_H200,
     lambda d: tuple(summ(r, "gdn")["conventional_formats"]["fp16-sr"]["us"] for r in (d, load(PREVIOUS_H200)))),
    ("H100 the two shapes had timed {:.0f} µs against {:.0f}", STANDING["gdn"],
     lambda d: (conv_rule_fastest("gdn", "fp16-sr", "rule"), conv_rule_fastest("gdn", "fp16-sr", "fp32-shape"))),
    ("its FP8-SR conventional step, a baseline of no target, went from {:.0f} to {:.0f} µs", STANDING["gdn"],
     lambda d: (conv_rule_fastest("mamba2", "fp8e4m3-sr", "fp32-shape"), conv_rule_fastest("mamba2", "fp8e4m3-sr", "rule"))),
    ("Mamba-2's `shared:fp32` ratio was {:.3f}× there, {:.3f}× and {:.3f}× in the two H200 runs before it",
     MEASURED_H200,
     lambda d: tuple(target(load(f"reports/bench/bench_kernels_{r}_quick.json"), "mamba2", "replay_vs_conventional")["value"]
                     for r in ("round2zf", "round2zd", "round2za"))),
    ("tensor-core chunked fold ({:.1f}× slower on an H100)", STANDING["gdn"],
     lambda d: (chunked_fold_slowdown(),)),
    ("(H200, fp16-SR/NVFP4 {:.0f}-{:.0f} µs against {:.0f};", STANDING["gdn"], lambda d: flush_warps_range()),
    ("fp16-SR/NVFP4 flush {:.0f} µs against {:.0f} (Mamba-2) and {:.0f} against {:.0f} (GDN), the FP8-SR/NVFP4 "
     "flush {:.0f} against {:.0f} (Mamba-2;", STANDING["mamba2"], lambda d: hw_block_scales_flushes()),
    ("the fp16-SR/NVFP4 flush {:.0f} µs against {:.0f} (Mamba-2) and {:.0f} against {:.0f} (GDN), the FP8-SR/NVFP4 flush "
     "{:.0f} against {:.0f} (Mamba-2), which takes the flush target from {:.2f}× to {:.2f}× (Mamba-2) and {:.2f}× to "
     "{:.2f}× (GDN) there", EARLIER_H100,
     lambda d: (*(summ(r, op)["update"][upd]["flush_us"]
                  for op, upd in (("mamba2", "fp16-sr"), ("gdn", "fp16-sr"), ("mamba2", "fp8e4m3-sr"))
                  for r in (d, load("reports/bench/bench_kernels_round2ze_quick_h100.json"))),
                *(target(r, op, "fp16sr_flush_vs_fp16sr_conventional")["value"]
                  for op in ("mamba2", "gdn")
                  for r in (load("reports/bench/bench_kernels_round2ze_quick_h100.json"), d)))),
    # the first study on trained dynamics
    *[(f"| gutenberg-{m} ({arch}) | `{pol}` | {{:.1e}} | {{:.1e}} | {{:.1e}} |", STUDY[m], study_row(pol))
      for m, arch in (("nemotron-h", "Mamba-2"), ("qwen3.5", "GDN"))
      for pol in ("shared:nvfp4-sr", "split:fp32/nvfp4", "split:fp16-sr/nvfp4", "conventional:bf16")],
    # fast generation over the four runs (each passed its check: the table is read only when all did)
    *[(f"| qwen3.5-4b-shape, {label} | {{:.1f}} | {{:.1f}} | {{:.1f}} |", GENERATE,
       (lambda name: lambda d: tuple(gen_ms(gen_all(), name, b) for b in (1, 8, 64)))(row))
      for label, row in GEN_ROWS],
    *[(f"| nemotron-3-nano-4b-shape, {label} | {{:.1f}} | {{:.1f}} | {{:.1f}} |", GENERATE,
       (lambda name: lambda d: tuple(gen_ms(gen_all(), name, b, NEMO) for b in (1, 8, 64)))(row))
      for label, row in GEN_ROWS],
    ("The lossy policies take at most {:.2f}× the `fp32` step wherever measured", GENERATE,
     lambda d: (max(r["step_ms_median"] / gen_ms(gen_all(), "fp32", r["batch"], r["preset"]) for r in gen_all()["rows"]
                    if r["row"] not in (PLAIN_ROW, "fp32")),)),
    ("`fp32` takes {:.3f}× (Qwen) and {:.3f}× (Nemotron) of plain transformers at batch 8", GENERATE,
     lambda d: tuple(gen_ms(gen_all(), "fp32", 8, p) / gen_ms(gen_all(), PLAIN_ROW, 8, p) for p in (QWEN, NEMO))),
    ("taking {:.1f}–{:.1f} s (Qwen) and {:.1f}–{:.1f} s (Nemotron) against {:.1f}–{:.1f} s for the others", GENERATE,
     lambda d: (*prefill_span(True, 8, QWEN), *prefill_span(True, 8, NEMO),
                min(prefill_span(False, 8, QWEN)[0], prefill_span(False, 8, NEMO)[0]),
                max(prefill_span(False, 8, QWEN)[1], prefill_span(False, 8, NEMO)[1]))),
    ("policies' prefill took {:.1f}–{:.1f} s (Qwen) and {:.1f}–{:.1f} s (Nemotron) against {:.1f} s and {:.1f} s "
     "for `fp32`", GENERATE,
     lambda d: (*prefill_span(True, 64, QWEN), *prefill_span(True, 64, NEMO),
                *(gen_row(gen_all(), "fp32", 64, p)["prefill_s"] for p in (QWEN, NEMO)))),
    ("plain transformers' own prefill takes {:.1f} s (Qwen) and {:.1f} s (Nemotron) at batch 64 and "
     "{:.2f}–{:.2f} s at batch 8", GENERATE,
     lambda d: (*(gen_row(gen_all(), PLAIN_ROW, 64, p)["prefill_s"] for p in (QWEN, NEMO)),
                *(f(gen_row(gen_all(), PLAIN_ROW, 8, p)["prefill_s"] for p in (QWEN, NEMO)) for f in (min, max)))),
    ("A policy prefill is {:.1f}–{:.1f}× slower than the unadapted model's", GENERATE,
     lambda d: tuple(f(gen_row(gen_all(), "fp32", b, p)["prefill_s"] / gen_row(gen_all(), PLAIN_ROW, b, p)["prefill_s"]
                       for p in (QWEN, NEMO) for b in (8, 64)) for f in (min, max))),
    ("`fp32` prefill takes {:.2f}–{:.2f} s at batch 8", GENERATE,
     lambda d: tuple(f(gen_row(gen_all(), "fp32", 8, p)["prefill_s"] for p in (QWEN, NEMO)) for f in (min, max))),
    # the play task through replayssm on the GPU (reports/trained-study-data/lmeval-*.json)
    *[(task_row_text(m, pol), TASK[m], functools.partial(task_row_values, pol=pol))
      for m in TASK for pol in TASK_POLICIES],
    # the shipped trained models (their cards)
    ("| `gutenberg-qwen3.5` | 6 Gated DeltaNet + 2 attention | {:.2f}M | {} | {:.3f} | {} / {} / {} of {} |",
     QWEN_CARD, card_row),
    ("| `gutenberg-nemotron-h` | 6 Mamba-2 + 2 attention + 6 MLP | {:.2f}M | {} | {:.3f} | {} / {} / {} of {} |",
     NEMO_CARD, card_row),
    # quantize kernels
    ("NVFP4 quantize of a {:.0f} GiB fp32 state runs at {:.0f} GB/s, {:.1f} % of the {:.0f} GB/s copy "
     "measured in the same run", QUANT,
     lambda d: (d["state_bytes"] / 2**30, d["kernels"]["nvfp4 quantize"]["gbps"],
                100 * d["kernels"]["nvfp4 quantize"]["frac_of_copy"], d["copy"]["gbps"])),
    # float64 equivalence
    ("one head, {}×{} state, L = {}): ReplaySSM equals conventional decode to {:.1e} (Mamba-2), {:.1e} "
     "(GDN), {:.1e} (KDA) relative over {} steps with {} state writes instead of {}; speculative decoding "
     "with {} drafts and random acceptance over {} rounds matches token-by-token decode to ≤ {:.1e} with "
     "{} state writes against {} for a snapshot-per-draft baseline.", EQUIV,
     lambda d: (*one(tuple(s) for s in equiv(d, "decode", "state")), one(equiv(d, "decode", "L")),
                *equiv(d, "decode", "max_rel_diff"), one(equiv(d, "decode", "steps")),
                one(equiv(d, "decode", "replay_state_writes")), one(equiv(d, "decode", "conventional_state_writes")),
                one(equiv(d, "speculative", "drafts")), one(equiv(d, "speculative", "rounds")),
                max(equiv(d, "speculative", "max_rel_diff")), one(equiv(d, "speculative", "replay_state_writes")),
                one(equiv(d, "speculative", "snapshot_state_writes")))),
    ("# float64: ReplaySSM = conventional; {} vs {} writes", EQUIV,
     lambda d: (one(equiv(d, "decode", "replay_state_writes")), one(equiv(d, "decode", "conventional_state_writes")))),
    # teacher-forced scan kernels
    ("checked against its torch reference first ({}/{} passed)", SCAN,
     lambda d: (sum(c["ok"] for c in d["checks"]), len(d["checks"]))),
    ("processes {:,} tokens in {:.0f} ms (fp32) to {:.0f} ms (`split:fp16-sr/nvfp4`) at batch 1, and a "
     "Nemotron-3-Super Mamba-2 layer in {:.0f} ms (fp32) to {:.0f} ms (`split:fp16-sr/nvfp4`)", SCAN,
     lambda d: (d["shapes"]["T"], scan_ms(d, "gdn", "fp32"), scan_ms(d, "gdn", "split:fp16-sr/nvfp4"),
                scan_ms(d, "mamba2", "fp32"), scan_ms(d, "mamba2", "split:fp16-sr/nvfp4"))),
    ("latency-bound ({:.2f}–{:.1f} % of the {:.0f} GB/s copy ceiling measured in the same run, over batches "
     "{}–{})", SCAN,
     lambda d: (min(t["pct_of_copy"] for t in d["timings"] if "pct_of_copy" in t),
                max(t["pct_of_copy"] for t in d["timings"] if "pct_of_copy" in t), d["copy_ceiling"]["GBps"],
                min(t["B"] for t in d["timings"]), max(t["B"] for t in d["timings"]))),
    # simulator
    ("5 default policies ({:.0f} s)", SIM_4K, lambda d: (d["seconds"],)),
    ("`reports/sim/mamba2-32768.json` ({:.0f} s on a 2-core CPU; the default {:,}-step run, "
     "`reports/sim/mamba2-4096.json`, took {:.0f} s)", SIM_32K,
     lambda d: (d["seconds"], load(SIM_4K)["settings"]["steps"], load(SIM_4K)["seconds"])),
    ("{}", SIM_32K, lambda d: (sim_header(d),)),
    *[("{}", SIM_32K, functools.partial(lambda p, d: (sim_row(d, p),), p))
      for p in ("fp32", "conventional:nvfp4-sr", "shared:nvfp4-sr", "split:fp32/nvfp4", "split:fp16-sr/nvfp4")],
    ("It levels off at {:.2f} here", SIM_32K,
     lambda d: (d["results"]["shared:nvfp4-sr"]["mean_rel_error_last"][-1],)),
    ("shared reaches conventional ({:.2f} → {:.2f} by {:,} steps)", SIM_1HEAD,
     lambda d: (d["results"]["shared:nvfp4-sr"]["mean_rel_error_last"][0],
                d["results"]["shared:nvfp4-sr"]["mean_rel_error_last"][-1], d["settings"]["steps"])),
    # KL engine on the H200
    ("128K tokens × (fp32 reference + {} policies) in {:.0f} s (target ≤ {} s), and the teacher-forced engine "
     "{:.0f}× faster than token-by-token decode through the same adapters on the same {}-token stream "
     "(token-by-token timed over {} steps and scaled; the JSON says so)", KL,
     lambda d: (len(d["policies"]), d["long_run"]["seconds"], d["long_run"]["target_seconds"],
                d["side_by_side"]["speedup"], d["side_by_side"]["decode_tokens"],
                d["side_by_side"]["token_by_token_steps_timed"])),
    # decode-step kernels, batch 256, L = 16
    ("| conventional step, % of the {:.0f} GB/s copy ceiling | {:.1f} µs, {:.1f} % | {:.1f} µs, {:.1f} % | "
     "≥ {:.0f} % |", KERNELS,
     lambda d: (summ(d, "mamba2")["ceiling_for_targets_GBps"],
                b256(d, "mamba2")["conventional_us"], target(d, "mamba2", "conventional_pct_ceiling")["value"],
                b256(d, "gdn")["conventional_us"], target(d, "gdn", "conventional_pct_ceiling")["value"],
                one([target(d, op, "conventional_pct_ceiling")["target"] for op in ("mamba2", "gdn")]))),
    ("| ReplaySSM per token, amortised | {:.1f} µs | {:.1f} µs |", KERNELS,
     lambda d: (b256(d, "mamba2")["replay_amortised_us"], b256(d, "gdn")["replay_amortised_us"])),
    ("| ReplaySSM vs our conventional | {:.2f}× | {:.2f}× | ≥ {:.1f}× / {:.2f}× |", KERNELS,
     lambda d: (target(d, "mamba2", "replay_vs_conventional")["value"], target(d, "gdn", "replay_vs_conventional")["value"],
                target(d, "mamba2", "replay_vs_conventional")["target"], target(d, "gdn", "replay_vs_conventional")["target"])),
    ("| vs flash-linear-attention ({:.1f} / {:.1f} µs) | {:.2f}× | {:.2f}× | ≥ {:.1f}× / {:.1f}× |", KERNELS,
     lambda d: (b256(d, "mamba2")["fla_us"], b256(d, "gdn")["fla_us"],
                target(d, "mamba2", "replay_vs_fla")["value"], target(d, "gdn", "replay_vs_fla")["value"],
                target(d, "mamba2", "replay_vs_fla")["target"], target(d, "gdn", "replay_vs_fla")["target"])),
    ("| non-flush step, NVFP4 vs fp32 read copy | {:.2f}× | {:.2f}× | ≥ {:.0f}× |", KERNELS,
     lambda d: (target(d, "mamba2", "nvfp4_vs_fp32_read_nonflush")["value"],
                target(d, "gdn", "nvfp4_vs_fp32_read_nonflush")["value"],
                one([target(d, op, "nvfp4_vs_fp32_read_nonflush")["target"] for op in ("mamba2", "gdn")]))),
    ("| verify T = 8 + amortised flush, vs one conventional step | {:.2f}× | {:.2f}× | ≤ {:.1f}× |", KERNELS,
     lambda d: (target(d, "mamba2", "verify_T8_vs_conventional")["value"],
                target(d, "gdn", "verify_T8_vs_conventional")["value"],
                one([target(d, op, "verify_T8_vs_conventional")["target"] for op in ("mamba2", "gdn")]))),
    ("GDN's conventional step sits just under its threshold ({:.1f} %;", KERNELS,
     lambda d: (target(d, "gdn", "conventional_pct_ceiling")["value"],)),
    ("The flushes cost {:.1f}–{:.1f} conventional steps", KERNELS,
     lambda d: (min(b256(d, op)["flush_us"] / b256(d, op)["conventional_us"] for op in ("mamba2", "gdn")),
                max(b256(d, op)["flush_us"] / b256(d, op)["conventional_us"] for op in ("mamba2", "gdn")))),
    ("GDN's non-flush step runs at {:.0f} % of the {:.0f} GB/s copy ceiling", KERNELS,
     lambda d: (100 * summ(d, "gdn")["read"]["fp32"]["nonflush_GBps"] / summ(d, "gdn")["ceiling_for_targets_GBps"],
                summ(d, "gdn")["ceiling_for_targets_GBps"])),
    ("the bytes bound of the NVFP4 read is {:.1f}× (Mamba-2) and {:.1f}× (GDN)", KERNELS,
     lambda d: tuple(kernel_rows(d, op, "nonflush", "read", "fp32")["bytes"]
                     / kernel_rows(d, op, "nonflush", "read", "nvfp4")["bytes"] for op in ("mamba2", "gdn"))),
    ("FP8 reads give {:.1f}× / {:.1f}×", KERNELS,
     lambda d: tuple(summ(d, op)["read"]["fp32"]["nonflush_us"] / summ(d, op)["read"]["fp8e4m3"]["nonflush_us"]
                     for op in ("mamba2", "gdn"))),
]

# fp32 accuracy of the multiple-choice play task on CPU, one README table row per model and design
PLAY_CHOICE = (("speaker-other-plays-k4", "speaker", "names from the other plays", 4),
               ("speaker-cast-k4", "speaker", "other speakers of the play", 4),
               ("speaker-recent-k4", "speaker", "speakers of the last 40 speeches", 4),
               ("speaker-recent-k2", "speaker", "speakers of the last 40 speeches", 2),
               ("word-k4", "word", "words of the play with as many letters", 4))
CLAIMS += [(f"| {model} | {kind} | {what} | {k} | {{}} | {{:.1f}} % | {{:.1f}} % |",
            f"reports/play-choice-cpu/{stem}-{model}.json",
            lambda d: (d["summary"]["n"], 100 * d["summary"]["acc"], 100 * d["summary"]["acc_last256"]))
           for model in ("gutenberg-qwen3.5", "gutenberg-nemotron-h") for stem, kind, what, k in PLAY_CHOICE]

# Numbers with a unit that are not measurements (definitions, limits, confidence levels).
NOT_MEASUREMENTS = ("(target ≤ 1.15×)", "short of the 3× target", "95 % CI", "95 % interval", "states over 128×128", "≤ ~2^-21")


def source(rel: str):
    """A claim's source file: a JSON result, the rows of a JSON-lines diagnostics file, or a log's text."""
    if rel.endswith(".jsonl"):
        return diagnostics_rows(rel)
    if rel.endswith(".json"):
        return load(rel)
    return (ROOT / rel).read_text()


def rendered(claim) -> str:
    text, rel, values = claim
    vals = values(source(rel))
    assert isinstance(vals, tuple) and len(vals) == text.count("{"), f"{text!r}: values {vals!r}"
    return text.format(*vals)


@pytest.mark.parametrize("claim", CLAIMS, ids=[f"{i:02d}-{c[1].split('/')[-1]}" for i, c in enumerate(CLAIMS)])
def test_readme_number_matches_its_result_file(claim):
    phrase = rendered(claim)
    assert phrase in readme(), (f"README.md does not say what {claim[1]} says; expected the phrase\n  {phrase}\n"
                                "(update the README from the JSON, or the JSON by re-measuring)")


def test_readme_states_which_targets_are_met():
    d = load(KERNELS)
    met = sorted((op, name) for op in ("mamba2", "gdn") for name, t in summ(d, op)["targets"].items() if t["met"])
    assert met == [("mamba2", "conventional_pct_ceiling")], met
    assert "Only the Mamba-2 conventional target is met" in readme()
    gdn = target(d, "gdn", "conventional_pct_ceiling")
    assert gdn["value"] < gdn["target"]  # "just under its threshold"


def test_readme_labels_the_kl_run_that_skipped_its_check():
    d = load(KL)
    skipped = d["provenance"]["settings"]["skip_check"] and d["side_by_side"]["speedup_valid"] is None
    label = "in a run that **skipped its engine-agreement check** (`--skip-check`; `speedup_valid` is null in the JSON)"
    assert (label in readme()) == skipped, ("the README's label of the KL benchmark must match whether its "
                                           "engine-agreement check ran")
    lr = d["long_run"]
    assert lr["decode_tokens_done"] == lr["tokens"] - lr["prefill"], "the 128K-token time must be measured, not estimated"
    assert lr["tokens"] // 1024 == 128


def test_default_sim_takes_under_a_minute():
    assert load(SIM_4K)["seconds"] < 60
    assert "single synthetic Mamba-2 layer, 5 policies, 4096 steps, < 1 min on CPU" in readme()


UNIT_NUMBER = re.compile(r"(?<![\w.^])\d[\d,]*(?:\.\d+)?(?:e-?\d+)?(?:\s?[–-]\s?\d[\d.]*)?\s?(?:µs|ms|s\b|GB/s|%|×|e-\d+)"
                         r"|(?<![\w.])\d\.\d+e-\d+")


def loose_numbers(text: str, phrases, number=UNIT_NUMBER) -> list[str]:
    """Each number ``number`` finds in ``text`` outside every occurrence of the checked ``phrases``, with
    some text around it."""
    covered = []
    for phrase in phrases:
        start = text.find(phrase)
        while start >= 0:
            covered.append((start, start + len(phrase)))
            start = text.find(phrase, start + 1)
    return [text[max(0, m.start() - 30):m.end() + 10] for m in number.finditer(text)
            if not any(a <= m.start() and m.end() <= b for a, b in covered)]


def test_every_measured_number_is_tied():
    loose = loose_numbers(readme(), [rendered(claim) for claim in CLAIMS] + list(NOT_MEASUREMENTS))
    assert not loose, ("README numbers with no result file behind them (add a claim to CLAIMS, or remove the "
                       "number):\n" + "\n".join(loose))


def test_the_checks_can_fail():
    """A changed digit is caught by the claim table and by the coverage scan."""
    (claim,) = [c for c in CLAIMS if c[1] == QUANT and "NVFP4 quantize" in c[0]]
    phrase = rendered(claim)
    tampered = phrase.replace(f"{load(QUANT)['kernels']['nvfp4 quantize']['gbps']:.0f}", "9999")
    assert tampered != phrase and tampered not in readme()
    assert UNIT_NUMBER.search("runs at 9999 GB/s") and UNIT_NUMBER.search("to 1.6e-16 (Mamba-2)")
