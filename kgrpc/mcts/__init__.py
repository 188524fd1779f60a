"""Monte Carlo tree search (PUCT) for self-play, gating matches and GTP play.

- :mod:`kgrpc.mcts.tree`: nodes with numpy child arrays, vectorised PUCT selection.
- :mod:`kgrpc.mcts.search`: batched asynchronous search with virtual loss.
- :mod:`kgrpc.mcts.selfplay`: one self-play or match game -> ``records_pb2.GameRecord``;
  ``GameSpec``, what a game is (also what the native game sets take).
- :mod:`kgrpc.mcts.player`: a move chooser for ``kgrpc-gtp``.
"""

from kgrpc.mcts.config import SearchConfig, SelfPlayConfig
from kgrpc.mcts.search import EvalResult, Evaluator, Search, SearchStats

__all__ = ["EvalResult", "Evaluator", "Search", "SearchConfig", "SearchStats", "SelfPlayConfig"]
