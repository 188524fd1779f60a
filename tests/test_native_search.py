"""The native game set against the Python search (kgrpc.mcts), and its records.

With the same symmetry draws, an evaluator that answers each input the same way, and no
randomness of the game's own (every move a full search without noise, greedy moves), the native
engine must play exactly the Python game: same moves, same visit counts, same targets to the
last bit, including tree reuse, sensible root moves, terminal nodes and resignation. With noise
and temperature the two agree statistically. Native games pass the coordinator's validation and
are accepted by a running coordinator; the evaluation cache changes nothing but the work.
"""

from __future__ import annotations

import asyncio
import zlib

import numpy as np
import pytest

from kgrpc import native
from kgrpc.evaluator import EvalResult
from kgrpc.go.rules import PRESETS
from kgrpc.mcts.config import SearchConfig, SelfPlayConfig
from kgrpc.mcts.gameset import NativeSelfPlay, finished_record, native_config, new_cache
from kgrpc.mcts.search import SearchStats
from kgrpc.mcts.selfplay import GameSpec, play_match_game, play_selfplay_game
from kgrpc.records.replay import replay_python
from kgrpc.records.terms import move_cap
from kgrpc.records.validate import validate_record
from kgrpc.schema import NUM_GLOBALS, NUM_PLANES
from tests.native_helpers import needs_native

pytestmark = needs_native


class HashEvaluator:
    """A deterministic stand-in for a net: outputs are a hash of each input position."""

    def __init__(self, value_bias: float = 0.0) -> None:
        self.evals = 0
        self.requests = 0
        self.value_bias = value_bias

    async def evaluate(self, planes, globals_, *, model: str = "", want_ownership: bool = False):
        b, _, n, _ = planes.shape
        nn = n * n
        policy = np.empty((b, nn + 1), np.float32)
        value = np.empty(b, np.float32)
        score = np.empty(b, np.float32)
        for i in range(b):
            seed = zlib.crc32(np.packbits(planes[i]).tobytes() + globals_[i].tobytes())
            rng = np.random.default_rng(seed)
            p = rng.random(nn + 1) ** 3
            policy[i] = p / p.sum()
            # The bias favours one colour (globals[0] is the komi from the mover's side).
            value[i] = np.clip(
                rng.uniform(-0.6, 0.6) + self.value_bias * np.sign(globals_[i][0]), -1, 1
            )
            score[i] = rng.normal() * 4
        self.evals += b
        self.requests += 1
        return EvalResult(policy, value, score)

    async def close(self) -> None:
        pass


def python_search_seed(seed: int) -> int:
    # play_selfplay_game seeds its Search (and so its symmetry draws) like this.
    return int(np.random.default_rng(seed).integers(1 << 62))


async def native_game(ev, size, rules, komi, config, seed, cache=None, stats=None) -> dict:
    """The native game of ``seed``; ``stats`` (a dict), when given, receives the set's counters."""
    ext = native.ext
    gs = ext.GameSet(size, rules, komi, native_config(config, size), cache)
    gs.add_game(123, python_search_seed(seed))
    planes = np.zeros((64, NUM_PLANES, size, size), bool)
    glob = np.zeros((64, NUM_GLOBALS), np.float32)
    for _ in range(100_000):
        rows = gs.collect(planes, glob)
        if rows:
            r = await ev.evaluate(planes[:rows], glob[:rows])
            out = gs.apply(r.policy, r.value, r.score)
        else:
            out = gs.apply(
                np.zeros((0, size * size + 1), np.float32),
                np.zeros(0, np.float32),
                np.zeros(0, np.float32),
            )
        if out:
            if stats is not None:
                stats.update(gs.stats)
            return out[0]
    raise AssertionError("the native game did not finish")


CASES = [
    # size, preset, komi, visits, leaves per batch, extra settings
    (5, "chinese", 7.5, 24, 4, {}),
    (7, "japanese", 6.5, 20, 8, {}),
    (6, "tromp-taylor", 0.5, 16, 3, {"tree_reuse": False}),
    (5, "aga", 7.5, 12, 8, {"sensible_root_moves": False, "random_symmetry": False}),
    (9, "chinese", 7.5, 16, 8, {"virtual_loss": 3.0, "c_puct": 1.7}),
    (4, "tromp-taylor", 2.0, 10, 2, {"fpu_reduction": 0.0, "root_fpu_reduction": 0.5}),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[0]}-{c[1]}")
async def test_same_game_as_python_exactly(case) -> None:
    size, preset, komi, visits, lpb, extra = case
    search = SearchConfig(visits=visits, leaves_per_batch=lpb, **extra)
    config = SelfPlayConfig(
        search=search,
        full_search_prob=1.0,
        noise_fraction=0.0,
        temperature_moves_19=0,
        max_game_moves=3 * size * size,
    )
    rules = PRESETS[preset]
    ev = HashEvaluator()
    ref_stats, got_stats = SearchStats(), {}
    ref = (
        await play_selfplay_game(ev, GameSpec(size, rules, komi, config), seed=7, stats=ref_stats)
    ).record
    got = finished_record(
        await native_game(ev, size, rules, komi, config, seed=7, stats=got_stats),
        rules,
        komi,
        size,
    )
    assert list(got.moves) == list(ref.moves)
    # Long enough to be a game, not a resignation at once; no more exact than that: the hash
    # evaluator's answers, and so each game, change with the input encoding.
    assert len(ref.moves) >= 4
    # Root visits: what each search ended with (its target's visits); reused: what it began
    # with, nothing without tree reuse.
    assert ref_stats.root_visits == sum(t.visits for t in ref.targets)
    assert (got_stats["root_visits"], got_stats["reused_visits"]) == (
        ref_stats.root_visits,
        ref_stats.reused_visits,
    )
    if search.tree_reuse:
        assert 0 < ref_stats.reused_visits < ref_stats.root_visits
    else:
        assert ref_stats.reused_visits == 0
    for i, (a, b) in enumerate(zip(got.targets, ref.targets, strict=True)):
        assert (a.visits, list(a.policy_moves)) == (b.visits, list(b.policy_moves)), i
        assert list(a.policy_probs) == list(b.policy_probs), i
        assert (a.root_value, a.root_score, a.full_search) == (
            b.root_value,
            b.root_score,
            b.full_search,
        ), i
    assert got.result == ref.result


async def test_cheap_searches_and_resignation_exactly() -> None:
    rules = PRESETS["chinese"]
    search = SearchConfig(visits=16, leaves_per_batch=4)
    config = SelfPlayConfig(
        search=search,
        full_search_prob=0.0,
        cheap_visits=6,
        noise_fraction=0.0,
        temperature_moves_19=0,
        resign_threshold=0.3,
        resign_consecutive=2,
        resign_playout_fraction=0.0,
        max_game_moves=120,
    )
    resigned = 0
    for seed in range(4):
        ev = HashEvaluator(value_bias=0.5)
        ref_stats, got_stats = SearchStats(), {}
        ref = (
            await play_selfplay_game(
                ev, GameSpec(7, rules, 7.5, config), seed=seed, stats=ref_stats
            )
        ).record
        got = finished_record(
            await native_game(ev, 7, rules, 7.5, config, seed, stats=got_stats), rules, 7.5, 7
        )
        assert list(got.moves) == list(ref.moves)
        assert [t.visits for t in got.targets] == [t.visits for t in ref.targets]
        assert got.result == ref.result
        # A resigning search counts as finished in both, though its target is not recorded.
        assert (got_stats["root_visits"], got_stats["reused_visits"]) == (
            ref_stats.root_visits,
            ref_stats.reused_visits,
        )
        resigned += ref.result.resigned
    assert resigned >= 1


async def _first_moves(play_python: bool, seeds: range, config, size: int) -> np.ndarray:
    """Mean root visit distribution of the first search (noise on) over many games."""
    rules = PRESETS["chinese"]
    ev = HashEvaluator()
    nn = size * size
    total = np.zeros(nn + 1)
    if play_python:
        for seed in seeds:
            rec = (
                await play_selfplay_game(ev, GameSpec(size, rules, 7.5, config), seed=seed)
            ).record
            t = rec.targets[0]
            total[list(t.policy_moves)] += list(t.policy_probs)
        return total / len(seeds)
    sp = NativeSelfPlay(ev, GameSpec(size, rules, 7.5, config), seed=seeds[0], threaded=False)
    for game in await sp.play(len(seeds), len(seeds)):
        t = game.record.targets[0]
        total[list(t.policy_moves)] += list(t.policy_probs)
    return total / len(seeds)


async def test_noise_and_temperature_agree_statistically() -> None:
    size = 5
    config = SelfPlayConfig(
        search=SearchConfig(visits=48, leaves_per_batch=8),
        full_search_prob=1.0,
        noise_fraction=0.25,
        dirichlet_alpha_19=0.15,
        temperature_moves_19=400,
        max_game_moves=1,
    )
    py = await _first_moves(True, range(60), config, size)
    nat = await _first_moves(False, range(1000, 1060), config, size)
    quiet = await _first_moves(
        False,
        range(1),
        config.__class__(
            search=config.search, full_search_prob=1.0, noise_fraction=0.0, max_game_moves=1
        ),
        size,
    )
    # Both spread the visits the same way: far closer to each other than to the noiseless
    # search (same net, no noise).
    assert np.abs(py - nat).sum() < 0.25
    assert np.abs(py - quiet).sum() > 1.5 * np.abs(py - nat).sum()


async def test_native_games_are_valid_and_accepted(coordinator) -> None:
    from kgrpc.coordinator.testing import upload_request
    from kgrpc.records.terms import TaskTerms
    from kgrpc.v1 import coordinator_pb2_grpc

    # A game not ended by passes or resignation stops at the coordinator's cap (as a task sets).
    config = SelfPlayConfig(
        search=SearchConfig(visits=16), cheap_visits=4, max_game_moves=move_cap(9)
    )
    # Games of one set, each with its own komi (a task's komi range), for a stored task.
    task = TaskTerms("selfplay-native", 9, "chinese", 6.5, 8.5, 1.0, move_cap(9), ("",))
    await coordinator.app.db(coordinator.app.tasks.store, task)
    spec = GameSpec(9, PRESETS["chinese"], 7.5, config, task_id=task.task_id)
    sp = NativeSelfPlay(HashEvaluator(), spec, seed=3)
    wanted = {}
    for komi in (6.5, 8.5, 7.5, 6.5):
        (gid,) = sp.add_games(1, komi)
        wanted[gid] = komi
    games = []
    while len(games) < 4:
        games.extend(await sp.step_ids())
    assert sp.stats.visits > 0 and sp.stats.nn_evals > 0
    assert {gid: g.record.komi for gid, g in games} == wanted
    for _, g in games:
        rec = g.record
        assert len(rec.moves) >= 11
        validate_record(rec, task=task)
        replay_python(rec)
    async with coordinator.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        resp = await stub.UploadGames(iter([upload_request([g.record for _, g in games])]))
    assert resp.accepted == 4 and resp.rejected == 0, resp


def _cache_test_config(random_symmetry: bool) -> SelfPlayConfig:
    """Short 7x7 games whose only randomness is the symmetry draws."""
    return SelfPlayConfig(
        search=SearchConfig(visits=32, leaves_per_batch=4, random_symmetry=random_symmetry),
        full_search_prob=1.0,
        noise_fraction=0.0,
        temperature_moves_19=0,
        max_game_moves=40,
    )


async def test_evaluation_cache_changes_nothing_but_the_work() -> None:
    size = 7
    rules = PRESETS["chinese"]
    config = _cache_test_config(random_symmetry=False)
    plain = await native_game(HashEvaluator(), size, rules, 7.5, config, seed=5)
    cache = new_cache(10_000)
    ev = HashEvaluator()
    first = await native_game(ev, size, rules, 7.5, config, seed=5, cache=cache)
    evals_first = ev.evals
    again = await native_game(ev, size, rules, 7.5, config, seed=5, cache=cache)
    for game in (first, again):
        assert game["moves"].tolist() == plain["moves"].tolist()
        assert game["policy_probs"].tolist() == plain["policy_probs"].tolist()
    assert ev.evals == evals_first  # the second game came entirely from the cache
    assert cache.hits > 0 and len(cache) <= 10_000
    small = new_cache(50)
    await native_game(HashEvaluator(), size, rules, 7.5, config, seed=5, cache=small)
    assert len(small) == 50


async def test_cached_positions_keep_their_symmetry() -> None:
    """With random symmetries a cache-using set takes a position's symmetry from the position
    and the salt: a repeated position hits whatever the game's symmetry seed, and a cache of
    any size plays the same games."""
    size = 7
    rules = PRESETS["chinese"]
    config = _cache_test_config(random_symmetry=True)
    # Without a cache the symmetry seed changes the game (HashEvaluator answers each
    # symmetric input differently), so the hits below are not a game that repeats anyway.
    a = await native_game(HashEvaluator(), size, rules, 7.5, config, seed=5)
    b = await native_game(HashEvaluator(), size, rules, 7.5, config, seed=6)
    assert a["policy_probs"].tolist() != b["policy_probs"].tolist()

    cache = new_cache(10_000, salt=11)
    assert cache.salt == 11
    ev = HashEvaluator()
    first = await native_game(ev, size, rules, 7.5, config, seed=5, cache=cache)
    evals_first, hits_first = ev.evals, cache.hits
    again = await native_game(ev, size, rules, 7.5, config, seed=6, cache=cache)
    assert again["moves"].tolist() == first["moves"].tolist()
    assert again["policy_probs"].tolist() == first["policy_probs"].tolist()
    assert ev.evals == evals_first and cache.hits > hits_first

    small = new_cache(50, salt=11)
    tight = await native_game(HashEvaluator(), size, rules, 7.5, config, seed=5, cache=small)
    assert tight["policy_probs"].tolist() == first["policy_probs"].tolist()
    assert len(small) == 50
    # Another salt, other symmetries: the salt, not a constant, picks them.
    other = await native_game(
        HashEvaluator(), size, rules, 7.5, config, seed=5, cache=new_cache(10_000, salt=12)
    )
    assert other["policy_probs"].tolist() != first["policy_probs"].tolist()
    assert new_cache(10).salt != new_cache(10).salt  # drawn when not given


async def test_game_set_guards() -> None:
    ext = native.ext
    config = native_config(SelfPlayConfig(search=SearchConfig(visits=8, leaves_per_batch=8)), 9)
    gs = ext.GameSet(9, PRESETS["chinese"], 7.5, config)
    with pytest.raises(ValueError, match="unknown game set setting"):
        ext.GameSet(9, PRESETS["chinese"], 7.5, {"visitz": 3})
    gs.add_game(1)
    with pytest.raises(ValueError, match="leaves_per_batch"):
        gs.collect(np.zeros((4, NUM_PLANES, 9, 9), bool), np.zeros((4, NUM_GLOBALS), np.float32))
    planes, glob = np.zeros((16, NUM_PLANES, 9, 9), bool), np.zeros((16, NUM_GLOBALS), np.float32)
    rows = gs.collect(planes, glob)
    assert rows == 1 and gs.pending_rows == 1  # the root first
    with pytest.raises(RuntimeError, match="before apply"):
        gs.collect(planes, glob)
    with pytest.raises(ValueError, match="one answer per row"):
        gs.apply(np.zeros((2, 82), np.float32), np.zeros(2, np.float32), np.zeros(2, np.float32))
    nan = np.full((1, 82), np.nan, np.float32)
    gs.apply(nan, np.array([np.nan], np.float32), np.array([np.inf], np.float32))
    assert gs.collect(planes, glob) == 8  # a NaN net output reads as "no idea", uniform prior
    asyncio.get_running_loop()


async def native_match(black, white, size, rules, komi, config, seed) -> dict:
    """One match game on a two-model game set, seeded like play_match_game(seed=seed)."""
    rng = np.random.default_rng(seed)
    sym_black, sym_white = int(rng.integers(1 << 62)), int(rng.integers(1 << 62))
    gs = native.ext.GameSet(size, rules, komi, native_config(config, size, match=True))
    gs.add_game(123, sym_black, sym_white)
    planes = np.zeros((64, NUM_PLANES, size, size), bool)
    glob = np.zeros((64, NUM_GLOBALS), np.float32)
    sides = np.full(64, -1, np.int8)
    nn = size * size
    for _ in range(100_000):
        rows = gs.collect(planes, glob, sides)
        policy = np.zeros((rows, nn + 1), np.float32)
        value = np.zeros(rows, np.float32)
        score = np.zeros(rows, np.float32)
        for side, ev in ((0, black), (1, white)):
            idx = np.flatnonzero(sides[:rows] == side)
            if idx.size:
                r = await ev.evaluate(planes[idx], glob[idx])
                policy[idx], value[idx], score[idx] = r.policy, r.value, r.score
        assert set(sides[:rows].tolist()) <= {0, 1}
        out = gs.apply(policy, value, score)
        if out:
            return out[0]
    raise AssertionError("the native match game did not finish")


@pytest.mark.parametrize("reuse", [True, False])
async def test_match_game_same_as_python_exactly(reuse: bool) -> None:
    # Two models that differ (the second one's values lean to one colour): every row must go
    # to the model of the player whose tree it grows, or the games part.
    size = 7
    rules = PRESETS["chinese"]
    config = SelfPlayConfig(
        search=SearchConfig(visits=20, leaves_per_batch=4, tree_reuse=reuse),
        temperature_moves_19=0,
        max_game_moves=3 * size * size,
    )
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
    assert list(got.moves) == list(ref.moves) and len(ref.moves) >= 4  # as above
    for i, (a, b) in enumerate(zip(got.targets, ref.targets, strict=True)):
        assert (a.visits, list(a.policy_moves), list(a.policy_probs)) == (
            b.visits,
            list(b.policy_moves),
            list(b.policy_probs),
        ), i
        assert (a.root_value, a.root_score, a.full_search) == (b.root_value, b.root_score, True)
    assert got.result == ref.result
    # The same game with the models swapped is another game: the routing matters.
    swapped = await native_match(white, black, size, rules, 7.5, config, seed=5)
    assert swapped["moves"].tolist() != list(ref.moves)


async def test_native_match_records_name_both_models_and_are_valid() -> None:
    from kgrpc.mcts.gameset import NativeMatch

    config = SelfPlayConfig(
        search=SearchConfig(visits=12),
        forced_playouts_k=2.0,  # self-play only: a match plays without noise or forcing
        max_game_moves=move_cap(7),
    )
    black, white = HashEvaluator(), HashEvaluator(value_bias=0.4)
    spec = GameSpec(7, PRESETS["chinese"], 7.5, config, model_name="kg-b", white_name="kg-w")
    match = NativeMatch(black, white, spec, seed=4, threaded=False)
    games = await match.play(4, 4)
    assert black.evals > 0 and white.evals > 0
    assert match.stats.nn_requests >= 2 and match.stats.visits > 0
    for g in games:
        rec = g.record
        assert (rec.black_model, rec.white_model) == ("kg-b", "kg-w")
        assert all(t.full_search and t.played_visits > 0 for t in rec.targets)
        validate_record(rec)
    with pytest.raises(ValueError, match="two_models"):
        native.ext.GameSet(
            7, PRESETS["chinese"], 7.5, native_config(config, 7, match=True), new_cache(10)
        )
