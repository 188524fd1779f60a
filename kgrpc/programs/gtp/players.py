"""The players behind ``kgrpc-gtp``: random legal moves, or the MCTS player on a model."""

from __future__ import annotations

import argparse
import random
import time
from typing import Protocol

import numpy as np

from kgrpc.go.board import Board
from kgrpc.go.playout import random_move

RESIGN = -1
# Visits added per step of a timed or analysing search (between two looks at the clock).
SEARCH_STEP = 16


class Player(Protocol):
    async def genmove(self, board: Board, budget: float | None) -> int:
        """A move for the player to move in ``board`` within ``budget`` seconds (None: no
        limit): a point index, the pass index ``N*N``, or ``RESIGN``."""
        ...

    async def aclose(self) -> None: ...


class RandomPlayer:
    """Uniformly random legal moves, never filling its own eyes; passes when nothing is left."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = random.Random(seed)

    async def genmove(self, board: Board, budget: float | None = None) -> int:
        return random_move(board, self.rng)

    async def aclose(self) -> None:
        return None


class SearchPlayer:
    """The MCTS player: ``visits`` per move at most, fewer when the clock says so."""

    def __init__(self, mcts, visits: int) -> None:  # mcts: kgrpc.mcts.player.MctsPlayer
        self.mcts = mcts
        self.visits = visits

    async def genmove(self, board: Board, budget: float | None = None) -> int:
        from kgrpc.mcts.search import best_move

        if budget is None or self.mcts.config.gumbel:
            # A Gumbel search cannot stop early (sequential halving plans its whole budget).
            return await self.mcts.choose_async(board, self.visits)
        deadline = time.monotonic() + budget
        target = SEARCH_STEP
        while True:
            started = time.monotonic()
            root = await self.mcts.analyze(board, min(target, self.visits))
            now = time.monotonic()
            # Stop when the next step would likely end past the deadline.
            if root.n_total >= self.visits or now + (now - started) > deadline:
                return best_move(root)
            target = int(root.n_total) + SEARCH_STEP

    async def grow(self, board: Board, visits: int):  # -> kgrpc.mcts.tree.Node
        return await self.mcts.analyze(board, visits)

    async def ownership(self, board: Board) -> np.ndarray:
        return await self.mcts.ownership(board)

    def clear_cache(self) -> None:
        """Forget the search tree, so the next search starts afresh (``clear_cache``)."""
        self.mcts.clear_cache()

    async def aclose(self) -> None:
        await self.mcts.aclose()


class PlayerUnavailable(RuntimeError):
    pass


def load_model_player(path: str, args: argparse.Namespace) -> SearchPlayer:
    """The MCTS player for an ONNX model: in-process ONNX Runtime, or inference servers."""
    from kgrpc.mcts.player import MctsPlayer

    try:
        mcts = MctsPlayer.from_model(
            path,
            visits=args.visits,
            inference=args.inference,
            token=args.token,
            seed=args.seed,
            tls_ca=args.tls_ca,
            score_utility_factor=args.score_utility_factor,
            gumbel=args.gumbel,
            gumbel_considered=args.gumbel_considered,
        )
    except (FileNotFoundError, ImportError) as exc:
        raise PlayerUnavailable(str(exc)) from exc
    return SearchPlayer(mcts, args.visits)


def make_player(args: argparse.Namespace) -> Player:
    if args.model == "none":
        return RandomPlayer(args.seed)
    return load_model_player(args.model, args)
