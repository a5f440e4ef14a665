"""A/B of GDN's batch-1 rules: each rule of the replay step at batch 1 set against its alternative, in
one process, with every other rule left on.

    python scripts/ab_gdn_batch1_rules.py -o reports/diagnostics/gdn-batch1-rules-ab-<commit>-<card>.jsonl
    python scripts/ab_gdn_batch1_rules.py --check-only -o check.jsonl    # the bit checks alone (CPU: TRITON_INTERPRET=1)

The rules are module constants of ``precision_lab.kernels.gdn.decode`` that the launch wrappers read
on every call, so one process can time both sides of each by assigning the constant before a row and
restoring it after. First rows (``check``): both forms on the same inputs (``PROBLEMS["gdn"]``, seed 0),
their bf16 outputs and stored fp32 states compared. Then ``--warmup-rounds`` rounds (negative ``rep``,
``"warmup": true``) and ``--rounds`` timed rounds (``rep`` from 0), each the conventional step and then
every rule's two forms; the order of the rules and of the two forms is reversed every other round, so
neither side always runs first. The warm-up rounds are written but left out of the printed ranges: in
the first round of a fresh process the first two rows timed read 4-10 % fast, whichever kernels
they ran (H100, seven runs), and the rows after them do not. It is not the clock: sampled beside one
run, the SM clock stayed at 1980 MHz throughout
(reports/diagnostics/gdn-batch1-rules-ab-ab7987c-h100-clocks.csv). Rows are appended as they are measured.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

#: (case, module constant, alternative value, kernel, window W). The rule's value is the constant's
#: value at start; the kernel is the step the rule changes (the output-only step or the flush).
CASES = (
    ("output_rows", "SMALL_GRID_OUTPUT_ROWS", 32, "nonflush", 7),
    ("quarters", "WINDOW_SCORES_IN_QUARTERS", False, "nonflush", 7),
    ("early_qk", "EARLY_QK_LOADS", False, "nonflush", 7),
    ("fold_product", "FOLD_WINDOW_AS_PRODUCT", False, "flush", 15),
)


@contextlib.contextmanager
def rule_set_to(decode, constant, value):
    """The decode module's ``constant`` set to ``value`` inside the block, its value restored after."""
    kept = getattr(decode, constant)
    setattr(decode, constant, value)
    try:
        yield
    finally:
        setattr(decode, constant, kept)


def _relative(a, b) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def check_case(decode, problem_cls, dev, constant, alternative, kind, W) -> dict:
    """Run the step once per form from the same state and inputs; compare outputs and stored states."""
    import torch

    torch.manual_seed(0)
    prob = problem_cls(1, dev, W=W)
    state0 = prob.upd.data.clone()
    flush = kind == "flush"
    results = {}
    for form, value in (("rule", getattr(decode, constant)), ("alternative", alternative)):
        with rule_set_to(decode, constant, value):
            prob.upd.data.copy_(state0)
            prob.replay(flush, flush)  # a one-token flush folds the new token (fold_new = T == 1)
        results[form] = (prob.o.clone(), prob.upd.data.clone())
    (o_rule, s_rule), (o_alt, s_alt) = results["rule"], results["alternative"]
    finite = bool(torch.isfinite(o_rule.float()).all() and torch.isfinite(o_alt.float()).all()
                  and torch.isfinite(s_rule).all() and torch.isfinite(s_alt).all())
    return {"finite": finite, "out_rel": _relative(o_alt, o_rule), "state_rel": _relative(s_alt, s_rule),
            "state_bits_equal": bool(torch.equal(s_rule.view(torch.int32), s_alt.view(torch.int32)))}


def timed_rounds(measure, decode, rules, dev, rounds: int, warmup_rounds: int, emit) -> dict:
    """Time the conventional step and each rule's two forms per round (``measure(op, kind, batch, dev,
    **kw)`` returns a row with ``us``), emit every row; {(case, form): [µs of the timed rounds]}."""
    timings: dict[tuple, list[float]] = {}

    def keep(rep, key, row, **fields):  # a warm-up row (rep < 0) is written, not timed
        emit({**row, **fields, "rep": rep, **({"warmup": True} if rep < 0 else {})})
        if rep >= 0:
            timings.setdefault(key, []).append(row["us"])

    for rep in range(-warmup_rounds, rounds):
        keep(rep, ("conventional", ""), measure("gdn", "conventional", 1, dev), form="conventional", case=None)
        cases = CASES if rep % 2 == 0 else CASES[::-1]
        for case, constant, alternative, kind, W in cases:
            forms = [("rule", rules[constant]), ("alternative", alternative)]
            for form, value in (forms if rep % 2 == 0 else forms[::-1]):
                with rule_set_to(decode, constant, value):
                    row = measure("gdn", kind, 1, dev, W=W)
                keep(rep, (case, form), row, case=case, form=form, value=value)
    return timings


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", required=True, help="JSON-lines file the rows are appended to")
    ap.add_argument("--rounds", type=int, default=4, help="timed rounds (default: %(default)s)")
    ap.add_argument("--warmup-rounds", type=int, default=1,
                    help="rounds timed and written first but left out of the ranges (default: %(default)s)")
    ap.add_argument("--check-only", action="store_true", help="only the check rows (no GPU timing)")
    args = ap.parse_args(argv)

    import torch
    from precision_lab.kernels.gdn import decode

    from precision_lab.bench.decode_kernels import measure
    from precision_lab.bench.problems import PROBLEMS
    from precision_lab.provenance import git_hash

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if dev == "cpu" and not args.check_only:
        sys.exit("timing needs a GPU; on a CPU run --check-only with TRITON_INTERPRET=1")
    stamp = {"commit": git_hash(), "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu"}
    rules = {constant: getattr(decode, constant) for _, constant, *_ in CASES}
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)

    with out.open("a") as f:
        def emit(row):
            f.write(json.dumps({**row, **stamp}) + "\n")
            f.flush()

        for case, constant, alternative, kind, W in CASES:
            row = check_case(decode, PROBLEMS["gdn"], dev, constant, alternative, kind, W)
            emit({"check": True, "case": case, "kind": kind, "W": W, **row})
            print(f"check {case}: {row}")
        if args.check_only:
            return 0

        timings = timed_rounds(measure, decode, rules, dev, args.rounds, args.warmup_rounds, emit)

    for (case, form), us in timings.items():
        print(f"{case or 'conventional':>14} {form:>11}: {min(us):.2f}-{max(us):.2f} µs over {len(us)} rounds")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # running from a checkout
    from precision_lab.bench import use_checkout

    use_checkout(Path(__file__).resolve().parents[1])
    sys.exit(main())
