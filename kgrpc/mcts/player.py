"""A move chooser backed by the search, for ``kgrpc-gtp`` and other interactive callers.

``MctsPlayer.choose(board)`` is synchronous: it runs the search on the player's own event
loop (gRPC aio objects are bound to the loop that created them, so the evaluator is created
lazily inside that loop). Async callers use ``await choose_async(board)`` instead and must not
mix the two on one player; ``analyze`` (grow the tree, return its root) and ``ownership`` (the
net's ownership estimate) serve ``kgrpc-gtp``'s time control and ``kata-analyze``;
``clear_cache`` drops the tree that searches reuse.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import numpy as np

from kgrpc.go import features
from kgrpc.go.board import Board
from kgrpc.mcts.config import SearchConfig
from kgrpc.mcts.search import Evaluator, Search, SearchStats, best_move
from kgrpc.mcts.tree import Node

EvaluatorFactory = Callable[[], Evaluator]


class MctsPlayer:
    def __init__(
        self,
        evaluator: Evaluator | EvaluatorFactory,
        config: SearchConfig | None = None,
        *,
        model: str = "",
        seed: int | None = None,
    ) -> None:
        self.config = config or SearchConfig()
        self.model = model
        self.stats = SearchStats()
        self._seed = seed
        if callable(evaluator) and not hasattr(evaluator, "evaluate"):
            self._factory: EvaluatorFactory | None = evaluator
            self._evaluator: Evaluator | None = None
        else:
            self._factory = None
            self._evaluator = evaluator  # type: ignore[assignment]
        self._search: Search | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.last_root = None

    @classmethod
    def from_model(
        cls,
        model_path: str,
        visits: int = 800,
        *,
        inference: str | None = None,
        token: str | None = None,
        seed: int | None = None,
        tls_ca: str | None = None,
        score_utility_factor: float = 0.0,
        gumbel: bool = False,
        gumbel_considered: int = 16,
    ) -> MctsPlayer:
        """A player for ``kgrpc-gtp --model FILE.onnx [--visits V] [--inference ADDR]``.

        Without ``inference`` the model runs in-process (ONNX Runtime); with it, requests go to
        the inference server(s) at ADDR (comma-separated) and name the model by its file stem,
        over TLS when ``tls_ca`` names the servers' CA certificate (PEM file).
        ``score_utility_factor``: the score's weight in the search's utility (SearchConfig);
        ``gumbel``: choose moves by a Gumbel root search of ``gumbel_considered`` moves.
        """
        path = Path(model_path)
        config = SearchConfig(
            visits=visits,
            score_utility_factor=score_utility_factor,
            gumbel=gumbel,
            gumbel_considered=gumbel_considered,
        )
        if inference:
            addresses = [a.strip() for a in inference.split(",") if a.strip()]

            def remote() -> Evaluator:
                from inference.client import InferenceClient

                return InferenceClient(addresses, token=token, tls_ca=tls_ca)

            return cls(remote, config, model=path.stem, seed=seed)
        if not path.is_file():
            raise FileNotFoundError(f"model file {path} does not exist")

        def local() -> Evaluator:
            from inference.local import LocalEvaluator

            return LocalEvaluator(str(path))

        return cls(local, config, seed=seed)

    def _get_search(self) -> Search:
        if self._search is None:
            if self._evaluator is None:
                assert self._factory is not None
                self._evaluator = self._factory()
            self._search = Search(
                self._evaluator, self.config, model=self.model, stats=self.stats, seed=self._seed
            )
        return self._search

    async def choose_async(self, board: Board, visits: int | None = None) -> int:
        """The move to play in ``board`` (pass when the game is already over)."""
        if board.is_over():
            return board.pass_move
        if self.config.gumbel:  # a fresh budget of `visits` simulations, its best survivor
            search = self._get_search()
            self.last_root = await search.run(board, visits)
            return search.gumbel_move()
        return best_move(await self.analyze(board, visits))

    async def analyze(self, board: Board, visits: int | None = None) -> Node:
        """Search ``board`` until its root has ``visits`` visits (the tree of earlier calls on
        the same position is reused, so repeated calls grow one tree); returns the root. A PUCT
        search even with ``config.gumbel``: only PUCT grows a tree to a visit count."""
        root = await self._get_search().run(board, visits, gumbel=False)
        self.last_root = root
        return root

    async def ownership(self, board: Board) -> np.ndarray:
        """The net's final-ownership estimate of ``board``: float [N*N] in [-1, 1], +1 black."""
        search = self._get_search()
        planes, globals_ = features.encode(board)
        kwargs = {"model": self.model} if self.model else {}
        result = await search.evaluator.evaluate(
            planes[None], globals_[None], want_ownership=True, **kwargs
        )
        if result.ownership is None:
            raise ValueError("the evaluator returned no ownership")
        mover_view = np.asarray(result.ownership, dtype=np.float32).reshape(-1)
        return mover_view * np.float32(board.to_play)

    def clear_cache(self) -> None:
        """Forget the search tree (GTP ``clear_cache``, as KataGo's): the next search of any
        position, even the last one, starts from a fresh root. The evaluator stays: it keeps
        no positions (the in-process one is made without a cache)."""
        if self._search is not None:
            self._search.root = None
            self._search.gumbel = None
        self.last_root = None

    def choose(self, board: Board) -> int:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(self.choose_async(board))

    async def aclose(self) -> None:
        if self._evaluator is not None and self._factory is not None:
            await self._evaluator.close()  # only what we created
        self._evaluator = None if self._factory is not None else self._evaluator
        self._search = None

    def close(self) -> None:
        if self._loop is not None:
            self._loop.run_until_complete(self.aclose())
            self._loop.close()
            self._loop = None
