"""``--help`` that says what the code does (issue 28): a boolean flag's default is the state
the program is in without it, a default is one value, no variable repeats its program's name,
and the worker's three "batch" flags each say which batch they are."""

from __future__ import annotations

import argparse
import re

import pytest

from kgrpc.net.limits import STATS_PAGE
from tests.test_cli_help import PREFIXES, PROGRAMS, flags

TAIL = re.compile(r"\(default: (?P<default>.*)\) \[env: (?P<env>[^\]]*)\]$")


def _shown(parser: argparse.ArgumentParser, action: argparse.Action) -> tuple[str, str]:
    text = re.sub(r"\s+", " ", parser._get_formatter()._expand_help(action)).strip()
    m = TAIL.search(text)
    assert m, text
    return m.group("default"), m.group("env")


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_defaults_are_one_value_and_variables_do_not_stutter(program: str) -> None:
    prefix = PREFIXES[program]
    stutter = prefix + prefix.removeprefix("KGRPC_")  # KGRPC_COORDINATOR_COORDINATOR_
    bad = []
    for parser, action in flags(PROGRAMS[program]()):
        default, env = _shown(parser, action)
        name = f"{parser.prog} {action.option_strings[-1]}"
        if re.fullmatch(r"\d+: \d+", default):  # (0 standing for another number: say it)
            bad.append(f"{name}: default {default!r} is two numbers")
        if (env + "_").startswith(stutter):
            bad.append(f"{name}: variable {env} repeats the program's name")
        boolean = isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction)
        if boolean and action.default is not argparse.SUPPRESS:
            off = action.default == (not action.const)
            if default != ("false" if off else "true"):
                bad.append(f"{name}: shows {default} but is {'off' if off else 'on'}")
    assert not bad, "\n".join(bad)


def test_cluster_booleans_show_the_state_without_the_flag() -> None:
    """kgrpc-cluster's flags only override its profile, so their parser defaults are absent:
    what counts is the config without the flag against the config with it."""
    from kgrpc.programs.cluster import options

    parser = options.build_parser()
    plain = options.resolve(vars(parser.parse_args([])))
    for p, action in flags(parser):
        if not isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
            continue
        flag = action.option_strings[-1]
        given = options.resolve(vars(parser.parse_args([flag])))
        changes = getattr(given, action.dest) != getattr(plain, action.dest)
        assert _shown(p, action)[0] == ("false" if changes else "true"), flag
    assert plain.fresh and not options.resolve(vars(parser.parse_args(["--keep"]))).fresh


def test_stats_pages_default_to_the_page_the_coordinator_sends() -> None:
    args = PROGRAMS["kgrpc-coordinator"]().parse_args(["stats", "--coordinator", "h:1"])
    assert args.workers == args.models == args.matches == STATS_PAGE


def test_the_worker_batch_flags_say_which_batch_they_are() -> None:
    parser = PROGRAMS["kgrpc-worker"]()
    helps = {a.option_strings[-1]: a.help or "" for _, a in flags(parser)}
    batch_flags = ("--max-batch", "--leaves-per-batch", "--games-per-batch")
    for flag, kind in zip(batch_flags, ("net batch", "search batch", "upload batch"), strict=True):
        assert helps[flag].startswith(kind), (flag, helps[flag])
        for other in batch_flags:
            assert other == flag or other in helps[flag], (flag, other)
