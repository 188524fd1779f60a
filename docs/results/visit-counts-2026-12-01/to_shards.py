"""GNU Go games (gen_games.py's JSON lines) -> kgrpc training shards, one-hot policy targets.

Value, score and ownership come from the final position with GNU Go's dead stones removed
(area scoring, komi 7.5); a resigned game's winner is the player who did not resign.
"""

from __future__ import annotations

import argparse
import json
import uuid
from pathlib import Path

import numpy as np

from kgrpc import shards
from kgrpc.go import BLACK, CHINESE, WHITE, Board, IllegalMoveError
from kgrpc.go.coords import from_gtp
from kgrpc.records.build import game_to_proto, make_target
from kgrpc.records.replay import proto_to_board_replay
from kgrpc.records.rows import training_rows

N = 19


def game_rows(g: dict) -> dict[str, np.ndarray] | None:
    if g["end"] == "cap":
        return None
    b = Board(N, CHINESE, 7.5)
    pass_move = N * N
    targets = []
    try:
        for v in g["moves"]:
            m = pass_move if v == "pass" else from_gtp(v, N)
            b.play(m)
            targets.append(make_target({m: 1.0}, visits=1, root_value=0.0, played_visits=1))
    except (IllegalMoveError, ValueError):
        return None
    if g["end"] == "resign":
        winner = -b.to_play  # the player to move resigned
        rec = game_to_proto(b, targets, game_id=str(uuid.uuid4()), resigned_winner=winner)
        own = b.area_ownership()
        est = b.score()
        score = est if np.sign(est) == winner else float(winner)
    else:
        rec = game_to_proto(b, targets, game_id=str(uuid.uuid4()))
        dead = [from_gtp(v, N) for v in g["dead"]]
        own = b.ownership(dead)
        score = b.score(dead)
        winner = BLACK if score > 0 else (WHITE if score < 0 else 0)
    replay = proto_to_board_replay(rec, collect_features=True)
    rows = training_rows(rec, replay)
    movers = replay.movers.astype(np.float32)
    rows["value"] = movers * np.float32(winner)
    rows["score"] = movers * np.float32(score)
    rows["ownership"] = (replay.movers[:, None] * own[None, :]).astype(np.int8)
    rows["game_id"] = rec.game_id
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--games-per-shard", type=int, default=50)
    args = ap.parse_args()
    out = Path(args.data_dir) / "training_data" / "gnugo"
    out.mkdir(parents=True, exist_ok=True)
    games = [json.loads(line) for f in args.inputs for line in open(f)]
    kept, batch, n = 0, [], 0
    skipped = 0
    for g in games:
        r = game_rows(g)
        if r is None:
            skipped += 1
            continue
        batch.append(r)
        kept += 1
        if len(batch) == args.games_per_shard:
            n += 1
            ids = [x.pop("game_id") for x in batch]
            shards.write_shard_games(
                out / f"games_{n:05d}.npz", batch, board_size=N, komi=7.5, rules="chinese",
                game_ids=ids,
            )
            batch = []
    if batch:
        n += 1
        ids = [x.pop("game_id") for x in batch]
        shards.write_shard_games(
            out / f"games_{n:05d}.npz", batch, board_size=N, komi=7.5, rules="chinese", game_ids=ids
        )
    print(f"{kept} games in {n} shards, {skipped} skipped")


if __name__ == "__main__":
    main()
