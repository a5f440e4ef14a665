"""Write the SYNTHETIC task rows shipped in ``evals/tasks/synthetic/`` (tests and smoke runs).

Every row is made up here (arithmetic questions, invented needles); none comes from a benchmark.
The rows follow each upstream dataset's column layout, so the upstream prompts, filters and
metrics run on them unchanged. ``python -m precision_lab.evals.tasks.make_synthetic DIR`` rewrites
the folder; a test checks that the shipped files equal this module's output.
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from precision_lab.evals.tasks import MATH_SUBJECTS, MMLU_PRO_SUBJECTS, RULER_NIAH

LETTERS = "ABCDEFGHIJ"


def _gpqa(rng: random.Random) -> list[dict]:
    rows = []
    for i in range(4):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        right = a + b
        wrong = [right + d for d in rng.sample([-11, -2, -1, 1, 2, 10], 3)]
        rows.append({"Record ID": f"synthetic-{i}", "Question": f"(synthetic item) What is {a} + {b}?",
                     "Correct Answer": str(right), "Incorrect Answer 1": str(wrong[0]),
                     "Incorrect Answer 2": str(wrong[1]), "Incorrect Answer 3": str(wrong[2]),
                     "Explanation": f"{a} + {b} = {right}.", "Subdomain": "Synthetic arithmetic",
                     "High-level domain": "Synthetic"})
    return rows


def _mmlu_pro_row(rng: random.Random, qid: int, subject: str, with_cot: bool) -> dict:
    a, b = rng.randint(2, 30), rng.randint(2, 30)
    right = a * b
    options = sorted({right, *(right + d for d in rng.sample(range(-20, 21), 12) if d)})[:10]
    if right not in options:
        options[-1] = right
    rng.shuffle(options)
    k = options.index(right)
    cot = (f"A: Let's think step by step. {a} times {b} is {right}. The answer is ({LETTERS[k]})."
           if with_cot else "")
    return {"question_id": qid, "question": f"(synthetic {subject} item) What is {a} times {b}?",
            "options": [str(o) for o in options], "answer": LETTERS[k], "answer_index": k,
            "cot_content": cot, "category": subject.replace("_", " "), "src": "synthetic"}


def _mmlu_pro(rng: random.Random) -> tuple[list[dict], list[dict]]:
    test, val, qid = [], [], 0
    for s in MMLU_PRO_SUBJECTS:
        for _ in range(2):
            test.append(_mmlu_pro_row(rng, qid, s, with_cot=False))
            qid += 1
        for _ in range(5):  # the upstream task is 5-shot from the validation split of the subject
            val.append(_mmlu_pro_row(rng, qid, s, with_cot=True))
            qid += 1
    return test, val


def _math(rng: random.Random, cfg: str) -> list[dict]:
    rows = []
    for i, level in enumerate(("Level 5", "Level 5", "Level 3")):  # the Level 3 row must be filtered out
        a, b = rng.randint(2, 20), rng.randint(2, 20)
        rows.append({"problem": f"(synthetic {cfg} item {i}) Compute ${a}^2 + {b}$.",
                     "level": level, "type": cfg.replace("_", " ").title(),
                     "solution": f"We have ${a}^2 = {a * a}$, so the sum is $\\boxed{{{a * a + b}}}$."})
    return rows


def _ruler(rng: random.Random, task: str) -> list[dict]:
    rows = []
    multi = task in ("niah_multivalue", "niah_multiquery")
    for i in range(2):
        key = f"synthetic-key-{rng.randint(100, 999)}"
        values = [str(rng.randint(1_000_000, 9_999_999)) for _ in range(4 if multi else 1)]
        filler = " ".join(["The grass is green. The sky is blue. The sun is yellow."] * 6)
        needles = " ".join(f"One of the special magic numbers for {key} is: {v}." for v in values)
        text = (f"Some special magic numbers are hidden within the following text. Make sure to memorize it. "
                f"I will quiz you about the numbers afterwards.\n{filler} {needles} {filler}\n"
                f"What are all the special magic numbers for {key} mentioned in the provided text?")
        noun = "numbers are" if len(values) > 1 else "number is"
        rows.append({"index": i, "input": text, "outputs": values, "length": len(text.encode()),
                     "max_length": 4096,
                     "gen_prefix": f"The special magic {noun.split()[0]} for {key} mentioned in the provided text "
                                   f"{noun.split()[1]}"})
    return rows


def synthetic_rows() -> dict[str, list[dict]]:
    """Relative file path -> rows, deterministic."""
    rng = random.Random(20261129)
    files: dict[str, list[dict]] = {"gpqa/gpqa_diamond.jsonl": _gpqa(rng)}
    test, val = _mmlu_pro(rng)
    files["mmlu_pro/test.jsonl"], files["mmlu_pro/validation.jsonl"] = test, val
    for cfg in MATH_SUBJECTS.values():
        files[f"math_hard/{cfg}.jsonl"] = _math(rng, cfg)
    for t in RULER_NIAH:
        files[f"ruler/{t}.jsonl"] = _ruler(rng, t)
    return files


def to_jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows)


def write_synthetic(out_dir: str | Path) -> list[Path]:
    out = Path(out_dir)
    written = []
    for rel, rows in synthetic_rows().items():
        p = out / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(to_jsonl(rows))
        written.append(p)
    return written


if __name__ == "__main__":
    from precision_lab.evals.tasks import SYNTHETIC_DIR

    target = Path(sys.argv[1]) if len(sys.argv) > 1 else SYNTHETIC_DIR
    for p in write_synthetic(target):
        print(p)
