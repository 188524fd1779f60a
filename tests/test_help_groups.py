"""``--help`` of a program with more than 20 flags lists them in groups (connection, search,
storage, logging...): every such page (each program and subcommand of pyproject's scripts,
counted here) shows its groups, and every flag appears in exactly one of them."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

import pytest

from kgrpc.cli_help import ProgramParser
from kgrpc.settings import DEFAULT_GROUP, Settings, setting
from tests.test_cli_help import PROGRAMS

# A page with more flags than this is grouped.
MOST_UNGROUPED = 20
# The groups each big page shows (at least these), by "program subcommand".
EXPECTED = {
    "kgrpc-worker": {"connection", "inference", "games and search", "storage", "logging"},
    "kgrpc-coordinator serve": {
        "connection",
        "storage",
        "access",
        "validation",
        "self-play",
        "gating",
        "dashboard and metrics",
        "logging",
    },
    "kgrpc-inference": {"serving", "models", "engine and batching", "logging"},
    "kgrpc-train run": {"data and coordinator", "store mode", "optimiser and loss", "logging"},
    "kgrpc-cluster": {"run", "processes", "network and training", "gating and evaluation", "view"},
    "kgrpc-eval ladder": {"models rated", "references and search", "games"},
}
# What stays under argparse's own heading: help, version, the settings file.
UNGROUPED = {"-h", "--version", "--config"}
HEADING = re.compile(r"^(\S.*):$")
FLAG_LINE = re.compile(r"^  (-[^\s,]+)")


def pages() -> dict[str, argparse.ArgumentParser]:
    """Every program's parser and its subcommands', by "program subcommand"."""
    out: dict[str, argparse.ArgumentParser] = {}

    def walk(name: str, parser: argparse.ArgumentParser) -> None:
        out[name] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub in action.choices.items():
                    if sub not in out.values():  # aliases once
                        walk(f"{name} {sub_name}", sub)

    for program, build in PROGRAMS.items():
        walk(program, build())
    return out


def visible_flags(parser: argparse.ArgumentParser) -> list[str]:
    """The first option string of each flag --help shows (not a --no-X twin)."""
    return [
        a.option_strings[0]
        for a in parser._actions
        if a.option_strings and a.help != argparse.SUPPRESS
    ]


def sections(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """The flags under each heading of ``parser``'s --help text."""
    out: dict[str, list[str]] = {}
    heading = ""
    for line in parser.format_help().splitlines():
        if m := HEADING.match(line):
            heading = m.group(1)
            out.setdefault(heading, [])
        elif (m := FLAG_LINE.match(line)) and heading:
            out[heading].append(m.group(1))
    return out


PAGES = pages()
BIG = sorted(
    name for name, p in PAGES.items() if len(set(visible_flags(p)) - UNGROUPED) > MOST_UNGROUPED
)


def test_the_big_pages_are_the_expected_ones() -> None:
    # A page that grows past 20 flags: group its flags, then name it in EXPECTED.
    assert sorted(EXPECTED) == BIG


@pytest.mark.parametrize("name", BIG)
def test_every_flag_is_in_exactly_one_group(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # one line per flag
    parser = PAGES[name]
    shown = sections(parser)
    assert EXPECTED[name] <= set(shown), f"{name}: groups {sorted(shown)}"
    where: dict[str, list[str]] = {}
    for heading, flags in shown.items():
        for flag in flags:
            where.setdefault(flag, []).append(heading)
    for flag in visible_flags(parser):
        assert len(where.get(flag, [])) == 1, f"{name} {flag}: under {where.get(flag)}"
    left = set(shown.get("options", [])) - UNGROUPED
    assert not left, f"{name}: flags outside any group: {sorted(left)}"


@dataclass
class _Grouped:
    first: int = setting(1, "before any group")
    host: str = setting("", "where to connect", group="connection")
    port: int = setting(0, "the port (the group of the field before)")
    verbose: bool = setting(False, "more output", group="logging")
    retries: int = setting(3, "back in an earlier group", group="connection")


@dataclass
class _Plain:
    a: int = setting(1, "one")
    b: int = setting(2, "two")


def test_a_field_takes_the_group_of_the_field_before() -> None:
    s = Settings(_Grouped, "x")
    assert {n: o.group for n, o in s.options.items()} == {
        "first": DEFAULT_GROUP,
        "host": "connection",
        "port": "connection",
        "verbose": "logging",
        "retries": "connection",
    }
    assert s.groups == (DEFAULT_GROUP, "connection", "logging")
    p = ProgramParser(prog="kgrpc-x", env_program="x", environ={})
    groups = s.add_arguments(p)
    assert set(groups) == set(s.groups)
    shown = sections(p)
    assert shown["connection"] == ["--host", "--port", "--retries"]
    assert shown["logging"] == ["--verbose"]
    assert shown[DEFAULT_GROUP] == ["--first"]
    args = p.parse_args(["--port", "7", "--no-verbose"])  # grouped flags still parse
    assert s.from_args(args, env={}) == _Grouped(port=7, verbose=False)


def test_settings_without_groups_keep_one_list() -> None:
    p = ProgramParser(prog="kgrpc-y", env_program="y", environ={})
    groups = Settings(_Plain, "y").add_arguments(p)
    assert groups == {DEFAULT_GROUP: p}
    assert sections(p)["options"] == ["-h", "--version", "--config", "--a", "--b"]
