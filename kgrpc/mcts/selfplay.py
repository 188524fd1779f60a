"""One game between searches: self-play (one model, exploration, playout caps) or a gating
match (two models). The result is a ``records_pb2.GameRecord`` as records.proto defines it.

:class:`GameSpec` says what a game is and what its record names, for these games and for the
native game sets (:mod:`kgrpc.mcts.gameset`) alike."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import numpy as np

from kgrpc.go.board import BLACK, WHITE, Board
from kgrpc.go.rules import Rules
from kgrpc.mcts.config import SelfPlayConfig
from kgrpc.mcts.search import (
    Evaluator,
    Search,
    SearchStats,
    best_move,
    policy_target,
    pruned_visits,
    sample_move,
    sensible_root_moves,
)
from kgrpc.records.build import RECORD_FORMAT_VERSION
from kgrpc.v1 import common_pb2, records_pb2


@dataclass(frozen=True)
class GameSpec:
    """What a game is played as and what its record names, the same for the Python games
    (:func:`play_selfplay_game`, :func:`play_match_game`) and the native game sets
    (:class:`~kgrpc.mcts.gameset.NativeSelfPlay`, :class:`~kgrpc.mcts.gameset.NativeMatch`).
    What differs per game (its seed, its record's id) and what games share beyond it (the
    evaluators, the stats they add to) are passed beside it.

    Fields:

    * ``board_size``: points on a side (2 to 19).
    * ``rules``: the rules the game is played and recorded under.
    * ``komi``: points added to white's score at the count. On a native game set, the komi
      of a game started without its own (``add_games(count, komi)``).
    * ``config``: the search and self-play settings (visits, noise, resignation, ...).
    * ``model``: the model argument each evaluator request carries (remote inference names the
      model per request; "" sends none); in a match, black's evaluator's.
    * ``model_name``: the model the record names as black (and as white in self-play); ""
      records ``model``.
    * ``white_model``, ``white_name``: in a match, white's evaluator argument and recorded
      name, as ``model`` and ``model_name`` are black's; self-play ignores them.
    * ``task_id``, ``worker_id``: the task and the worker the record names ("" for none).
    """

    board_size: int
    rules: Rules
    komi: float
    config: SelfPlayConfig
    model: str = ""
    model_name: str = ""
    white_model: str = ""
    white_name: str = ""
    task_id: str = ""
    worker_id: str = ""

    def record_names(self, match: bool) -> tuple[str, str]:
        """The models the record names as (black, white); in self-play (``match`` False) the
        one model plays both colours."""
        black = self.model_name or self.model
        white = (self.white_name or self.white_model) if match else black
        return black, white


@dataclass
class PlayedGame:
    record: records_pb2.GameRecord
    # Resignation bookkeeping: a game where some player would have resigned but the game was
    # played out (resign_playout_fraction); `false_resignation` says the would-be resigner won.
    would_resign: bool = False
    false_resignation: bool = False
    seconds: float = 0.0

    @property
    def moves(self) -> int:
        return len(self.record.moves)


def _color_proto(color: int) -> int:
    if color == BLACK:
        return common_pb2.COLOR_BLACK
    if color == WHITE:
        return common_pb2.COLOR_WHITE
    return common_pb2.COLOR_UNSPECIFIED


def _finish(record: records_pb2.GameRecord, board: Board) -> None:
    score = float(board.score())
    record.result.score = score
    record.result.winner = _color_proto(BLACK if score > 0 else WHITE if score < 0 else 0)
    record.result.ownership.extend(int(x) for x in board.area_ownership())
    record.result.resigned = False


def _new_record(
    board: Board, spec: GameSpec, game_id: str | None, *, match: bool
) -> records_pb2.GameRecord:
    black_model, white_model = spec.record_names(match)
    return records_pb2.GameRecord(
        game_id=game_id or str(uuid.uuid4()),
        rules=board.rules.to_proto(),
        komi=board.komi,
        board_size=board.size,
        black_model=black_model,
        white_model=white_model,
        worker_id=spec.worker_id,
        task_id=spec.task_id,
        format_version=RECORD_FORMAT_VERSION,
    )


def _side_search(
    evaluator: Evaluator,
    model: str,
    spec: GameSpec,
    stats: SearchStats | None,
    rng: np.random.Generator,
) -> Search:
    """The search one side of a game plays with, seeded by the game's next draw from ``rng``.
    The order of the draws is part of the game: the differential tests seed a native game
    with the same draws to play the same game (tests/test_native_search.py)."""
    return Search(
        evaluator,
        spec.config.search,
        model=model,
        max_moves=spec.config.max_moves(spec.board_size),
        stats=stats,
        seed=int(rng.integers(1 << 62)),
    )


def _played(
    target: records_pb2.SearchTarget,
    root_node,  # type: ignore[no-untyped-def]
    move: int,
) -> None:
    """Record the played move's child visits (what the coordinator checks the move by)."""
    target.played_visits = int(root_node.visits()[move])


def _target(  # type: ignore[no-untyped-def]
    root_node, full: bool, visits: np.ndarray | None = None
) -> records_pb2.SearchTarget:
    moves, probs = policy_target(root_node, visits)
    return records_pb2.SearchTarget(
        full_search=full,
        visits=int(root_node.n_total),
        policy_moves=moves,
        policy_probs=probs,
        root_value=float(np.clip(root_node.q_value(), -1.0, 1.0)),
        root_score=float(root_node.mean_score()),
    )


def _gumbel_target(  # type: ignore[no-untyped-def]
    search: Search, root_node, full: bool
) -> records_pb2.SearchTarget:
    """A Gumbel search's target: its improved policy instead of the visit distribution."""
    moves, probs = search.gumbel_target()
    return records_pb2.SearchTarget(
        full_search=full,
        visits=int(root_node.n_total),
        policy_moves=moves,
        policy_probs=probs,
        root_value=float(np.clip(root_node.q_value(), -1.0, 1.0)),
        root_score=float(root_node.mean_score()),
    )


async def play_selfplay_game(
    evaluator: Evaluator,
    spec: GameSpec,
    *,
    game_id: str | None = None,
    stats: SearchStats | None = None,
    seed: int | None = None,
) -> PlayedGame:
    """Play one self-play game of ``spec`` with ``evaluator``; ``game_id`` names the record
    (a new UUID when None)."""
    started = time.monotonic()
    rng = np.random.default_rng(seed)
    board_size, config = spec.board_size, spec.config
    board = Board(board_size, spec.rules, spec.komi)
    max_moves = config.max_moves(board_size)
    search = _side_search(evaluator, spec.model, spec, stats, rng)
    record = _new_record(board, spec, game_id, match=False)
    temp_moves = config.temperature_moves(board_size)
    resign_on = config.resign_threshold > 0
    may_resign = resign_on and rng.random() >= config.resign_playout_fraction
    low_streak = {BLACK: 0, WHITE: 0}
    would_resign_color = 0
    opening = opening_length(config, board_size, rng)

    while not board.is_over() and board.move_number < max_moves:
        if board.move_number < opening:
            move, target = await _opening_move(search, board, config, rng)
            record.moves.append(move)
            record.targets.append(target)
            board.play(move)
            search.advance(move)
            continue
        full = rng.random() < config.full_search_prob
        visits = config.search.visits if full else config.cheap_visits
        noise = (
            (config.dirichlet_alpha_19, config.noise_fraction)
            if full and config.noise_fraction > 0
            else None
        )
        forced_k = config.forced_playouts_k if noise is not None else 0.0
        root = await search.run(board, visits, noise=noise, forced_k=forced_k)
        if config.search.gumbel:  # its draws explore: no temperature on top
            target = _gumbel_target(search, root, full)
            move = search.gumbel_move()
        else:
            kept = (
                pruned_visits(root, config.search.c_puct, forced_k, search.utility)
                if forced_k > 0 and config.prune_policy_target
                else None
            )
            target = _target(root, full, kept)
            if board.move_number < temp_moves:
                move = sample_move(root, rng, config.temperature, kept)
            else:
                move = best_move(root)
        _played(target, root, move)
        mover = board.to_play
        if resign_on:
            low_streak[mover] = (
                low_streak[mover] + 1 if target.root_value < -config.resign_threshold else 0
            )
            if low_streak[mover] >= config.resign_consecutive:
                if may_resign:
                    _resign(record, mover, target.root_score, board)
                    return PlayedGame(record, seconds=time.monotonic() - started)
                if not would_resign_color:
                    would_resign_color = mover
        record.moves.append(move)
        record.targets.append(target)
        board.play(move)
        search.advance(move)

    _finish(record, board)
    record.finished_unix_ms = int(time.time() * 1000)
    false_resign = bool(would_resign_color) and record.result.winner == _color_proto(
        would_resign_color
    )
    return PlayedGame(
        record,
        would_resign=bool(would_resign_color),
        false_resignation=false_resign,
        seconds=time.monotonic() - started,
    )


def opening_length(config: SelfPlayConfig, board_size: int, rng: np.random.Generator) -> int:
    """How many raw-policy opening moves this game starts with (0 for most games): with
    probability ``opening_policy_prob``, an exponential draw of mean ``opening_moves``.
    Draws nothing from ``rng`` when the setting is off."""
    if config.opening_policy_prob <= 0:
        return 0
    if rng.random() >= config.opening_policy_prob:
        return 0
    return int(rng.exponential(config.opening_moves(board_size)))


async def _opening_move(
    search: Search, board: Board, config: SelfPlayConfig, rng: np.random.Generator
) -> tuple[int, records_pb2.SearchTarget]:
    """A move drawn from the net's raw policy ** (1 / opening_temperature) over the sensible
    root moves, and its record: a cheap target (no training row) of no visits."""
    root = await search.evaluate_root(board)
    assert root.legal is not None and root.raw_prior is not None
    mask = root.legal
    if config.search.sensible_root_moves:
        mask = sensible_root_moves(board, root.legal)
    weights = np.where(mask, root.raw_prior, 0.0).astype(np.float64)
    if weights.sum() <= 0:
        weights = mask.astype(np.float64)
    top = weights.max()
    weights = (weights / top) ** (1.0 / config.opening_temperature)
    move = int(rng.choice(weights.shape[0], p=weights / weights.sum()))
    target = records_pb2.SearchTarget(
        full_search=False,
        visits=0,
        played_visits=0,
        policy_moves=[move],
        policy_probs=[1.0],
        root_value=float(np.clip(root.value, -1.0, 1.0)),
        root_score=float(root.score),
    )
    return move, target


def _resign(
    record: records_pb2.GameRecord, resigner: int, mover_score: float, board: Board
) -> None:
    winner = -resigner
    black_score = mover_score if resigner == BLACK else -mover_score
    # The score estimate is the search's; keep its size but never let its sign contradict
    # the winner, nor exceed what a board can hold (the coordinator rejects that).
    magnitude = min(max(abs(black_score), 0.5), float(board.num_points))
    record.result.score = magnitude if winner == BLACK else -magnitude
    record.result.winner = _color_proto(winner)
    record.result.resigned = True
    record.result.ownership.extend(int(x) for x in board.area_ownership())
    record.finished_unix_ms = int(time.time() * 1000)


async def play_match_game(
    black: Evaluator,
    white: Evaluator,
    spec: GameSpec,
    *,
    game_id: str | None = None,
    stats: SearchStats | None = None,
    seed: int | None = None,
) -> PlayedGame:
    """A gating-match game of ``spec``: each side searches with its own model at full visits,
    without noise or resignation; the opening moves are sampled (temperature) so games differ.
    ``spec.model`` is black's evaluator argument, ``spec.white_model`` white's."""
    started = time.monotonic()
    rng = np.random.default_rng(seed)
    board_size, config = spec.board_size, spec.config
    board = Board(board_size, spec.rules, spec.komi)
    max_moves = config.max_moves(board_size)
    searches = {  # black's seed is drawn first (see _side_search)
        BLACK: _side_search(black, spec.model, spec, stats, rng),
        WHITE: _side_search(white, spec.white_model, spec, stats, rng),
    }
    record = _new_record(board, spec, game_id, match=True)
    temp_moves = config.temperature_moves(board_size)
    while not board.is_over() and board.move_number < max_moves:
        search = searches[board.to_play]
        root = await search.run(board, config.search.visits)
        if config.search.gumbel:
            target = _gumbel_target(search, root, True)
            move = search.gumbel_move()
        else:
            target = _target(root, True)
            move = (
                sample_move(root, rng, config.temperature)
                if board.move_number < temp_moves
                else best_move(root)
            )
        _played(target, root, move)
        record.moves.append(move)
        record.targets.append(target)
        board.play(move)
        for s in searches.values():
            s.advance(move)
    _finish(record, board)
    record.finished_unix_ms = int(time.time() * 1000)
    return PlayedGame(record, seconds=time.monotonic() - started)
