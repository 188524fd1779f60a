"""MctsPlayer (the kgrpc-gtp move chooser) on a real tiny ONNX model, in-process."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kgrpc.go.board import Board
from kgrpc.mcts.player import MctsPlayer
from trainer.export import init_model


def test_player_chooses_legal_moves_and_reuses_its_tree(tmp_path: Path) -> None:
    path = tmp_path / "kg-b1c8-s0-d0.onnx"
    init_model(5, blocks=1, channels=8, out=path)
    player = MctsPlayer.from_model(str(path), visits=16, seed=0)
    try:
        board = Board(5)
        for _ in range(4):
            move = player.choose(board)
            assert board.is_legal(move)
            assert player.last_root is not None and player.last_root.n_total >= 16
            board.play(move)
        assert player.stats.nn_evals > 0 and player.stats.searches == 4
    finally:
        player.close()


def test_player_missing_model_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        MctsPlayer.from_model(str(tmp_path / "nope.onnx"))


def test_gumbel_player_plays_its_search_move_and_analysis_stays_puct(tmp_path: Path) -> None:
    path = tmp_path / "kg-b1c8-s0-d0.onnx"
    init_model(5, blocks=1, channels=8, out=path)
    player = MctsPlayer.from_model(str(path), visits=12, seed=0, gumbel=True, gumbel_considered=4)
    try:
        board = Board(5)
        for _ in range(3):
            before = player.stats.visits
            move = player.choose(board)
            assert board.is_legal(move)
            search = player._get_search()
            # Exactly the budget of new simulations, the move one of the 4 considered.
            assert player.stats.visits - before == 12
            assert search.gumbel is not None and move in search.gumbel.considered
            board.play(move)
        # Analysis grows one PUCT tree to a visit count.

        root = player._loop.run_until_complete(player.analyze(board, 30))  # type: ignore[union-attr]
        assert root.n_total >= 30 and player._get_search().gumbel is None
    finally:
        player.close()


def test_clear_cache_makes_the_next_search_start_afresh(tmp_path: Path) -> None:
    path = tmp_path / "kg-b1c8-s0-d0.onnx"
    init_model(5, blocks=1, channels=8, out=path)
    player = MctsPlayer.from_model(str(path), visits=16, seed=0)
    player.clear_cache()  # before any search: nothing to forget
    loop = asyncio.new_event_loop()
    try:
        board = Board(5)
        first = loop.run_until_complete(player.analyze(board, 20))
        visits = player.stats.visits
        # Without clear_cache the same position reuses the tree: no new simulation.
        assert loop.run_until_complete(player.analyze(board, 20)) is first
        assert player.stats.visits == visits
        player.clear_cache()
        assert player.last_root is None
        fresh = loop.run_until_complete(player.analyze(board, 20))
        assert fresh is not first and fresh.n_total >= 20
        assert player.stats.visits >= visits + 20  # searched again, from nothing
    finally:
        loop.run_until_complete(player.aclose())
        loop.close()
