"""The docs' settings and command lines, checked against the programs as they are now.

A renamed flag, a setting dropped, a variable whose name changed: the docs then tell a user
something the program refuses. So every TOML block in ``docs/`` is loaded with its program's
settings loader (unknown keys are errors there), every ``kgrpc-*`` command line in a fenced
block of ``docs/`` is parsed by its program's own parser, every ``kgrpc-*`` command in
backquotes in the text names only flags its (sub)command has, and every ``KGRPC_*`` variable
that docs/operations.md and docs/worker.md name is one a program reads.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kgrpc.settings import PROGRAM_TABLES, Settings
from kgrpc.worker import cli as worker_cli
from tests.test_cli_help import PROGRAMS, flags

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
# The docs whose every variable must exist (the operator's and the volunteer's pages).
VARIABLE_DOCS = ("operations.md", "worker.md")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
DIAGRAM = re.compile("[\u2500-\u257f\u25b6]")  # box drawing: a figure, not commands
ASSIGNMENTS = re.compile(r"^((?:[A-Z][A-Z0-9_]*=\S*\s+)*)(kgrpc-[a-z]+)(\s.*)?$")
# Variables that are no program flag's: the engine switch and each program's config file.
OTHER_VARIABLES = {"KGRPC_NATIVE"} | {
    f"KGRPC_{p}_CONFIG" for p in ("COORDINATOR", "WORKER", "INFERENCE", "TRAINER")
}


def _settings(table: str) -> Settings[Any]:
    from inference.config import SETTINGS as INFERENCE
    from kgrpc.coordinator.config import SETTINGS as COORDINATOR
    from kgrpc.worker.config import SETTINGS as WORKER
    from trainer.config import SETTINGS as TRAINER

    return {"coordinator": COORDINATOR, "worker": WORKER, "inference": INFERENCE, "train": TRAINER}[
        table
    ]


# The program of a TOML block with no program table of its own, by the page it is on.
PAGE_TABLE = {
    "worker.md": "worker",
    "training.md": "train",
    "coordinator.md": "coordinator",
    "inference.md": "inference",
}


@dataclass(frozen=True)
class Command:
    doc: str
    line: str  # as written (continuations joined)
    env: dict[str, str]  # exported before it or assigned in front of it
    program: str
    argv: list[str]


def _fenced_commands() -> Iterator[Command]:
    for doc in DOCS:
        for lang, body in FENCE.findall(doc.read_text()):
            if lang not in ("", "sh", "bash", "console") or DIAGRAM.search(body):
                continue
            env: dict[str, str] = {}
            for raw in body.replace("\\\n", " ").splitlines():
                line = raw.split(" #", 1)[0].strip()
                if line.startswith("export "):
                    for word in shlex.split(line)[1:]:
                        name, _, value = word.partition("=")
                        env[name] = value
                    continue
                m = ASSIGNMENTS.match(line)
                if not m:
                    continue
                assigned = dict(w.split("=", 1) for w in m.group(1).split())
                yield Command(
                    doc.name, line, {**env, **assigned}, m.group(2), _argv(m.group(3) or "")
                )


def _argv(text: str) -> list[str]:
    """A documented command's arguments as a user would type them: ``[--json]`` and
    ``[--config FILE]`` are the optional flags given, ``...`` (more of the same) dropped, a
    placeholder for a number (``N``) a number."""
    text = re.sub(r"\[(--[^\[\]]*)\]", r"\1", text).replace("...", " ")
    return ["1" if w == "N" else w for w in shlex.split(text)]


def _parse(program: str, argv: list[str]) -> str:
    """'' when ``program`` parses ``argv``, else what it printed."""
    if program == "kgrpc-coordinator" and (not argv or argv[0].startswith("-")):
        argv = ["serve", *argv]  # as its main() does
    parser = PROGRAMS[program]()
    if program == "kgrpc-worker" and argv and argv[0] in worker_cli.CONTROLS:
        parser, argv = worker_cli.build_control_parser(argv[0]), argv[1:]  # as its main() does
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            parser.parse_args(argv)
        except SystemExit as exc:
            return err.getvalue().strip() or f"exit {exc.code}"
    return ""


FENCED = list(_fenced_commands())


def test_the_docs_have_command_lines_to_check() -> None:
    pages = {c.doc for c in FENCED}
    assert {"operations.md", "worker.md"} <= pages, pages


@pytest.mark.parametrize("cmd", FENCED, ids=[f"{c.doc}: {c.line[:60]}" for c in FENCED])
def test_every_fenced_command_line_parses(cmd: Command, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cmd.program in PROGRAMS, f"{cmd.doc}: {cmd.line}: no such program"
    for name in [n for n in os.environ if n.startswith("KGRPC_")]:
        monkeypatch.delenv(name)
    for name, value in cmd.env.items():
        monkeypatch.setenv(name, value)
    problem = _parse(cmd.program, cmd.argv)
    assert not problem, f"{cmd.doc}: `{cmd.line}`: {problem}"


# Flags that carry a secret: the docs give tokens in the environment, since every user of
# the machine sees a command line in `ps` (the programs warn when one is given as a flag).
SECRET_FLAGS = {"--token", "--auth-token", "--inference-token"}


def test_no_documented_command_passes_a_token_as_a_flag() -> None:
    bad = [f"{c.doc}: `{c.line}`" for c in FENCED if SECRET_FLAGS & set(c.argv)]
    bad += [
        f"{doc}: `{span}`"
        for doc, span, _, words in SPANS
        if doc in VARIABLE_DOCS and SECRET_FLAGS & set(words)
    ]
    assert not bad, "\n".join(bad)


def _subcommand(parser: argparse.ArgumentParser, words: list[str]) -> argparse.ArgumentParser:
    """The (sub)parser that the leading words of ``words`` choose."""
    for word in words:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            break
        parser = subs[0].choices[word]
    return parser


def _spans() -> Iterator[tuple[str, str, str, list[str]]]:
    """(page, span, program, words) of every ``kgrpc-*`` command in backquotes outside fences."""
    for doc in DOCS:
        text = FENCE.sub("", doc.read_text())
        for span in re.findall(r"`([^`\n]+)`", text):
            m = ASSIGNMENTS.match(span.strip())
            if m and m.group(2) in PROGRAMS:
                yield doc.name, span, m.group(2), (m.group(3) or "").split()


SPANS = list(_spans())


def test_every_flag_named_in_the_text_exists() -> None:
    bad = []
    parsers = {name: build() for name, build in PROGRAMS.items()}  # (read only here)
    for doc, span, program, words in SPANS:
        parser = parsers[program]
        if program == "kgrpc-coordinator" and (not words or words[0].startswith("-")):
            words = ["serve", *words]
        if program == "kgrpc-worker" and words and words[0] in worker_cli.CONTROLS:
            parser, words = worker_cli.build_control_parser(words[0]), words[1:]
        sub = _subcommand(parser, words)
        for word in words:
            flag = word.strip("[]|,;.()").split("=", 1)[0]
            if re.fullmatch(r"--?[a-z][a-z0-9-]*", flag) and flag not in sub._option_string_actions:
                bad.append(f"{doc}: `{span}`: {sub.prog} has no {flag}")
    assert len(SPANS) > 50
    assert not bad, "\n".join(bad)


def _toml_blocks() -> Iterator[tuple[str, str, str]]:
    for doc in DOCS:
        for lang, body in FENCE.findall(doc.read_text()):
            if lang == "toml":
                tables = [k for k, v in tomllib.loads(body).items() if isinstance(v, dict)]
                programs = [t for t in tables if t in PROGRAM_TABLES] or [PAGE_TABLE[doc.name]]
                for table in programs:
                    yield doc.name, table, body


TOML = list(_toml_blocks())


def test_the_docs_have_toml_blocks_to_check() -> None:
    assert {doc for doc, _, _ in TOML} >= {"worker.md", "training.md"}


@pytest.mark.parametrize("doc, table, body", TOML, ids=[f"{d}:{t}" for d, t, _ in TOML])
def test_every_toml_block_loads(doc: str, table: str, body: str, tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(body)
    settings = _settings(table)
    given = settings.read_toml(path)  # unknown keys and bad values are errors here
    assert given, f"{doc}: a [{table}] block that sets nothing"
    config = settings.load(toml_path=path)
    for name, value in given.items():
        assert getattr(config, name) == value, f"{doc}: {name}"


def _known_variables() -> set[str]:
    known = set(OTHER_VARIABLES)
    for build in PROGRAMS.values():
        for parser, action in flags(build()):
            text = parser._get_formatter()._expand_help(action)
            m = re.search(r"\[env: ([^\]]*)\]", re.sub(r"\s+", " ", text))
            if m:
                known.update(re.findall(r"KGRPC_[A-Z0-9_]+", m.group(1)))
    return known


def test_every_variable_named_for_operators_and_volunteers_exists() -> None:
    known = _known_variables()
    bad = []
    for name in VARIABLE_DOCS:
        text = (ROOT / "docs" / name).read_text()
        for var in sorted(set(re.findall(r"\bKGRPC_[A-Z0-9_]*[A-Z0-9]\b", text))):
            if var not in known:
                bad.append(f"{name}: {var} is read by no program")
    assert not bad, "\n".join(bad)
