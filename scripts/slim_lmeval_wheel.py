"""Repack an lm-eval wheel without the task folders this project does not use, for a GPU machine
that receives its packages as wheels inside the working tree (64 MiB in all, docs/pitfalls.md §11).

    python -m pip download --no-deps --only-binary=:all: -d /tmp/w lm-eval==0.4.13
    python scripts/slim_lmeval_wheel.py /tmp/w/lm_eval-0.4.13-py3-none-any.whl -o .whl-lmeval

lm-eval's wheel is ~9 MB, almost all of it the YAML files of its ~230 task folders. The package code
and ``lm_eval/tasks/*.py`` (the task manager) are kept, and so are the folders the task presets of
``precision_lab.evals.tasks`` include by absolute path (``KEEP``); the tasks this project generates
(``evals/tasks/play_choice.py``, ``next_speaker.py``) come with their own YAML. The result is
``<name>-<version>-1-<tags>.whl`` (build tag 1, so it is never taken for the upstream file) with a
new RECORD.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import re
import zipfile
from pathlib import Path

KEEP = ("gpqa", "mmlu_pro", "leaderboard", "ruler")


def keep(name: str, keep_dirs=KEEP) -> bool:
    """Whether a wheel entry stays: everything but lm_eval/tasks/<folder>/... for folders not kept."""
    m = re.match(r"lm_eval/tasks/([^/]+)/", name)
    return m is None or m.group(1) in keep_dirs


def slim(src: Path, out_dir: Path, keep_dirs=KEEP) -> Path:
    m = re.fullmatch(r"(?P<name>[^-]+)-(?P<ver>[^-]+)-(?P<tags>[^-]+-[^-]+-[^-]+)\.whl", src.name)
    if not m:
        raise ValueError(f"{src.name} is not a wheel name without a build tag")
    dst = out_dir / f"{m['name']}-{m['ver']}-1-{m['tags']}.whl"
    out_dir.mkdir(parents=True, exist_ok=True)
    record_lines = []
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        record_name = next(n for n in zin.namelist() if n.endswith(".dist-info/RECORD"))
        for info in zin.infolist():
            if info.filename == record_name or not keep(info.filename, keep_dirs):
                continue
            data = zin.read(info.filename)
            if info.filename.endswith(".dist-info/WHEEL"):
                text = data.decode()
                data = (text.rstrip("\n") + "\nBuild: 1\n").encode() if "\nBuild:" not in text else data
            zout.writestr(info, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record_lines.append(f"{info.filename},sha256={digest},{len(data)}")
        record_lines.append(f"{record_name},,")
        zout.writestr(record_name, "\n".join(record_lines) + "\n")
    return dst


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("wheel", type=Path)
    ap.add_argument("-o", "--out", type=Path, required=True, help="folder for the slim wheel")
    ap.add_argument("--keep", nargs="*", default=list(KEEP), help=f"task folders to keep (default {' '.join(KEEP)})")
    args = ap.parse_args(argv)
    dst = slim(args.wheel, args.out, tuple(args.keep))
    print(f"{dst} ({dst.stat().st_size / 2**20:.1f} MiB, from {args.wheel.stat().st_size / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
