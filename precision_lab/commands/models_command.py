"""``precision-lab models``: list the model presets and the supported architectures."""
from __future__ import annotations

from . import HelpFormatter


def add_parser(sub) -> None:
    p = sub.add_parser("models", help="list model presets and supported architectures",
                       description="List the model presets (usable wherever a model is accepted) and the "
                       "transformers SSM mixers the adapters support.", formatter_class=HelpFormatter,
                       epilog="examples:\n  precision-lab models\n  precision-lab models --json\n"
                       "  precision-lab kl --model tiny-nemotron-h")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_run)


def _run(args) -> int:
    import json

    from precision_lab.models.mixers import MIXERS
    from precision_lab.models.presets import list_presets

    presets = list_presets()
    if args.json:
        print(json.dumps({"presets": presets, "mixers": sorted(MIXERS)}, indent=1))
        return 0
    w = max(len(p["name"]) for p in presets) + 2
    print("presets (usable wherever a model is accepted: --model, load_model, lm-eval pretrained=):")
    for p in presets:
        print(f"  {p['name'].ljust(w)}{p['kind']:8s} {p['dtype']:9s} {p['description']}")
    print("\nadapted transformers SSM mixers (hub ids / local checkpoints of these architectures work too):")
    for name, cls in sorted(MIXERS.items()):
        print(f"  {name:28s} -> {cls.__name__}")
    return 0
