"""The command line as a user meets it: help on every option, defaults shown, one spelling of the
output option, --version, and top-level examples that match what the commands write."""
import argparse
import fnmatch
import shlex

import pytest

from precision_lab import __version__
from precision_lab.cli import EPILOG, build_parser, main
from precision_lab.commands import HelpFormatter


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {"": parser, **sub.choices}


def _options(p: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in p._actions if not isinstance(a, argparse._SubParsersAction)]


def test_every_option_of_every_command_has_help_and_no_raw_markup():
    commands = _commands()
    assert set(commands) == {"", "formats", "sim", "kl", "lm-eval", "report", "models", "study"}
    for name, p in commands.items():
        for a in _options(p):
            assert a.help and a.help != argparse.SUPPRESS and a.help.strip(), f"{name or 'top level'}: {a.dest}"
        text = p.format_help()
        assert "``" not in text, f"{name or 'top level'}: raw double backticks in --help"


@pytest.mark.parametrize("name", ["kl", "lm-eval", "sim"])
def test_help_shows_every_default_worth_showing(name):
    p = _commands()[name]
    fmt = HelpFormatter(p.prog)
    for a in _options(p):
        unset = a.default in (None, "", []) or a.default is False or isinstance(a, argparse._HelpAction)
        if not unset:
            assert "default" in fmt._get_help_string(a).lower(), f"{name} {a.option_strings}: default not shown"
    if name == "kl":
        assert "stochastic-rounding seed (default: 0)" in p.format_help()      # a default of 0 is shown too


def test_one_spelling_of_the_output_option():
    commands = _commands()
    for name in ("sim", "kl", "lm-eval", "report"):
        (out,) = [a for a in _options(commands[name]) if a.dest == "out"]
        assert out.option_strings == ["-o", "--out", "--output"], name
        text = commands[name].format_help()
        assert "-o " in text and "--out " in text and "--output" not in text, name   # the old spelling: hidden
    for name, p in commands.items():
        assert not [a for a in _options(p) if a.dest == "output"], name
    args = build_parser().parse_args(["report", "r.json", "--output", "d"])      # and still accepted
    assert args.out == "d"


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"precision-lab {__version__}"


def test_top_level_examples_parse_and_name_the_files_the_commands_write():
    from precision_lab.evals.kl import KLConfig

    from precision_lab.commands.kl_command import default_out

    parser = build_parser()
    lines = [ln.split("#")[0].strip() for ln in EPILOG.splitlines() if ln.strip().startswith("precision-lab ")]
    assert len(lines) >= 4
    for line in lines[:-1]:
        parser.parse_args(shlex.split(line)[1:])
    report = next(shlex.split(ln) for ln in lines if ln.startswith("precision-lab report"))
    # what `precision-lab sim --steps 4096` and `precision-lab kl` write by default
    assert "runs/sim/mamba2-4096.json" in report
    kl_out = default_out(KLConfig())
    assert any(fnmatch.fnmatch(kl_out + "/", pattern) for pattern in report if pattern.startswith("runs/kl/"))
