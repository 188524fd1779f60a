"""``kgrpc-coordinator stats`` and ``games``, run as the real command against a coordinator fed
through the real RPCs."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from sgfmill import sgf as sgfmill_sgf

from kgrpc.coordinator.remote import format_stats, plain, printable
from kgrpc.v1 import common_pb2, coordinator_pb2
from tests.dashboard_helpers import FIRST, SECOND, populate
from tests.model_files import model_bytes


async def cli(coord, *args: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    """Run ``kgrpc-coordinator ARGS --coordinator ADDR --token T`` while this loop serves."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kgrpc.coordinator",
        *args,
        "--coordinator",
        coord.address,
        "--token",
        coord.worker_token,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode or 0, out.decode(), err.decode()


@pytest.mark.slow
async def test_stats_text_and_json(coordinator_factory, tmp_path: Path) -> None:
    coord = await coordinator_factory(gating_games=2, match_chunk_games=2)
    fed = await populate(coord)
    rc, text, err = await cli(coord, "stats")
    assert rc == 0, err
    assert "games/s" in text and "positions/s" in text
    assert "1 online" in text
    lines = text.splitlines()
    head = lines.index(next(x for x in lines if x.startswith("contributors")))
    # Credited to the token's label ("test worker"), not to the worker's --username.
    account = next(x for x in lines[head:] if x.strip().startswith("test worker"))
    assert account.split()[2:5] == ["6", f"{fed.positions:,}", "100.0%"]
    assert "alice" not in text  # display names are off by default
    match = next(x for x in lines if x.strip().startswith(SECOND) and FIRST in x)
    assert "2-0-0" in match and "released" in match and "inf]" in match

    rc, out, err = await cli(coord, "stats", "--json")
    assert rc == 0, err
    s = json.loads(out)
    assert s["games_accepted"] == 6 and isinstance(s["games_accepted"], int)
    assert s["positions_accepted"] == fed.positions
    assert isinstance(s["uptime_s"], int)
    assert s["workers_online"] == 1 and s["games_per_s"] > 0
    (c,) = s["contributors"]
    assert (c["username"], c["games"], c["positions"], c["share"]) == (
        "test worker",
        6,
        fed.positions,
        1.0,
    )
    assert isinstance(c["last_seen_unix_ms"], int) and c["last_seen_unix_ms"] > 0
    w = next(w for w in s["workers"] if w["worker_id"] == fed.worker_id)
    assert w["games_accepted"] == 6 and isinstance(w["last_heartbeat_unix_ms"], int)
    released = {m["name"]: m for m in s["models"]}
    assert released[SECOND]["status"] == "MODEL_STATUS_RELEASED"
    assert released[SECOND]["size_bytes"] == len(model_bytes(SECOND))
    (m,) = s["matches"]
    assert (m["wins"], m["elo_high"]) == (2, None)  # +inf is not JSON: null

    rc, out, err = await cli(coord, "games", "list", "--json", "--kind", "gating")
    assert rc == 0, err
    listed = json.loads(out)["games"]
    assert {g["game_id"] for g in listed} == {r.game_id for r in fed.gating}
    assert all(isinstance(g["seq"], int) and g["kind"] == "GAME_KIND_GATING" for g in listed)
    rc, out, err = await cli(coord, "games", "list", "--limit", "3")
    assert rc == 0 and len(out.splitlines()) == 4, (out, err)

    target = tmp_path / "g.sgf"
    rc, _, err = await cli(coord, "games", "get", fed.gating[0].game_id, "-o", str(target))
    assert rc == 0, err
    game = sgfmill_sgf.Sgf_game.from_bytes(target.read_bytes())
    assert len(game.get_main_sequence()) == len(fed.gating[0].moves) + 1
    rc, _, err = await cli(coord, "games", "get", "no-such-game")
    assert rc == 1 and "NOT_FOUND" in err


def test_text_stats_cannot_drive_the_terminal() -> None:
    s = coordinator_pb2.Stats(run="r", uptime_s=5, games_accepted=3)
    s.contributors.add(username="\x1b[2J\x1b[31mmallory\n", games=3, share=1.0)
    s.models.add(name="kg-b1c1-s0-d0", status=common_pb2.MODEL_STATUS_RELEASED)
    text = format_stats(s)
    assert "\x1b" not in text and "?[2J?[31mmallory?" in text
    assert printable("a\tb") == "a?b"


def test_json_keeps_int64_numbers() -> None:
    s = coordinator_pb2.Stats(games_received=2**40, uptime_s=3)
    s.rejects_by_reason["illegal_move"] = 7
    out = plain(s)
    assert out["games_received"] == 2**40 and out["rejects_by_reason"] == {"illegal_move": 7}
    assert json.loads(json.dumps(out))["games_received"] == 2**40
