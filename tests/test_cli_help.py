"""``--help`` that answers: every flag of every program (pyproject's [project.scripts], every
subcommand) shows its default and the environment variable it reads, and the variable is read
(kgrpc.cli_help and kgrpc.settings; docs/operations.md, "Settings")."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import re
import sys
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kgrpc.cli_help import ProgramParser, env_flag

ROOT = Path(__file__).resolve().parents[1]
# Program -> the <PROGRAM> of its variables.
PREFIXES = {
    "kgrpc-coordinator": "KGRPC_COORDINATOR_",
    "kgrpc-worker": "KGRPC_WORKER_",
    "kgrpc-inference": "KGRPC_INFERENCE_",
    "kgrpc-train": "KGRPC_TRAINER_",
    "kgrpc-bench": "KGRPC_BENCH_",
    "kgrpc-gtp": "KGRPC_GTP_",
    "kgrpc-cluster": "KGRPC_CLUSTER_",
    "kgrpc-eval": "KGRPC_EVAL_",
}
# The end of every flag's help: its default, then its variable(s), or why it has none.
TAIL = re.compile(
    r"\(default: (?P<default>[^()]*(\([^()]*\))?[^()]*)\) "
    r"\[env: (?P<env>KGRPC_[A-Z0-9_]+(; fallback KGRPC_[A-Z0-9_]+)*|none, (?P<why>.+))\]$"
)
# Flags without a variable outside a mutually exclusive group: (parser's prog, flag) and why.
NO_ENV_OUTSIDE_GROUPS = {
    ("kgrpc-coordinator workers remove", "--token-id"): "it names workers to delete",
    # A variable left in the environment must not set a token's games aside (or back).
    ("kgrpc-coordinator token quarantine", "--id"): "it names the token to set aside",
    ("kgrpc-coordinator token quarantine", "--since"): "it names the period set aside",
    ("kgrpc-coordinator token unquarantine", "--id"): "it names the token to count again",
}


def programs() -> dict[str, Callable[[], argparse.ArgumentParser]]:
    """Every program of pyproject.toml and its ``build_parser`` (beside its ``main``)."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    out = {}
    for name, target in scripts.items():
        module = importlib.import_module(target.split(":")[0])
        build = getattr(module, "build_parser", None)
        assert callable(build), f"{name}: {target.split(':')[0]} has no build_parser()"
        out[name] = build
    out["kgrpc-cluster"] = _cluster_parser
    return out


def _cluster_parser() -> argparse.ArgumentParser:
    """kgrpc-cluster's parser, answering with the resolved settings: its namespace holds only
    the flags and variables given (they override a --profile), the config holds them all."""
    from kgrpc.programs.cluster import options

    parser = options.build_parser()
    parse = parser.parse_args

    def parse_args(argv: list[str] | None = None) -> Any:
        return options.resolve(vars(parse(argv)))

    parser.parse_args = parse_args  # type: ignore[method-assign, assignment]
    return parser


PROGRAMS = programs()


def walk(parser: argparse.ArgumentParser) -> Iterator[tuple[argparse.ArgumentParser, Any]]:
    """(parser, action) for every action of ``parser`` and of all its subcommands."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases once
                yield from walk(sub)
        else:
            yield parser, action


def flags(parser: argparse.ArgumentParser) -> Iterator[tuple[argparse.ArgumentParser, Any]]:
    for p, a in walk(parser):
        # (a suppressed help: the --no-FLAG twin of a boolean flag)
        if (
            a.option_strings
            and not isinstance(a, argparse._HelpAction | argparse._VersionAction)
            and a.help != "==SUPPRESS=="
        ):
            yield p, a


def test_every_program_is_walked() -> None:
    assert set(PROGRAMS) == set(PREFIXES), "a new program: add its variable prefix here"
    for name, build in PROGRAMS.items():
        assert sum(1 for _ in flags(build())) >= 1, name


def problems(parser: argparse.ArgumentParser, prefix: str) -> tuple[list[str], int]:
    """(what is wrong with the flags' help of ``parser`` and its subcommands, flags checked)."""
    bad = []
    checked = 0
    for p, action in flags(parser):
        name = f"{p.prog} {action.option_strings[-1]}"
        text = re.sub(r"\s+", " ", p._get_formatter()._expand_help(action)).strip()
        m = TAIL.search(text)
        if not m:
            bad.append(f"{name}: help {text!r} does not end '(default: X) [env: VAR]'")
            continue
        checked += 1
        if m.group("why"):
            grouped = any(action in g._group_actions for g in p._mutually_exclusive_groups)
            key = (p.prog, action.option_strings[-1])
            if not grouped and key not in NO_ENV_OUTSIDE_GROUPS:
                bad.append(f"{name}: reads no variable ({m.group('why')})")
        elif not m.group("env").startswith(prefix):
            bad.append(f"{name}: variable {m.group('env')} is not {prefix}<FLAG>")
    # Every subcommand's page shows them (a stray % in a help text breaks argparse).
    pages = {p: 0 for p, _ in walk(parser)}
    for p, _ in flags(parser):
        pages[p] += 1
    for p, count in pages.items():
        shown = re.sub(r"\s+", " ", p.format_help()).count("[env: ")
        if shown != count:
            bad.append(f"{p.prog} --help shows {shown} variables for {count} flags")
    return bad, checked


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_every_flag_shows_its_default_and_variable(
    program: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k in [k for k in os.environ if k.startswith("KGRPC_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("COLUMNS", "400")
    bad, checked = problems(PROGRAMS[program](), PREFIXES[program])
    assert not bad, "\n".join(bad)
    assert checked > 0
    print(f"{program}: {checked} flags", file=sys.stderr)


def test_the_help_check_catches_a_plain_flag() -> None:
    p = ProgramParser(prog="kgrpc-x", env_program="x", environ={})
    env_flag(p, "--good", default=1, type=int, help="fine")
    sub = p.add_subparsers().add_parser("deep")
    sub.add_argument("--plain", default=3, help="a flag added without env_flag")
    sub.add_argument("--shown", default=3, help="says its default (default: 3)")
    other = ProgramParser(prog="kgrpc-y", env_program="y", environ={})
    env_flag(sub, "--borrowed", help="under another program's prefix", env="KGRPC_Y_B")
    g = sub.add_mutually_exclusive_group()
    env_flag(sub, "--one", group=g, no_env="one of two", help="in a group")
    env_flag(sub, "--loose", no_env="no reason to", help="outside any group")
    bad, checked = problems(p, "KGRPC_X_")
    assert checked == 4, bad
    assert [b.split(":")[0] for b in bad] == [
        "kgrpc-x deep --plain",
        "kgrpc-x deep --shown",
        "kgrpc-x deep --borrowed",
        "kgrpc-x deep --loose",
        "kgrpc-x deep --help shows 3 variables for 5 flags",
    ], bad
    assert other.env_prefix == "KGRPC_Y_"


# A flag of each program (and of each group of subcommands): the argv around it, the flag,
# its attribute, the variable's text, the value that gives, and a flag's text that must win
# over the variable (a boolean: its --no- twin or itself). Settings (the daemons' --config
# and settings) are read from the environment by kgrpc.settings: tests/test_settings.py.
Sample = tuple[list[str], str, str, str, Any, list[str]]
SAMPLES: dict[str, list[Sample]] = {
    "kgrpc-gtp": [([], "--visits", "visits", "37", 37, ["--visits", "5"])],
    "kgrpc-eval": [
        (
            ["match", "--a", "x", "--b", "y", "--games", "2"],
            "--move-timeout",
            "move_timeout",
            "9.5",
            9.5,
            ["--move-timeout", "3"],
        ),
        (
            ["ladder", "--models", "m", "--games", "2"],
            "--opponent",
            "opponent",
            "a=x,b=y",
            ["a=x", "b=y"],
            ["--opponent", "c=z"],
        ),
    ],
    "kgrpc-cluster": [
        ([], "--workers", "workers", "5", 5, ["--workers", "1"]),
        ([], "--keep", "fresh", "yes", False, ["--no-keep"]),
    ],
    "kgrpc-bench": [
        (["rules"], "--seconds", "seconds", "0.5", 0.5, ["--seconds", "2"]),
        (["ingest"], "--uploaders", "uploaders", "7", 7, ["--uploaders", "2"]),
        (["all"], "--only", "only", "rules,mcts", ["rules", "mcts"], ["--only", "train"]),
    ],
    "kgrpc-coordinator": [
        (["serve"], "--log-level", "log_level", "DEBUG", "DEBUG", ["--log-level", "ERROR"]),
        (["stats", "--coordinator", "h:1"], "--workers", "workers", "12", 12, ["--workers", "3"]),
        (
            ["games", "list", "--coordinator", "h:1"],
            "--kind",
            "kind",
            "gating",
            "gating",
            ["--kind", "selfplay"],
        ),
        (
            ["token", "create", "--role", "worker"],
            "--data-dir",
            "data_dir",
            "/d",
            "/d",
            ["--data-dir", "/e"],
        ),
        (["workers", "list", "--data-dir", "d"], "--json", "json", "true", True, ["--no-json"]),
    ],
    "kgrpc-train": [
        (["run"], "--once", "once", "1", True, ["--no-once"]),
        (
            ["init", "--out", "o.onnx"],
            "--board-size",
            "board_size",
            "9,13",
            [9, 13],
            ["--board-size", "19"],
        ),
        (
            ["export", "--checkpoint", "c", "--out", "o"],
            "--max-kl",
            "max_kl",
            "0.5",
            0.5,
            ["--max-kl", "0.25"],
        ),
        (
            ["publish", "m.onnx", "--coordinator", "h:1"],
            "--timeout",
            "timeout",
            "4",
            4.0,
            ["--timeout", "8"],
        ),
    ],
    "kgrpc-worker": [([], "--verbose", "verbose", "on", True, ["--no-verbose"])],
    "kgrpc-inference": [([], "--verbose", "verbose", "true", True, ["--no-verbose"])],
}


def _var(program: str, flag: str) -> str:
    return PREFIXES[program] + flag.lstrip("-").replace("-", "_").upper()


def test_every_program_has_a_sample() -> None:
    assert set(SAMPLES) == set(PROGRAMS)


@pytest.mark.parametrize(
    "program,argv,flag,dest,text,want,given",
    [(prog, *s) for prog, samples in sorted(SAMPLES.items()) for s in samples],
)
def test_the_variable_is_read_and_a_flag_wins(
    program: str,
    argv: list[str],
    flag: str,
    dest: str,
    text: str,
    want: Any,
    given: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for k in [k for k in os.environ if k.startswith("KGRPC_")]:
        monkeypatch.delenv(k)
    build = PROGRAMS[program]
    try:
        assert getattr(build().parse_args(argv), dest) != want  # the default is not it
    except SystemExit:  # a required flag: nothing without the variable
        assert any(a.required for _, a in flags(build()) if flag in a.option_strings)
    monkeypatch.setenv(_var(program, flag), text)
    assert getattr(build().parse_args(argv), dest) == want  # variable > default
    got = getattr(build().parse_args(argv + given), dest)
    assert got != want and got is not None, (given, got)  # flag > variable
    if isinstance(want, list):
        assert len(got) == 1, got  # a repeatable flag replaces the variable's list


def test_a_bad_variable_is_a_usage_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KGRPC_GTP_VISITS", "many")
    with pytest.raises(SystemExit) as exit_:
        PROGRAMS["kgrpc-gtp"]().parse_args([])
    assert exit_.value.code == 2
    assert "KGRPC_GTP_VISITS='many': not a valid int value" in capsys.readouterr().err
    monkeypatch.setenv("KGRPC_CLUSTER_VIEW", "sideways")
    with pytest.raises(SystemExit):
        PROGRAMS["kgrpc-cluster"]().parse_args([])
    assert "KGRPC_CLUSTER_VIEW='sideways': 'sideways' is not one of" in capsys.readouterr().err
    monkeypatch.setenv("KGRPC_CLUSTER_TLS", "maybe")
    monkeypatch.delenv("KGRPC_CLUSTER_VIEW")
    with pytest.raises(SystemExit):
        PROGRAMS["kgrpc-cluster"]().parse_args([])
    assert "KGRPC_CLUSTER_TLS: expected true or false" in capsys.readouterr().err


def test_fallbacks_and_required_flags(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for k in [k for k in os.environ if k.startswith("KGRPC_")]:
        monkeypatch.delenv(k)
    coord = PROGRAMS["kgrpc-coordinator"]
    # The older KGRPC_TOKEN still works, below the program's own variable.
    monkeypatch.setenv("KGRPC_TOKEN", "old")
    assert coord().parse_args(["stats", "--coordinator", "h:1"]).token == "old"
    monkeypatch.setenv("KGRPC_COORDINATOR_TOKEN", "new")
    assert coord().parse_args(["stats", "--coordinator", "h:1"]).token == "new"
    monkeypatch.setenv("KGRPC_TRAINER_TOKEN", "trainer")
    assert PROGRAMS["kgrpc-eval"]().parse_args(["ladder", "--models", "m", "--games", "2"]).token
    # A required flag may come from its variable.
    with pytest.raises(SystemExit):
        coord().parse_args(["stats"])
    monkeypatch.setenv("KGRPC_COORDINATOR_ADDRESS", "h:2")
    assert coord().parse_args(["stats"]).coordinator == "h:2"
    # A token as a flag warns that ps shows it; from the variable it does not.
    capsys.readouterr()
    coord().parse_args(["stats", "--token", "t"])
    assert "--token on the command line is visible" in capsys.readouterr().err
    coord().parse_args(["stats"])
    assert capsys.readouterr().err == ""
    # An empty variable is an empty value (the dashboard off), or clears a number's none.
    monkeypatch.setenv("KGRPC_CLUSTER_HTTP_LISTEN", "")
    assert PROGRAMS["kgrpc-cluster"]().parse_args([]).http_listen == ""
    monkeypatch.setenv("KGRPC_GTP_SEED", "")
    assert PROGRAMS["kgrpc-gtp"]().parse_args([]).seed is None


def test_env_flag_needs_a_program_parser() -> None:
    with pytest.raises(TypeError):
        env_flag(argparse.ArgumentParser(), "--x", help="x")
    p = ProgramParser(prog="kgrpc-x", env_program="x", environ={"KGRPC_X_N": "3"})
    env_flag(p, "--n", type=int, default=1, help="n")
    assert p.parse_args([]).n == 3 and p.parse_args(["--n", "4"]).n == 4


async def test_the_token_variable_reaches_a_live_coordinator(coordinator) -> None:
    """``kgrpc-coordinator stats`` with only KGRPC_COORDINATOR_TOKEN set, as a process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KGRPC_")}
    env["KGRPC_COORDINATOR_TOKEN"] = coordinator.worker_token
    env["KGRPC_COORDINATOR_ADDRESS"] = coordinator.address
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kgrpc.coordinator",
        "stats",
        "--json",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    assert '"games_accepted": 0' in out.decode()
    env.pop("KGRPC_COORDINATOR_TOKEN")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kgrpc.coordinator",
        "stats",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 1 and b"UNAUTHENTICATED" in err
