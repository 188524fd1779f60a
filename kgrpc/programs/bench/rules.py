"""``kgrpc-bench rules``: speed of the Go engine on one core.

Figures (JSON keys):

* ``playout_moves_per_s_9`` / ``playout_moves_per_s_19``: random playouts (uniform legal moves,
  no own-eye filling) from the empty board to the end, moves per second.
* ``replay_encode_positions_per_s_19``: replay random 19x19 games move by move and encode +
  pack the position before every move (the coordinator's per-position cost, no policy checks).
* ``validate_positions_per_s_19``: the whole ``validate_record`` + ``training_rows`` path on
  serialized records with a sparse target per move (policy legality checks included).

Each figure is measured for every implementation available (kgrpc/native.py): the keys above
are the implementation in use, ``<key>_native`` and ``<key>_python`` each one (side by side,
in the same run).
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np

from kgrpc import native
from kgrpc.cli_help import env_flag
from kgrpc.go.board import Board, NativeBoard, PyBoard
from kgrpc.go.features import encode_flat, pack_planes
from kgrpc.go.playout import random_move, random_playout

# Move cap of the benchmark's games (kgrpc.records.terms.move_cap: 400 on 19x19, 162 on 9x9); a
# game the random players do not end by passes stops there, and validation uses the same cap.
_MAX_MOVES = 400
HELP = "Go engine speed: random playouts on 9x9/19x19, replay+encode and validation on 19x19"

TARGETS = {
    "playout_moves_per_s_9": 2_000_000,
    "playout_moves_per_s_19": 60_000,
    "replay_encode_positions_per_s_19": 15_000,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    env_flag(parser, "--seconds", type=float, default=3.0, help="time per figure")
    env_flag(parser, "--seed", type=int, default=1, help="seed of the random games")
    env_flag(parser, "--json", metavar="FILE", help="also write the figures as JSON to FILE")


def _playouts(
    size: int, seconds: float, rng: random.Random, board: type = Board
) -> tuple[float, int]:
    moves = games = 0
    start = time.process_time()
    while (elapsed := time.process_time() - start) < seconds:
        moves += random_playout(board(size), rng)
        games += 1
    return moves / elapsed, games


def _random_games(size: int, count: int, rng: random.Random) -> list[list[int]]:
    games = []
    for _ in range(count):
        b = Board(size)
        random_playout(b, rng)
        games.append(b.moves)
    return games


def _replay_encode(games: list[list[int]], size: int, seconds: float, board: type = Board) -> float:
    positions = 0
    start = time.process_time()
    while True:
        for moves in games:
            b = board(size)
            planes = []
            for m in moves:
                planes.append(encode_flat(b)[0])
                b.play(m)
            pack_planes(np.stack(planes))
            positions += len(moves)
            if time.process_time() - start >= seconds:
                return positions / (time.process_time() - start)


def _records(size: int, count: int, rng: random.Random) -> list[bytes]:
    from kgrpc.records.build import game_to_proto, make_target
    from kgrpc.records.terms import move_cap

    out = []
    for g in range(count):
        b = Board(size)
        targets = []
        while not b.is_over() and b.move_number < move_cap(size, _MAX_MOVES):
            m = random_move(b, rng)
            # A sparse target like a search's: the played move and a few others.
            targets.append(
                make_target(
                    {m: 0.7, b.pass_move: 0.3} if m != b.pass_move else {m: 1.0},
                    visits=200,
                    root_value=0.0,
                    full_search=rng.random() < 0.25,
                )
            )
            b.play(m)
        out.append(game_to_proto(b, targets, game_id=f"bench-{g}").SerializeToString())
    return out


def _validate(blobs: list[bytes], seconds: float, impl: str) -> float:
    from kgrpc.records.replay import replay_native, replay_python
    from kgrpc.records.rows import training_rows
    from kgrpc.v1 import records_pb2

    replay_fn = replay_native if impl == "native" else replay_python
    positions = 0
    start = time.process_time()
    while True:
        for blob in blobs:
            rec = records_pb2.GameRecord.FromString(blob)
            replay = replay_fn(rec)  # validate_record = limits (trivial) + this replay
            training_rows(rec, replay)
            positions += len(rec.moves)
            if time.process_time() - start >= seconds:
                return positions / (time.process_time() - start)


def _others_cpu_share() -> str:
    """How busy the machine is before we start (we are idle meanwhile): other processes."""
    try:
        import psutil
    except ImportError:
        return "load unknown"
    return f"{psutil.cpu_percent(interval=0.5):.0f}% of all cores busy with other processes"


def run(args: argparse.Namespace) -> dict:
    busy = _others_cpu_share()
    impls: list[tuple[str, type]] = [("python", PyBoard)]
    if NativeBoard is not None:
        impls.insert(0, ("native", NativeBoard))
    figures: dict[str, float] = {}
    games_played: dict[str, tuple[int, int]] = {}
    for impl, board in impls:
        rng = random.Random(args.seed)
        k9, g9 = _playouts(9, args.seconds, rng, board)
        k19, g19 = _playouts(19, args.seconds, rng, board)
        figures[f"playout_moves_per_s_9_{impl}"] = k9
        figures[f"playout_moves_per_s_19_{impl}"] = k19
        games_played[impl] = (g9, g19)
        games = _random_games(19, 10, random.Random(args.seed))
        figures[f"replay_encode_positions_per_s_19_{impl}"] = _replay_encode(
            games, 19, args.seconds, board
        )
    blobs = _records(19, 6, random.Random(args.seed))
    for impl, _ in impls:
        figures[f"validate_positions_per_s_19_{impl}"] = _validate(blobs, args.seconds, impl)
    for key in (
        "playout_moves_per_s_9",
        "playout_moves_per_s_19",
        "replay_encode_positions_per_s_19",
        "validate_positions_per_s_19",
    ):
        figures[key] = figures[f"{key}_{native.IMPLEMENTATION}"]

    print(f"kgrpc-bench rules (one core, CPU time; machine: {busy}; {native.describe()})")
    print(f"{'figure':42s} {'value':>12s} {'target':>10s} {'ratio':>7s}")
    for key, value in figures.items():
        target = TARGETS.get(key) or TARGETS.get(key.rsplit("_", 1)[0])
        ratio = f"{value / target:6.2f}x" if target else "      -"
        tstr = f"{target:,}" if target else "-"
        print(f"{key:42s} {value:12,.0f} {tstr:>10s} {ratio}")
    for impl, (g9, g19) in games_played.items():
        print(f"({impl}: {g9} games of 9x9 and {g19} of 19x19 in the playout figures)")
    return {k: round(v, 1) for k, v in figures.items()}
