"""Every example in docs/clients.md, checked against the clients and a live coordinator.

docs/clients.md is what a client author in another language works from, so each of its code
blocks is checked one of two ways, and a block that neither way covers fails
:func:`test_every_example_block_is_checked`:

* ``js`` and ``cpp`` blocks are excerpts of the example clients (``clients-src/node/client.js``,
  ``clients-src/cpp/client.cc``, which tests/test_clients_other_langs.py builds and runs
  against a real coordinator): a line ``// ...`` separates excerpts, and each excerpt must
  appear in the client as consecutive lines (indentation aside). A snippet
  edited in the docs but not in the client, or the other way round, fails.
* ``sh`` blocks are run as they stand, with bash, in a scratch directory that sees the
  checkout's ``.venv``, ``scripts`` and ``clients``: the install-and-build block (``sudo`` as a
  no-op: run as root it installs, otherwise the script says what it cannot), and the run
  block against a real coordinator on 127.0.0.1, its placeholders (``<worker token>``,
  ``127.0.0.1:50051``) replaced by the live coordinator's token and address.

The prose rules the issue found wrong (zstd frames, game ids, DownloadModel's first message,
the wording of rejections) are checked against a live coordinator here and in
tests/test_coordinator_models.py and tests/test_records_reasons.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import zstandard

from kgrpc.randgame import make_random_game
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc, records_pb2
from tests.test_clients_other_langs import (  # noqa: F401 - fixtures used by name
    cpp_client,
    node_client,
)

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "clients.md"
# Language of a snippet -> the example client it is an excerpt of.
SOURCES = {
    "js": ROOT / "clients-src" / "node" / "client.js",
    "cpp": ROOT / "clients-src" / "cpp" / "client.cc",
}
ELISION = {"// ...", "..."}
# The shell blocks, by a line each must contain, and what a run substitutes.
INSTALL_MARK = "bash scripts/install-client-deps.sh"
RUN_MARK = "clients/node/client.js"
TOKEN_PLACEHOLDER = "<worker token>"
ADDRESS_PLACEHOLDER = "127.0.0.1:50051"
SH_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Block:
    lang: str
    text: str
    line: int  # 1-based line of the opening fence in docs/clients.md

    @property
    def label(self) -> str:
        first = next((ln for ln in self.text.splitlines() if ln.strip()), "")
        return f"docs/clients.md:{self.line} ```{self.lang} {first.strip()[:60]!r}"


def doc_blocks(text: str) -> list[Block]:
    """The fenced code blocks of a Markdown text (an unclosed fence is an error)."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(```+|~~~+)\s*([\w+-]*)", lines[i])
        if not m:
            i += 1
            continue
        fence, lang, start = m.group(1), m.group(2), i
        i += 1
        body: list[str] = []
        while i < len(lines) and not lines[i].startswith(fence):
            body.append(lines[i])
            i += 1
        assert i < len(lines), f"docs/clients.md:{start + 1}: unclosed code block"
        blocks.append(Block(lang, "\n".join(body), start + 1))
        i += 1
    return blocks


def excerpts(snippet: str) -> list[list[str]]:
    """The snippet's runs of lines between ``// ...`` markers, stripped, blank lines left out."""
    parts: list[list[str]] = [[]]
    for line in snippet.splitlines():
        s = line.strip()
        if s in ELISION:
            parts.append([])
        elif s:
            parts[-1].append(s)
    return [p for p in parts if p]


def find_excerpts(snippet: str, source: str) -> str | None:
    """None when every excerpt of ``snippet`` appears in ``source`` as consecutive lines
    (stripped; the excerpts in any order); otherwise the first line that is not there."""
    lines = [ln.strip() for ln in source.splitlines() if ln.strip()]
    for part in excerpts(snippet):
        n = len(part)
        if any(lines[i : i + n] == part for i in range(len(lines) - n + 1)):
            continue
        # The longest start of the excerpt that is there: the line after it is the culprit.
        k = max(
            (j for j in range(n) if any(lines[i : i + j] == part[:j] for i in range(len(lines)))),
            default=0,
        )
        return f"line {part[k]!r} (of the excerpt starting {part[0]!r})"
    return None


def blocks() -> list[Block]:
    return doc_blocks(DOC.read_text())


def _is_install(b: Block) -> bool:
    return b.lang == "sh" and INSTALL_MARK in b.text


def _is_run(b: Block) -> bool:
    return b.lang == "sh" and RUN_MARK in b.text


def how_checked(b: Block) -> str | None:
    if b.lang in SOURCES:
        return f"excerpt of {SOURCES[b.lang].relative_to(ROOT)}"
    if _is_install(b):
        return "run: install, generate, build"
    if _is_run(b):
        return "run against a live coordinator"
    return None


# --- every block is covered --------------------------------------------------------------


def test_every_example_block_is_checked() -> None:
    found = blocks()
    assert found, "no code blocks in docs/clients.md"
    report = [f"{b.label}: {how_checked(b) or 'NOT CHECKED'}" for b in found]
    print("\n".join(report), file=sys.stderr)
    unchecked = [b.label for b in found if how_checked(b) is None]
    assert not unchecked, (
        "code blocks of docs/clients.md that no test checks (make them a `js`/`cpp` excerpt "
        f"of a client, or teach tests/test_clients_doc.py to run them): {unchecked}"
    )
    # One of each shell block: a second would not be run.
    assert sum(map(_is_install, found)) == 1 and sum(map(_is_run, found)) == 1, report
    assert {b.lang for b in found if b.lang in SOURCES} == set(SOURCES), report


# --- js/cpp: excerpts of the clients ------------------------------------------------------


@pytest.mark.parametrize("lang", sorted(SOURCES))
def test_snippets_are_excerpts_of_the_clients(lang: str) -> None:
    source = SOURCES[lang].read_text()
    snippets = [b for b in blocks() if b.lang == lang]
    assert snippets, f"no {lang} snippet in docs/clients.md"
    for b in snippets:
        missing = find_excerpts(b.text, source)
        assert missing is None, (
            f"{b.label}: {missing} is not in {SOURCES[lang].relative_to(ROOT)}; a snippet must "
            "be the client's code line for line (`// ...` between excerpts): change both"
        )


def test_excerpt_check_catches_an_edit_on_either_side() -> None:
    """The check is strict both ways: one changed character in the snippet or in the client."""
    client = SOURCES["js"].read_text()
    snippet = next(b.text for b in blocks() if b.lang == "js" and "fromObject" in b.text)
    assert find_excerpts(snippet, client) is None
    assert find_excerpts(snippet.replace("fromObject", "create"), client) is not None
    assert find_excerpts(snippet, client.replace("GameBatch.fromObject", "GameBatch.create"))
    # An excerpt's lines must stay together: no line left out without a `// ...`.
    parts = excerpts(snippet)
    assert len(parts) >= 2
    torn = "\n".join(parts[0][:1] + parts[1])
    assert find_excerpts(torn, client) is not None
    assert find_excerpts("\n".join(parts[0][:1] + ["// ..."] + parts[1]), client) is None


def test_the_node_client_builds_messages_with_from_object() -> None:
    # protobufjs's create() encodes an enum given by name as 0 (the empty `rules`).
    source = SOURCES["js"].read_text()
    assert ".fromObject(" in source
    assert not re.search(r"\b[A-Z]\w*\.create\(", source), "use Type.fromObject, not create"


# --- sh: run as written ----------------------------------------------------------------------


def _scratch(tmp_path: Path) -> Path:
    """A directory that sees the checkout's .venv, scripts, clients(-src), protos, Makefile."""
    work = tmp_path / "doc-run"
    work.mkdir()
    for name in (".venv", "scripts", "clients", "clients-src", "protos", "Makefile"):
        if (ROOT / name).exists():
            (work / name).symlink_to(ROOT / name)
    return work


async def _bash(script: str, cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    # `sudo CMD` runs CMD: as root it installs, otherwise the script says what it cannot.
    prologue = 'set -euo pipefail\nsudo() { "$@"; }\n'
    proc = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        prologue + script,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), SH_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"the block did not finish within {SH_TIMEOUT_S:.0f}s") from None
    return proc.returncode or 0, out.decode(), err.decode()


@pytest.mark.slow
async def test_install_block_runs(node_client, cpp_client, tmp_path: Path) -> None:  # noqa: F811
    (block,) = [b for b in blocks() if _is_install(b)]
    work = _scratch(tmp_path)
    # The scripts resolve the checkout from their own path, so they work on it.
    code, out, err = await _bash(block.text, work, dict(os.environ))
    assert code == 0, f"{block.label} failed (exit {code}):\n{out[-3000:]}\n{err[-3000:]}"
    assert (ROOT / "clients" / "node" / "protos" / "kgrpc" / "v1" / "coordinator.proto").is_file()
    assert os.access(ROOT / "clients" / "cpp" / "build" / "kgrpc-client", os.X_OK)


@pytest.fixture
async def released(coordinator):  # type: ignore[no-untyped-def]
    """The coordinator with a tiny model released: GetTask hands out self-play tasks."""
    from tests.dashboard_helpers import FIRST, publish

    await publish(coordinator, FIRST)
    return coordinator


@pytest.mark.slow
async def test_run_block_against_a_live_coordinator(
    node_client,  # noqa: F811
    cpp_client,  # noqa: F811
    released,
    tmp_path: Path,
) -> None:
    coordinator = released
    (block,) = [b for b in blocks() if _is_run(b)]
    for placeholder in (TOKEN_PLACEHOLDER, ADDRESS_PLACEHOLDER):
        assert placeholder in block.text, f"{block.label}: no {placeholder!r} to fill in"
    script = block.text.replace(TOKEN_PLACEHOLDER, coordinator.worker_token).replace(
        ADDRESS_PLACEHOLDER, coordinator.address
    )
    work = _scratch(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KGRPC_")}
    code, out, err = await _bash(script, work, env)
    assert code == 0, f"{block.label} failed (exit {code}):\n{out[-3000:]}\n{err[-3000:]}"

    summaries = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    assert [s["client"] for s in summaries] == ["node", "cpp"], out
    game = records_pb2.GameRecord.FromString((work / "game.bin").read_bytes())
    # The first client stores the game; the second sends the same game_id: a duplicate.
    assert summaries[0]["ack_status"] == "GAME_STATUS_ACCEPTED", summaries[0]
    assert summaries[1]["ack_status"] == "GAME_STATUS_DUPLICATE", summaries[1]
    assert {s["game_id"] for s in summaries} == {game.game_id}
    async with coordinator.channel() as ch:
        stats = await coordinator_pb2_grpc.CoordinatorStub(ch).GetStats(
            coordinator_pb2.GetStatsRequest(), timeout=30
        )
    assert (stats.games_accepted, stats.games_duplicate, stats.games_rejected) == (1, 1, 0)


# --- the rules in the prose, on a live coordinator --------------------------------------------


async def _upload(coordinator, payload: bytes, count: int) -> coordinator_pb2.UploadGamesResponse:
    async with coordinator.channel() as ch:
        return await coordinator_pb2_grpc.CoordinatorStub(ch).UploadGames(
            iter([coordinator_pb2.UploadGamesRequest(games_zstd=payload, game_count=count)]),
            timeout=60,
        )


def _batch(*games: records_pb2.GameRecord) -> bytes:
    return records_pb2.GameBatch(games=list(games)).SerializeToString()


async def test_zstd_without_content_size_and_several_frames_are_accepted(coordinator) -> None:
    # Section 4: a streaming compressor's frame (no content size) and concatenated frames.
    a, b, c = (make_random_game(9, seed=s) for s in (31, 32, 33))
    await coordinator.store_tasks_for([a, b, c])  # games name an issued task (section 3)
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(_batch(a))
    assert zstandard.get_frame_parameters(no_size).content_size == zstandard.CONTENTSIZE_UNKNOWN
    resp = await _upload(coordinator, no_size, 1)
    assert [x.status for x in resp.acks] == [coordinator_pb2.GAME_STATUS_ACCEPTED], resp
    cz = zstandard.ZstdCompressor()
    two_frames = cz.compress(_batch(b)) + cz.compress(_batch(c))
    resp = await _upload(coordinator, two_frames, 2)
    assert [x.status for x in resp.acks] == [coordinator_pb2.GAME_STATUS_ACCEPTED] * 2, resp


async def test_game_id_any_short_string_and_duplicates_by_id_alone(coordinator) -> None:
    # Section 3 and records.proto: 1..36 characters, not necessarily a UUID; a stored id makes
    # any later game with it a DUPLICATE, whatever its moves.
    first = make_random_game(9, seed=41)
    first.game_id = "my-game-1"
    other = make_random_game(9, seed=42)
    other.game_id = "my-game-1"
    assert list(other.moves) != list(first.moves)
    too_long = make_random_game(9, seed=43)
    await coordinator.store_tasks_for([first, other, too_long])
    cz = zstandard.ZstdCompressor()
    resp = await _upload(coordinator, cz.compress(_batch(first)), 1)
    assert resp.acks[0].status == coordinator_pb2.GAME_STATUS_ACCEPTED, resp
    resp = await _upload(coordinator, cz.compress(_batch(other)), 1)
    assert resp.acks[0].status == coordinator_pb2.GAME_STATUS_DUPLICATE, resp
    too_long.game_id = "x" * 37
    resp = await _upload(coordinator, cz.compress(_batch(too_long)), 1)
    assert resp.acks[0].status == coordinator_pb2.GAME_STATUS_REJECTED
    assert resp.acks[0].reason == "bad_game_id", resp


async def test_rejection_detail_counts_moves_from_one(coordinator) -> None:
    # Section 5: "move 1" is moves[0] (colours by name: tests/test_records_reasons.py).
    game = make_random_game(9, seed=51)
    await coordinator.store_tasks_for([game])
    game.moves[0] = 81 + 5  # off the board
    resp = await _upload(coordinator, zstandard.ZstdCompressor().compress(_batch(game)), 1)
    ack = resp.acks[0]
    assert (ack.status, ack.reason) == (coordinator_pb2.GAME_STATUS_REJECTED, "illegal_move")
    assert ack.detail.startswith("move 1: "), ack.detail
