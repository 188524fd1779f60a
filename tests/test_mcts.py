"""MCTS unit tests: PUCT maths, virtual-loss batching, tree reuse, noise and temperature."""

from __future__ import annotations

import numpy as np
import pytest

from kgrpc.go import coords
from kgrpc.go.board import BLACK, Board
from kgrpc.go.rules import CHINESE
from kgrpc.mcts import SearchConfig, SelfPlayConfig
from kgrpc.mcts.search import (
    Search,
    best_move,
    pass_wins,
    policy_target,
    sample_move,
    sensible_root_moves,
)
from kgrpc.mcts.selfplay import GameSpec, play_match_game, play_selfplay_game
from tests.test_mcts_doubles import FixedEvaluator, StoneCountEvaluator


def _cfg(**kw) -> SearchConfig:
    base = dict(visits=64, leaves_per_batch=1, random_symmetry=False)
    base.update(kw)
    return SearchConfig(**base)


async def test_visits_follow_priors_with_uniform_value() -> None:
    size = 5
    prior = np.zeros(size * size + 1, np.float32)
    prior[[0, 6, 12, 18]] = [0.4, 0.3, 0.2, 0.1]
    search = Search(
        FixedEvaluator(prior, value=0.0),
        _cfg(visits=400, fpu_reduction=0.0, root_fpu_reduction=0.0),
    )
    root = await search.run(Board(size))
    n = root.visits()
    assert n.sum() == pytest.approx(400)
    shares = n[[0, 6, 12, 18]] / n.sum()
    # With equal values PUCT spends visits in proportion to the priors.
    assert np.all(np.diff(n[[0, 6, 12, 18]]) < 0)
    np.testing.assert_allclose(shares, [0.4, 0.3, 0.2, 0.1], atol=0.03)
    assert n.sum() == n[[0, 6, 12, 18]].sum()  # zero-prior moves never tried


async def test_forced_capture_is_found() -> None:
    # Black to move can capture the white stone at B2 (in atari) by playing B1... set up:
    board = Board(5)
    for gtp in ["B3", "B2", "A2", "E5", "C2", "E4"]:
        board.play(coords.from_gtp(gtp, 5))
    capture = coords.from_gtp("B1", 5)
    assert board.is_legal(capture)
    search = Search(StoneCountEvaluator(), _cfg(visits=200, leaves_per_batch=4))
    root = await search.run(board)
    assert best_move(root) == capture
    assert root.q_value() > 0


async def test_virtual_loss_batches_distinct_leaves() -> None:
    ev = FixedEvaluator()
    search = Search(ev, _cfg(visits=64, leaves_per_batch=8, random_symmetry=True))
    root = await search.run(Board(7))
    assert root.visits().sum() == pytest.approx(64)
    assert np.all(root.child_n >= 0) and root.n_total == pytest.approx(64)
    assert max(ev.batch_sizes) == 8  # several leaves per request
    assert ev.evals == sum(ev.batch_sizes)
    assert search.stats.nn_evals == ev.evals and search.stats.visits == 64


async def test_tree_reuse_keeps_subtree_visits() -> None:
    search = Search(FixedEvaluator(), _cfg(visits=100, leaves_per_batch=4))
    board = Board(5)
    root = await search.run(board)
    move = best_move(root)
    kept = float(root.children[move].n_total)
    assert kept > 0
    board.play(move)
    search.advance(move)
    root2 = search.root_for(board)
    assert root2.n_total == kept and root2.parent is None
    # A board whose history differs gets a fresh root.
    other = Board(5)
    other.play((move + 1) % 25)
    assert search.root_for(other).n_total == 0


async def test_policy_target_is_a_distribution_over_legal_moves() -> None:
    board = Board(5)
    board.play(12)
    search = Search(FixedEvaluator(), _cfg(visits=50, leaves_per_batch=4))
    root = await search.run(board)
    moves, probs = policy_target(root)
    legal = board.legal_mask()
    assert all(legal[m] for m in moves) and 12 not in moves
    assert sum(probs) == pytest.approx(1.0, abs=1e-6)


async def test_no_pass_restriction_and_noise() -> None:
    search = Search(FixedEvaluator(), _cfg(visits=30))
    root = await search.run(Board(5), allow_pass=False)
    assert root.visits()[25] == 0 and not root.legal[25]
    # Noise changes the prior but keeps it a distribution over the legal moves.
    search = Search(FixedEvaluator(), _cfg(visits=30), seed=3)
    root = await search.run(Board(5), noise=(0.03, 0.25))
    assert root.prior.sum() == pytest.approx(1.0, abs=1e-5)
    assert not np.allclose(root.prior, root.raw_prior)
    assert np.all(root.prior[~root.legal] == 0)


async def test_temperature_sampling_and_greedy() -> None:
    prior = np.linspace(1.0, 2.0, 26).astype(np.float32)
    search = Search(FixedEvaluator(prior / prior.sum()), _cfg(visits=200, leaves_per_batch=8))
    root = await search.run(Board(5))
    rng = np.random.default_rng(0)
    picks = {sample_move(root, rng) for _ in range(200)}
    assert len(picks) > 5  # temperature 1 spreads over many moves
    greedy = best_move(root)
    assert greedy == int(np.argmax(root.visits()))
    assert {sample_move(root, rng, temperature=0.01) for _ in range(20)} == {greedy}


async def test_selfplay_game_record_is_consistent() -> None:
    cfg = SelfPlayConfig(
        search=_cfg(visits=12, leaves_per_batch=4, random_symmetry=True),
        cheap_visits=4,
        full_search_prob=0.5,
        max_moves_per_point=1.0,
    )
    ev = FixedEvaluator()
    game = await play_selfplay_game(ev, GameSpec(5, CHINESE, 7.5, cfg, model="m1"), seed=1)
    rec = game.record
    assert rec.black_model == rec.white_model == "m1"
    assert len(rec.moves) == len(rec.targets) > 0
    assert len(rec.moves) <= 25
    assert set(ev.models) == {"m1"}
    fulls = [t.full_search for t in rec.targets]
    assert any(fulls) and not all(fulls)  # playout cap randomisation
    replay = Board(5, CHINESE, 7.5)
    for move, target in zip(rec.moves, rec.targets, strict=True):
        legal = replay.legal_mask()
        assert all(legal[m] for m in target.policy_moves)
        assert sum(target.policy_probs) == pytest.approx(1.0, abs=1e-3)
        assert target.visits == (12 if target.full_search else 4) or target.visits > 4
        sensible = sensible_root_moves(replay, legal)
        assert all(sensible[m] for m in target.policy_moves)
        if move == 25:  # a pass only when it wins, or when nothing sensible is left
            assert pass_wins(replay) or not sensible[:25].any()
        replay.play(move)
    assert rec.result.score == pytest.approx(replay.score())
    assert list(rec.result.ownership) == replay.area_ownership().tolist()


def test_sensible_root_moves_skip_own_eyes_and_losing_passes() -> None:
    board = Board(5, CHINESE, 0.5)
    board.set_stones(black=[1, 5, 6], white=[18], to_play=BLACK)
    assert board.is_own_eye(0, BLACK)
    mask = sensible_root_moves(board, board.legal_mask())
    assert not mask[0]  # never fill one's own single-point eye
    assert mask[2] and mask[12]
    assert not mask[25]  # nothing settled, nobody passed: passing would throw the game away
    board.play(25)  # black passes; white is behind on the count, so white may not pass
    assert not pass_wins(board)
    assert not sensible_root_moves(board, board.legal_mask())[25]


def test_pass_allowed_when_it_wins_a_settled_board_or_after_a_pass() -> None:
    # Columns 0-1 black territory + wall in column 2 (15 points), white wall in column 3
    # and territory in column 4 (10 points): settled, black ahead by 4.5 with komi 0.5.
    black = [r * 5 + 2 for r in range(5)]
    white = [r * 5 + 3 for r in range(5)]
    board = Board(5, CHINESE, 0.5)
    board.set_stones(black=black, white=white, to_play=BLACK)
    assert pass_wins(board) and sensible_root_moves(board, board.legal_mask())[25]
    board.set_to_play(-BLACK)
    assert not pass_wins(board)  # white is behind: it keeps playing
    # Unsettled but the opponent just passed: passing ends the game, allowed when ahead.
    board = Board(5, CHINESE, 0.5)
    board.set_stones(black=[12], white=[], to_play=-BLACK)
    board.play(25)  # white passes; black leads 25 - 0.5 on the area count
    assert pass_wins(board)


async def test_temperature_moves_scale_with_board() -> None:
    cfg = SelfPlayConfig()
    assert cfg.temperature_moves(19) == 30
    assert cfg.temperature_moves(9) == round(30 * 81 / 361)
    assert cfg.max_moves(9) == 162
    # The coordinator's limit (Task.max_moves) wins where it is lower: 19x19 games would
    # otherwise reach 722 moves and be rejected as too long.
    limited = SelfPlayConfig(max_game_moves=499)
    assert limited.max_moves(19) == 499 and limited.max_moves(9) == 162


def test_resigned_score_never_exceeds_the_board() -> None:
    from kgrpc.mcts.selfplay import _resign
    from kgrpc.v1 import common_pb2, records_pb2

    board = Board(9)
    record = records_pb2.GameRecord()
    _resign(record, BLACK, -3.0e38, board)  # a wild net estimate from black's view
    assert record.result.winner == common_pb2.COLOR_WHITE
    assert record.result.score == -81.0 and record.result.resigned


async def test_match_game_uses_both_models() -> None:
    cfg = SelfPlayConfig(search=_cfg(visits=8, leaves_per_batch=4), max_moves_per_point=0.6)
    b, w = FixedEvaluator(), StoneCountEvaluator()
    spec = GameSpec(5, CHINESE, 7.5, cfg, model="A", white_model="B")
    game = await play_match_game(b, w, spec, seed=2)
    assert game.record.black_model == "A" and game.record.white_model == "B"
    assert set(b.models) == {"A"} and set(w.models) == {"B"}
    assert len(game.record.moves) == 15


async def test_restricting_a_reused_root_drops_the_visits_of_forbidden_moves() -> None:
    # A first search may spend visits on pass; a second search of the same position that
    # forbids pass must still spend its whole budget on the moves it may play.
    board = Board(5)
    search = Search(FixedEvaluator(), _cfg(visits=30, sensible_root_moves=False))
    root = await search.run(board)
    assert root.visits()[25] > 0
    root2 = await search.run(board, 30, allow_pass=False)
    assert root2 is root  # the tree was reused
    assert root2.visits()[25] == 0 and 25 not in root2.children
    assert root2.visits().sum() == pytest.approx(root2.n_total) and root2.n_total >= 30
    moves, _ = policy_target(root2)
    assert 25 not in moves


class _NaNEvaluator(FixedEvaluator):
    """Every third request answers NaN value and score (a net gone numerically bad)."""

    async def evaluate(self, planes, globals_, *, model="", want_ownership=False):  # type: ignore[no-untyped-def]
        result = await super().evaluate(planes, globals_, model=model)
        if self.requests % 3 == 0:
            result.value[:] = np.nan
            result.score[:] = np.nan
            result.policy[:, 0] = np.nan
        return result


async def test_non_finite_net_outputs_do_not_poison_the_tree() -> None:
    # One NaN leaf used to make every root value above it NaN: the coordinator rejects such
    # a game ("value_invalid"), so a whole game was lost to one bad evaluation.
    from kgrpc.records.replay import proto_to_board_replay

    cfg = SelfPlayConfig(
        search=_cfg(visits=16, leaves_per_batch=4), cheap_visits=4, max_moves_per_point=1.0
    )
    game = await play_selfplay_game(_NaNEvaluator(), GameSpec(5, CHINESE, 7.5, cfg), seed=4)
    for t in game.record.targets:
        assert np.isfinite(t.root_value) and np.isfinite(t.root_score)
    proto_to_board_replay(game.record, collect_features=False)  # raises on a bad target
