"""Gumbel root search (kgrpc/mcts/gumbel.py, native/src/gumbel.cpp): the paper's properties on
hand-made roots, the visit budget, and the native game set against the Python search.

Without Gumbel noise (gumbel_scale 0) the two searches are the same algorithm in the same float
order: the games must agree move for move and target for target, to the last bit. With noise
their draws come from different generators, so they agree statistically.
"""

from __future__ import annotations

import numpy as np
import pytest

from kgrpc import native
from kgrpc.go.board import Board
from kgrpc.go.rules import PRESETS
from kgrpc.mcts.config import SearchConfig, SelfPlayConfig
from kgrpc.mcts.gameset import NativeSelfPlay, finished_record
from kgrpc.mcts.gumbel import GumbelRoot, halving_schedule
from kgrpc.mcts.search import Search, SearchStats
from kgrpc.mcts.selfplay import GameSpec, play_match_game, play_selfplay_game
from kgrpc.mcts.tree import Node
from tests.test_native_search import HashEvaluator, native_game, native_match

needs_native = pytest.mark.skipif(not native.ENABLED, reason=f"no native core: {native.describe()}")


def hand_root(size: int, prior: np.ndarray, value: float = 0.0) -> Node:
    """An expanded root of an empty board with this prior over its N*N+1 moves."""
    root = Node(Board(size, PRESETS["chinese"], 7.5))
    root.expand(prior.astype(np.float32), value, 0.0)
    return root


def visit(root: Node, move: int, visits: int, q: float) -> None:
    """Give a root move `visits` visits of mean value q (root mover's view)."""
    root.child_n[move] += visits
    root.child_w[move] += np.float32(q * visits)
    root.n_total += visits


def gumbel_root(root: Node, budget: int, considered: int = 16, seed: int = 0) -> GumbelRoot:
    return GumbelRoot(
        root,
        budget,
        considered=considered,
        c_visit=50.0,
        c_scale=1.0,
        noise_scale=1.0,
        rng=np.random.default_rng(seed),
    )


def dense(moves: list[int], probs: list[float], n: int) -> np.ndarray:
    out = np.zeros(n)
    out[moves] = probs
    return out


@pytest.mark.parametrize("considered", [1, 2, 3, 4, 5, 8, 16, 17, 32])
@pytest.mark.parametrize("budget", [1, 2, 5, 8, 16, 24, 50, 100, 200])
def test_halving_schedule_spends_exactly_the_budget(considered: int, budget: int) -> None:
    sched = halving_schedule(considered, budget)
    assert len(sched) == budget
    # Each entry is a count some survivor has: replaying it with a real argmax never gets stuck.
    counts = [0] * considered
    for want in sched:
        holders = [a for a in range(considered) if counts[a] == want]
        assert holders, (considered, budget, want)
        counts[holders[0]] += 1
    assert sum(counts) == budget
    if considered > 1 and budget >= considered:
        assert min(counts) >= 1  # the first phase visits every considered action


def test_uniform_q_gives_back_the_prior() -> None:
    rng = np.random.default_rng(3)
    prior = rng.random(26) ** 2
    prior /= prior.sum()
    root = hand_root(5, prior, value=0.3)
    # Every visited move has the root's value: the completed Q is flat, sigma is 0 everywhere.
    for move in (0, 4, 7, 12, 25):
        visit(root, move, 3, 0.3)
    g = gumbel_root(root, 16)
    g.refresh()
    moves, probs = g.improved_policy()
    expected = root.prior.astype(np.float64)
    np.testing.assert_allclose(dense(moves, probs, 26), expected / expected.sum(), atol=1e-6)
    # No visits at all: the same.
    fresh = gumbel_root(hand_root(5, prior, value=-0.5), 16)
    moves, probs = fresh.improved_policy()
    np.testing.assert_allclose(dense(moves, probs, 26), expected / expected.sum(), atol=1e-6)


@pytest.mark.parametrize("seed", range(6))
def test_informative_q_improves_on_the_prior(seed: int) -> None:
    rng = np.random.default_rng(seed)
    prior = rng.random(26) ** 3
    prior /= prior.sum()
    root = hand_root(5, prior, value=float(rng.uniform(-0.5, 0.5)))
    for move in rng.choice(26, size=10, replace=False):
        visit(root, int(move), int(rng.integers(1, 6)), float(rng.uniform(-1, 1)))
    g = gumbel_root(root, 32, seed=seed)
    g.refresh()
    q, _ = g.completed_q()
    qv = np.array([q[m] for m in range(26)])
    moves, probs = g.improved_policy()
    target = dense(moves, probs, 26)
    p = root.prior.astype(np.float64) / root.prior.sum()
    assert abs(target.sum() - 1.0) < 1e-9
    # The paper's policy improvement: the expected completed Q under the target is at least the
    # prior's, and strictly more when Q-values differ.
    assert target @ qv > p @ qv + 1e-6
    # The target moves mass towards the best move.
    best = int(np.argmax(qv))
    assert target[best] > p[best]


def test_larger_c_scale_trusts_q_more() -> None:
    prior = np.full(26, 1 / 26)
    root = hand_root(5, prior)
    visit(root, 3, 2, 0.8)
    visit(root, 9, 2, -0.8)
    shares = []
    for c_scale in (0.0, 0.01, 0.1, 1.0):
        g = GumbelRoot(
            root,
            8,
            considered=4,
            c_visit=50.0,
            c_scale=c_scale,
            noise_scale=0.0,
            rng=np.random.default_rng(0),
        )
        moves, probs = g.improved_policy()
        shares.append(dense(moves, probs, 26)[3])
    assert shares[0] == pytest.approx(1 / 26)
    assert shares == sorted(shares) and shares[-1] > 0.99


def test_considered_more_than_legal_moves() -> None:
    # A 2x2 board has 5 moves: m = 16 considers all of them and still spends the budget.
    root = hand_root(2, np.full(5, 0.2))
    g = gumbel_root(root, 12, considered=16)
    assert sorted(g.considered) == [0, 1, 2, 3, 4]
    picked = [g.select() for _ in range(12)]
    assert g.sims == 12 and len(set(picked)) == 5
    assert g.budget == 12


def test_gumbel_top_k_samples_by_the_prior() -> None:
    # With m = 1 the considered move is a sample from the prior (Gumbel-max).
    prior = np.array([0.5, 0.3, 0.15, 0.05, 0.0])
    root = hand_root(2, prior)
    picks = np.zeros(5)
    for seed in range(2000):
        g = gumbel_root(root, 4, considered=1, seed=seed)
        picks[g.considered[0]] += 1
    np.testing.assert_allclose(picks / picks.sum(), prior, atol=0.04)


async def test_python_search_spends_exactly_the_budget() -> None:
    config = SearchConfig(visits=24, leaves_per_batch=4, gumbel=True, gumbel_considered=8)
    stats = SearchStats()
    search = Search(HashEvaluator(), config, stats=stats, seed=1)
    board = Board(7, PRESETS["chinese"], 7.5)
    for _ in range(6):
        before = stats.visits
        root = await search.run(board)
        assert stats.visits - before == 24
        assert search.gumbel is not None and search.gumbel.sims == 24
        move = search.gumbel_move()
        moves, probs = search.gumbel_target()
        assert move in moves and abs(sum(probs) - 1) < 1e-9
        assert root.child_n[move] >= 1
        board.play(move)
        search.advance(move)


def gumbel_config(size: int, visits: int, lpb: int, **search: object) -> SelfPlayConfig:
    return SelfPlayConfig(
        search=SearchConfig(
            visits=visits, leaves_per_batch=lpb, gumbel=True, gumbel_scale=0.0, **search
        ),
        full_search_prob=1.0,
        noise_fraction=0.25,  # ignored by a Gumbel search
        forced_playouts_k=2.0,  # ignored too
        temperature_moves_19=0,
        max_game_moves=3 * size * size,
    )


CASES = [
    # size, preset, visits, leaves per batch, extra search settings
    (5, "chinese", 16, 4, {}),
    (7, "japanese", 20, 8, {"gumbel_considered": 4}),
    (6, "tromp-taylor", 12, 3, {"tree_reuse": False, "gumbel_considered": 8}),
    (5, "chinese", 24, 8, {"score_utility_factor": 0.5, "gumbel_c_scale": 0.1}),
    (4, "tromp-taylor", 10, 2, {"gumbel_considered": 32, "sensible_root_moves": False}),
    (9, "chinese", 8, 8, {"gumbel_considered": 16, "virtual_loss": 3.0}),
]


@needs_native
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[0]}-{c[1]}-{c[2]}")
async def test_native_game_same_as_python_exactly(case) -> None:
    size, preset, visits, lpb, extra = case
    config = gumbel_config(size, visits, lpb, **extra)
    rules = PRESETS[preset]
    ev = HashEvaluator()
    ref_stats, got_stats = SearchStats(), {}
    ref = (
        await play_selfplay_game(ev, GameSpec(size, rules, 7.5, config), seed=7, stats=ref_stats)
    ).record
    got = finished_record(
        await native_game(ev, size, rules, 7.5, config, seed=7, stats=got_stats), rules, 7.5, size
    )
    assert list(got.moves) == list(ref.moves)
    assert len(ref.moves) > 8
    # Every search spent exactly its budget of new simulations.
    assert ref_stats.visits == visits * ref_stats.searches
    assert got_stats["visits"] == ref_stats.visits and got_stats["searches"] == ref_stats.searches
    assert got_stats["root_visits"] == ref_stats.root_visits
    for i, (a, b) in enumerate(zip(got.targets, ref.targets, strict=True)):
        assert (a.visits, a.played_visits, list(a.policy_moves)) == (
            b.visits,
            b.played_visits,
            list(b.policy_moves),
        ), i
        assert list(a.policy_probs) == list(b.policy_probs), i
        assert (a.root_value, a.root_score) == (b.root_value, b.root_score), i
        if extra.get("tree_reuse") is False:
            assert a.visits == visits  # no reuse: the root has exactly the budget
    assert got.result == ref.result
    # The target is the improved policy, not the visit counts: it can name more moves than
    # there were visits (every sensible one with any probability).
    assert any(len(t.policy_moves) > visits for t in got.targets)


@needs_native
async def test_native_match_same_as_python_exactly() -> None:
    size = 7
    rules = PRESETS["chinese"]
    config = gumbel_config(size, 12, 4, gumbel_considered=6)
    black, white = HashEvaluator(), HashEvaluator(value_bias=0.4)
    ref = (await play_match_game(black, white, GameSpec(size, rules, 7.5, config), seed=5)).record
    got = finished_record(
        await native_match(
            HashEvaluator(), HashEvaluator(value_bias=0.4), size, rules, 7.5, config, seed=5
        ),
        rules,
        7.5,
        size,
    )
    assert list(got.moves) == list(ref.moves) and len(ref.moves) > 8
    for a, b in zip(got.targets, ref.targets, strict=True):
        assert list(a.policy_probs) == list(b.policy_probs)


class FlatEvaluator:
    """Value 0 everywhere (either player's view) and a fixed prior: every Q is the root's."""

    def __init__(self, prior: np.ndarray) -> None:
        self.prior = prior.astype(np.float32)

    async def evaluate(self, planes, globals_, *, model: str = "", want_ownership: bool = False):
        from kgrpc.evaluator import EvalResult

        b = planes.shape[0]
        return EvalResult(
            np.tile(self.prior, (b, 1)), np.zeros(b, np.float32), np.zeros(b, np.float32)
        )

    async def close(self) -> None:
        pass


@needs_native
async def test_native_uniform_q_target_is_the_prior() -> None:
    size = 5
    rng = np.random.default_rng(4)
    prior = rng.random(size * size + 1) + 0.1
    prior /= prior.sum()
    config = SelfPlayConfig(
        search=SearchConfig(
            visits=16,
            leaves_per_batch=4,
            gumbel=True,
            random_symmetry=False,
            sensible_root_moves=False,
        ),
        full_search_prob=1.0,
        max_game_moves=3,  # the leaves one move down are not scored positions
    )
    game = await native_game(FlatEvaluator(prior), size, PRESETS["chinese"], 7.5, config, seed=1)
    got = np.zeros(size * size + 1)
    first = slice(int(game["policy_offsets"][0]), int(game["policy_offsets"][1]))
    got[game["policy_moves"][first]] = game["policy_probs"][first]
    np.testing.assert_allclose(got, prior, atol=1e-6)
    assert game["visits"][0] == 16


async def _first_targets(python: bool, seeds: range, config: SelfPlayConfig, size: int):
    rules = PRESETS["chinese"]
    ev = HashEvaluator()
    total = np.zeros(size * size + 1)
    moves = np.zeros(size * size + 1)
    if python:
        for seed in seeds:
            rec = (
                await play_selfplay_game(ev, GameSpec(size, rules, 7.5, config), seed=seed)
            ).record
            t = rec.targets[0]
            total[list(t.policy_moves)] += list(t.policy_probs)
            moves[rec.moves[0]] += 1
    else:
        sp = NativeSelfPlay(ev, GameSpec(size, rules, 7.5, config), seed=seeds[0], threaded=False)
        for game in await sp.play(len(seeds), len(seeds)):
            t = game.record.targets[0]
            total[list(t.policy_moves)] += list(t.policy_probs)
            moves[game.record.moves[0]] += 1
    return total / len(seeds), moves / len(seeds)


@needs_native
async def test_gumbel_noise_agrees_statistically() -> None:
    size = 5
    config = SelfPlayConfig(
        search=SearchConfig(visits=8, leaves_per_batch=4, gumbel=True, gumbel_considered=4),
        full_search_prob=1.0,
        max_game_moves=1,
    )
    py_t, py_m = await _first_targets(True, range(300), config, size)
    nat_t, nat_m = await _first_targets(False, range(1000, 1300), config, size)
    quiet = replace_scale(config)
    q_t, q_m = await _first_targets(False, range(1), quiet, size)
    # The noisy searches play many different first moves, with the same spread (300 games
    # each: sampling alone leaves an L1 distance of about 0.45 between the move counts), far
    # from the one move of the noiseless search; their mean targets agree closely.
    assert (py_m > 0).sum() >= 8 and (nat_m > 0).sum() >= 8
    assert np.abs(py_m - nat_m).sum() < 0.7
    assert np.abs(py_m - q_m).sum() > 2 * np.abs(py_m - nat_m).sum()
    assert np.abs(py_t - nat_t).sum() < 0.2
    assert np.abs(py_t - q_t).sum() > 4 * np.abs(py_t - nat_t).sum()


def replace_scale(config: SelfPlayConfig) -> SelfPlayConfig:
    from dataclasses import replace

    return replace(config, search=replace(config.search, gumbel_scale=0.0))


def test_gumbel_settings_round_trip_from_the_coordinator() -> None:
    from kgrpc.coordinator.config import Config
    from kgrpc.coordinator.servicer import selfplay_settings
    from kgrpc.mcts.gameset import native_config
    from kgrpc.v1 import coordinator_pb2

    cfg = Config(gumbel=True, gumbel_considered=8, gumbel_c_visit=30.0, gumbel_c_scale=0.5)
    cfg.check()
    wire = coordinator_pb2.SelfPlaySettings.FromString(selfplay_settings(cfg).SerializeToString())
    got = SelfPlayConfig.from_settings(wire, visits=32)
    s = got.search
    assert (s.gumbel, s.gumbel_considered, s.gumbel_c_visit, s.gumbel_c_scale) == (
        True,
        8,
        30.0,
        0.5,
    )
    nat = native_config(got, 9)
    assert nat["gumbel"] is True and nat["gumbel_considered"] == 8
    # Off by default, and an older coordinator (nothing on the wire) means PUCT and defaults.
    assert not SelfPlayConfig.from_settings(selfplay_settings(Config()), visits=8).search.gumbel
    old = SelfPlayConfig.from_settings(coordinator_pb2.SelfPlaySettings(), visits=8).search
    assert (old.gumbel, old.gumbel_considered, old.gumbel_c_visit) == (False, 16, 50.0)
    with pytest.raises(ValueError, match="gumbel_considered"):
        Config(gumbel=True, gumbel_considered=0).check()


@needs_native
async def test_gumbel_games_are_valid_and_accepted(coordinator) -> None:
    from kgrpc.coordinator.testing import upload_request
    from kgrpc.records.replay import replay_python
    from kgrpc.records.terms import TaskTerms, move_cap
    from kgrpc.records.validate import validate_record
    from kgrpc.v1 import coordinator_pb2_grpc

    config = SelfPlayConfig(
        search=SearchConfig(visits=16, gumbel=True, gumbel_considered=8, score_utility_factor=0.5),
        cheap_visits=4,
        max_game_moves=move_cap(9),
    )
    task = TaskTerms("selfplay-gumbel", 9, "chinese", 7.5, 7.5, 1.0, move_cap(9), ("",))
    await coordinator.app.db(coordinator.app.tasks.store, task)
    spec = GameSpec(9, PRESETS["chinese"], 7.5, config, task_id=task.task_id)
    sp = NativeSelfPlay(HashEvaluator(), spec, seed=3)
    games = await sp.play(3, 3)
    for g in games:
        validate_record(g.record, task=task)
        replay_python(g.record)
        assert any(t.full_search for t in g.record.targets)
    async with coordinator.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        resp = await stub.UploadGames(iter([upload_request([g.record for g in games])]))
    assert resp.accepted == 3 and resp.rejected == 0, resp
