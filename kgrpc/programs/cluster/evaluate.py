"""The final evaluation of a cluster run, in-process on the CPU: the newest released model
against the first one, and against random play."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path

from kgrpc.programs.cluster.options import ClusterConfig
from kgrpc.v1 import common_pb2, coordinator_pb2


async def evaluate_newest(
    stats: coordinator_pb2.Stats, models: Path, cfg: ClusterConfig, say: Callable[[str], None]
) -> dict:
    """Newest released model vs the first one, and vs random play; ``{}`` with none to play."""
    released = sorted(
        (m for m in stats.models if m.status == common_pb2.MODEL_STATUS_RELEASED),
        key=lambda m: m.released_unix_ms or m.created_unix_ms,
    )
    out: dict = {}
    if not released or cfg.eval_games <= 0:
        return out
    first, last = released[0], released[-1]
    games = cfg.eval_games
    say(f"evaluating {last.name}: {games} games against random play")
    out["vs_random"] = await play_vs_random(models / f"{last.name}.onnx", cfg, games)
    if last.name != first.name:
        say(f"evaluating {last.name} against {first.name}: {games} games")
        out["vs_first"] = await play_model_match(
            models / f"{last.name}.onnx", models / f"{first.name}.onnx", cfg, games
        )
        out["vs_first"]["opponent"] = first.name
    out["model"] = last.name
    return out


async def play_model_match(model_a: Path, model_b: Path, cfg: ClusterConfig, games: int) -> dict:
    """``model_a`` against ``model_b``, alternating colours; counts from model_a's side."""
    from inference.local import LocalEvaluator
    from kgrpc.go.rules import CHINESE
    from kgrpc.mcts.config import SearchConfig, SelfPlayConfig
    from kgrpc.mcts.selfplay import GameSpec, play_match_game

    a = LocalEvaluator(str(model_a))
    b = LocalEvaluator(str(model_b))
    config = SelfPlayConfig(search=SearchConfig(visits=cfg.evaluation_visits))
    spec = GameSpec(cfg.board_size, CHINESE, cfg.komi, config)
    result = {"games": games, "wins": 0, "losses": 0, "draws": 0}
    try:
        tasks = []
        for g in range(games):
            a_black = g % 2 == 0
            tasks.append(play_match_game(a if a_black else b, b if a_black else a, spec, seed=g))
        for g, played in enumerate(await asyncio.gather(*tasks)):
            winner = played.record.result.winner
            a_color = common_pb2.COLOR_BLACK if g % 2 == 0 else common_pb2.COLOR_WHITE
            if winner == common_pb2.COLOR_UNSPECIFIED:
                result["draws"] += 1
            elif winner == a_color:
                result["wins"] += 1
            else:
                result["losses"] += 1
    finally:
        await a.close()
        await b.close()
    return result


async def play_vs_random(model: Path, cfg: ClusterConfig, games: int) -> dict:
    """MCTS with ``model`` against a uniformly random player that never fills its own eyes."""
    from inference.local import LocalEvaluator
    from kgrpc.go.board import BLACK, Board
    from kgrpc.go.playout import random_move
    from kgrpc.go.rules import CHINESE
    from kgrpc.mcts.config import SearchConfig
    from kgrpc.mcts.player import MctsPlayer

    evaluator = LocalEvaluator(str(model))
    result = {"games": games, "wins": 0, "losses": 0, "draws": 0}
    max_moves = int(1.5 * cfg.board_size * cfg.board_size)

    async def one(g: int) -> float:
        player = MctsPlayer(evaluator, SearchConfig(visits=cfg.evaluation_visits), seed=g)
        rng = random.Random(g)
        board = Board(cfg.board_size, CHINESE, cfg.komi, max_moves=max_moves)
        model_color = BLACK if g % 2 == 0 else -BLACK
        while not board.is_over():
            if board.to_play == model_color:
                move = await player.choose_async(board)
            else:
                move = random_move(board, rng)
            board.play(move)
        return board.score() * model_color

    try:
        for margin in await asyncio.gather(*(one(g) for g in range(games))):
            key = "wins" if margin > 0 else "losses" if margin < 0 else "draws"
            result[key] += 1
    finally:
        await evaluator.close()
    return result
