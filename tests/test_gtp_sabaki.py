"""kgrpc-gtp driven by Sabaki's own GTP controller library (``@sabaki/gtp`` from npm, installed
under clients/node by scripts/install-client-deps.sh), as Sabaki drives an engine: a
ControllerStateTracker syncs a handicap game, analysis runs until the next command, the moves
of ``kata-genmove_analyze`` and ``genmove_analyze`` are tracked (tests/gtp_sabaki_session.js)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kgrpc.sgf import parse_sgf
from tests.test_clients_other_langs import NODE_DIR, _missing

ROOT = Path(__file__).resolve().parents[1]
SESSION = ROOT / "tests" / "gtp_sabaki_session.js"
# Spawns node and an engine with a model (about 10 s of CPU).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def node() -> str:
    node = shutil.which("node")
    if node is None:
        _missing("node is not installed")
    if not (NODE_DIR / "node_modules" / "@sabaki" / "gtp" / "package.json").is_file():
        _missing("npm package @sabaki/gtp is not installed under clients/node/node_modules")
    return str(node)


def test_a_handicap_game_with_analysis_through_sabakis_controller(
    node: str, tmp_path: Path
) -> None:
    pytest.importorskip("onnxruntime")
    env = {**os.environ, "NODE_PATH": str(NODE_DIR / "node_modules")}
    # The shipped network by its short name: the engine line docs/go-engine.md gives Sabaki.
    proc = subprocess.run(
        [node, str(SESSION), sys.executable, "kg9"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])

    assert out["name"] == "kgrpc"
    assert all(out["knows"].values()), out["knows"]
    assert not out["setRules"]["error"] and not out["kgsRules"]["error"]
    assert out["rules"]["scoring"] == "AREA" and out["rules"]["ko"] == "SIMPLE"

    assert out["fixed"]["content"] == "C3 G7" and not out["fixed"]["error"]
    assert out["trackedHistory"] == [
        {"name": "set_free_handicap", "args": ["C3", "G7"]},
        {"name": "play", "args": ["W", "E5"]},
        {"name": "play", "args": ["B", "E3"]},
    ]
    assert out["komi"] == "0.5"

    kata = out["kata"]
    assert not kata["response"]["error"] and len(kata["lines"]) >= 2
    assert " rootInfo " in kata["lines"][-1] and " ownership " in kata["lines"][-1]
    own = kata["lines"][-1].split(" ownership ")[1].split()
    assert len(own) == 81
    assert kata["next"]["content"] == "kgrpc", "the command after an analysis is answered"
    lz = out["lz"]
    assert not lz["response"]["error"] and lz["lines"][0].startswith("info move ")
    assert 0 <= int(lz["lines"][0].split(" winrate ")[1].split()[0]) <= 10000

    # kata-genmove_analyze: info lines, then `play MOVE`; the tracker recorded both moves.
    assert not out["genmove"]["error"]
    assert out["genmove"]["content"].splitlines()[-1].startswith("play ")
    assert any(x.startswith("info ") for x in out["genmoveLines"])
    assert not out["lzGenmove"]["error"]
    assert out["lzGenmove"]["content"].splitlines()[-1].startswith("play ")
    history = out["historyAfterGenmove"]
    assert [h["args"][0] for h in history[1:]] == ["W", "B", "W", "B"], history
    game = parse_sgf(out["sgf"])
    assert "HA[2]" in out["sgf"] and len(game.setup_black) == 2 and len(game.moves) == 4
    assert not out["clearCache"]["error"]

    after = parse_sgf(out["sgfAfterUndo"])
    assert after.moves[:3] == game.moves[:3] and len(after.moves) == 4
    assert after.moves[3] == (1, 72), "B A1 replaced the last move"
    assert not out["score"]["error"] and out["score"]["content"][:2] in ("B+", "W+", "0")

    free = parse_sgf(out["sgfFree"])
    assert len(free.setup_black) == 3 and free.moves == [] and free.first_player == -1
