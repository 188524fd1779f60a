"""KataGo's search techniques (issue 14): forced playouts with policy target pruning, score in
the utility, raw-policy openings, and cheap searches without noise; in the Python reference
search and in the native game set, each checked against its formula on an evaluator built to
make the answer known, against each other, and through the coordinator's validation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kgrpc import native
from kgrpc.coordinator.config import Config
from kgrpc.coordinator.servicer import selfplay_settings
from kgrpc.evaluator import EvalResult
from kgrpc.go.board import Board
from kgrpc.go.rules import CHINESE
from kgrpc.mcts.config import SearchConfig, SelfPlayConfig
from kgrpc.mcts.gameset import NativeSelfPlay, finished_record, native_config
from kgrpc.mcts.search import Search, best_move, pruned_visits
from kgrpc.mcts.selfplay import GameSpec, play_selfplay_game
from kgrpc.records.replay import replay_python
from kgrpc.records.rows import training_rows
from kgrpc.records.terms import move_cap
from kgrpc.records.validate import validate_record
from kgrpc.v1 import coordinator_pb2
from tests.native_helpers import needs_native
from tests.test_native_search import HashEvaluator, native_game

SIZE = 5
C0 = 12  # the centre point: black wins (or scores) exactly when black holds it
C1 = 6  # the move the net's prior likes best


def _black_holds_c0(planes: np.ndarray, globals_: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mover is black, black has a stone on C0) per row (planes 1/2: own/opponent stones;
    globals 0: komi from the mover's side, negative for black)."""
    flat = planes.reshape(planes.shape[0], planes.shape[1], -1)
    black = globals_[:, 0] < 0
    own, opp = flat[:, 1, C0], flat[:, 2, C0]
    return black, np.where(black, own, opp)


class C0Evaluator:
    """Value: black wins exactly when black holds C0 (as the leaf's mover sees it); uniform
    policy; score 0. At an empty board, C0 is the one good move and every other child is
    visited only when the search has to (first-play urgency, forced playouts)."""

    async def evaluate(self, planes, globals_, *, model: str = "", want_ownership: bool = False):
        b = planes.shape[0]
        nn = planes.shape[2] * planes.shape[3]
        black, holds = _black_holds_c0(planes, globals_)
        value_black = np.where(holds, 1.0, -1.0)
        value = np.where(black, value_black, -value_black).astype(np.float32)
        policy = np.full((b, nn + 1), 1.0 / (nn + 1), np.float32)
        return EvalResult(policy, value, np.zeros(b, np.float32))

    async def close(self) -> None:
        pass


class ScoreOnlyEvaluator:
    """Value 0 everywhere (a tie); black leads by 10 points exactly when black holds C0; the
    prior prefers C1 (0.3) over every other move."""

    async def evaluate(self, planes, globals_, *, model: str = "", want_ownership: bool = False):
        b = planes.shape[0]
        nn = planes.shape[2] * planes.shape[3]
        black, holds = _black_holds_c0(planes, globals_)
        score_black = np.where(holds, 10.0, 0.0)
        score = np.where(black, score_black, -score_black).astype(np.float32)
        policy = np.full((b, nn + 1), 0.7 / nn, np.float32)
        policy[:, C1] = 0.3
        return EvalResult(policy, np.zeros(b, np.float32), score)

    async def close(self) -> None:
        pass


VISITS = 190
# Noise replacing the whole root prior, with an alpha so large that it is uniform: the forced
# playouts' prior is then 1 / (legal root moves) for every child, to within 1e-5.
UNIFORM_NOISE = dict(full_search_prob=1.0, noise_fraction=1.0, dirichlet_alpha_19=1e8)


def _forced_config(k: float, prune: bool) -> SelfPlayConfig:
    return SelfPlayConfig(
        search=SearchConfig(visits=VISITS, leaves_per_batch=1, random_symmetry=False),
        temperature_moves_19=0,
        forced_playouts_k=k,
        prune_policy_target=prune,
        max_game_moves=SIZE * SIZE,  # no terminal nodes near the first root
        **UNIFORM_NOISE,
    )


async def _root_visits(impl: str, config: SelfPlayConfig) -> tuple[np.ndarray, int, int]:
    """(visits of each move at the first root (the recorded target's counts with pruning off),
    the move played, its played_visits) for the first move of self-play at an empty 5x5
    board."""
    nn = SIZE * SIZE
    if impl == "python":
        search = Search(C0Evaluator(), config.search, seed=3)
        forced_k = config.forced_playouts_k
        root = await search.run(
            Board(SIZE), VISITS, noise=(config.dirichlet_alpha_19, 1.0), forced_k=forced_k
        )
        np.testing.assert_allclose(root.prior[root.legal], 1 / 25, rtol=1e-3)
        n = root.visits().astype(np.float64)
        if config.prune_policy_target and forced_k > 0:
            n = pruned_visits(root, config.search.c_puct, forced_k, search.utility)
        move = best_move(root)
        return n, move, int(root.visits()[move])
    f = await native_game(C0Evaluator(), SIZE, CHINESE, 7.5, config, seed=3)
    rec = finished_record(f, CHINESE, 7.5, SIZE)
    t = rec.targets[0]
    n = np.zeros(nn + 1)
    n[list(t.policy_moves)] = np.array(t.policy_probs) * t.visits
    return np.round(n, 6), rec.moves[0], t.played_visits


IMPLS = ["python", pytest.param("native", marks=needs_native)]


@pytest.mark.parametrize("impl", IMPLS)
async def test_forced_playouts_give_the_formulas_visits(impl: str) -> None:
    n, move, _ = await _root_visits(impl, _forced_config(2.0, prune=False))
    assert move == C0 and n.sum() == VISITS
    others = [m for m in np.flatnonzero(n) if m != C0]
    assert len(others) >= 3
    # Each other child was reached once (first-play urgency), then topped up to its forced
    # playouts sqrt(k * P * N) with P = 1/25, and never beyond: ceil(sqrt(0.08 * N)) as N
    # grew to 190, allowing one visit of lag per other child waiting its turn.
    low = math.ceil(math.sqrt(2 / 25 * (VISITS - 25)))
    high = math.ceil(math.sqrt(2 / 25 * VISITS))
    assert low == high == 4
    assert all(n[m] == 4 for m in others), n[others]
    # Without forcing, the same children get the one visit the first-play urgency gives.
    plain, move, _ = await _root_visits(impl, _forced_config(0.0, prune=False))
    assert move == C0 and all(plain[m] <= 1 for m in np.flatnonzero(plain) if m != C0)


@pytest.mark.parametrize("impl", IMPLS)
async def test_pruning_takes_the_forced_visits_back(impl: str) -> None:
    raw, _, _ = await _root_visits(impl, _forced_config(2.0, prune=False))
    kept, move, played = await _root_visits(impl, _forced_config(2.0, prune=True))
    # Every other child's visits were forced (its value -1 never earned one): all go, and the
    # target is the best move alone; the played move's own visits are still recorded.
    assert move == C0
    assert np.flatnonzero(kept).tolist() == [C0]
    assert played == raw[C0] > 0
    assert raw.sum() == VISITS and raw[C0] < VISITS


def test_pruning_keeps_the_visits_puct_would_have_given() -> None:
    # A root with two children of equal value: the second one's visits were earned (its PUCT
    # value matches the best's), so pruning leaves it alone; a third with a bad value and a
    # single forced top-up loses it.
    from kgrpc.mcts.tree import Node

    root = Node(Board(SIZE))
    prior = np.zeros(26, np.float32)
    prior[[0, 1, 2]] = [0.5, 0.4, 0.1]
    root.expand(prior, 0.0, 0.0, legal=np.ones(26, bool))
    root.child_n[[0, 1, 2]] = [50, 40, 3]
    root.child_w[[0, 1, 2]] = [10, 8, -3]
    root.n_total = 93.0
    kept = pruned_visits(root, 1.1, 2.0)
    assert kept[0] == 50 and kept[1] == 40
    assert kept[2] == 0  # sqrt(2 * 0.1 * 93) = 4.3 forced: 3 - 4.3 <= 1, pruned


@pytest.mark.parametrize("impl", IMPLS)
async def test_score_utility_breaks_a_value_tie_by_score(impl: str) -> None:
    async def choice(factor: float) -> int:
        search = SearchConfig(
            visits=200, leaves_per_batch=1, random_symmetry=False, score_utility_factor=factor
        )
        if impl == "python":
            root = await Search(ScoreOnlyEvaluator(), search, seed=1).run(Board(SIZE))
            return best_move(root)
        config = SelfPlayConfig(
            search=search,
            full_search_prob=1.0,
            noise_fraction=0.0,
            temperature_moves_19=0,
            max_game_moves=SIZE * SIZE,  # no terminal nodes near the first root
        )
        f = await native_game(ScoreOnlyEvaluator(), SIZE, CHINESE, 7.5, config, seed=1)
        return int(f["moves"][0])

    assert await choice(0.0) == C1  # values tie: the visits follow the prior
    assert await choice(0.5) == C0  # the move that leads by 10 points


SCORE_CASES = [
    # size, preset komi, visits, leaves per batch, extra search settings
    (5, 7.5, 24, 4, {"score_utility_factor": 0.5}),
    (7, 6.5, 20, 8, {"score_utility_factor": 1.0, "score_utility_scale": 3.0}),
    (6, 0.5, 16, 3, {"score_utility_factor": 0.3, "tree_reuse": False}),
]


@needs_native
@pytest.mark.parametrize("case", SCORE_CASES, ids=lambda c: f"{c[0]}x{c[0]}")
async def test_score_utility_native_plays_the_python_game_exactly(case) -> None:
    size, komi, visits, lpb, extra = case
    config = SelfPlayConfig(
        search=SearchConfig(visits=visits, leaves_per_batch=lpb, **extra),
        full_search_prob=1.0,
        noise_fraction=0.0,
        temperature_moves_19=0,
        max_game_moves=3 * size * size,
    )
    ev = HashEvaluator()
    ref = (await play_selfplay_game(ev, GameSpec(size, CHINESE, komi, config), seed=7)).record
    got = finished_record(
        await native_game(ev, size, CHINESE, komi, config, seed=7), CHINESE, komi, size
    )
    plain = SelfPlayConfig(
        search=SearchConfig(visits=visits, leaves_per_batch=lpb),
        full_search_prob=1.0,
        noise_fraction=0.0,
        temperature_moves_19=0,
        max_game_moves=3 * size * size,
    )
    without = (await play_selfplay_game(ev, GameSpec(size, CHINESE, komi, plain), seed=7)).record
    assert list(got.moves) == list(ref.moves)
    assert len(ref.moves) > 8
    for i, (a, b) in enumerate(zip(got.targets, ref.targets, strict=True)):
        assert (a.visits, list(a.policy_moves), list(a.policy_probs)) == (
            b.visits,
            list(b.policy_moves),
            list(b.policy_probs),
        ), i
        assert (a.root_value, a.root_score) == (b.root_value, b.root_score), i
    assert got.result == ref.result
    # ...and the utility did change the search.
    assert [list(t.policy_probs) for t in without.targets] != [
        list(t.policy_probs) for t in ref.targets
    ]


async def _games(impl: str, config: SelfPlayConfig, count: int, size: int = 7) -> list:
    if impl == "python":
        return [
            (
                await play_selfplay_game(
                    HashEvaluator(), GameSpec(size, CHINESE, 7.5, config), seed=s
                )
            ).record
            for s in range(count)
        ]
    sp = NativeSelfPlay(
        HashEvaluator(), GameSpec(size, CHINESE, 7.5, config), seed=11, threaded=False
    )
    return [g.record for g in await sp.play(count, count)]


def _all_on(**kw) -> SelfPlayConfig:
    base = dict(
        search=SearchConfig(visits=24, leaves_per_batch=4, score_utility_factor=0.5),
        full_search_prob=0.5,
        cheap_visits=6,
        temperature_moves_19=200,
        forced_playouts_k=2.0,
        opening_policy_prob=0.5,
        opening_moves_19=40.0,
        max_game_moves=move_cap(7),
    )
    base.update(kw)
    return SelfPlayConfig(**base)


@pytest.mark.parametrize("impl", IMPLS)
async def test_games_with_every_technique_are_valid(impl: str, coordinator) -> None:
    from kgrpc.coordinator.testing import upload_request
    from kgrpc.v1 import coordinator_pb2_grpc

    games = await _games(impl, _all_on(), 6)
    openings = 0
    full = []
    for rec in games:
        validate_record(rec)  # the native replay when it is in use
        replay_python(rec)
        if native.ENABLED:
            assert native.ext.replay(rec.SerializeToString())["reason"] == ""
        for i, t in enumerate(rec.targets):
            if t.full_search:
                assert 0 < t.played_visits <= t.visits
                assert abs(sum(t.policy_probs) - 1) < 1e-6  # float32 on the wire
                full.append(t)
            elif t.visits == 0:  # a raw-policy opening move, before any search
                assert list(t.policy_moves) == [rec.moves[i]] and list(t.policy_probs) == [1.0]
                assert all(u.visits == 0 for u in rec.targets[:i])
                openings += 1
    assert openings > 0 and len(full) > 20
    # Pruned: a move kept has more than one visit, so more than 1 / visits of the target (a
    # move of one visit, unpruned, has exactly that; one whose value alone beats the best
    # child's PUCT keeps its visit, which is rare).
    assert _pruned_share(full) > 0.95
    await coordinator.store_tasks_for(games)  # the games name an issued task
    async with coordinator.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        resp = await stub.UploadGames(iter([upload_request(games)]))
    assert resp.accepted == len(games) and resp.rejected == 0


def _pruned_share(targets: list) -> float:
    return sum(min(t.policy_probs) * t.visits > 1 + 1e-6 for t in targets) / len(targets)


@needs_native
async def test_pruned_targets_agree_between_python_and_native() -> None:
    # Unpruned full searches often leave moves of one visit (the control of the check above);
    # pruned ones are far sparser, by the same amount in both searches.
    lengths = {}
    for impl in ("python", "native"):
        for k in (2.0, 0.0):
            games = await _games(impl, _all_on(forced_playouts_k=k, opening_policy_prob=0.0), 5)
            full = [t for rec in games for t in rec.targets if t.full_search]
            assert len(full) > 40
            if k == 0.0:
                assert _pruned_share(full) < 0.5
            lengths[impl, k] = np.mean([len(t.policy_moves) for t in full])
    assert abs(lengths["python", 2.0] - lengths["native", 2.0]) < 0.6
    assert abs(lengths["python", 0.0] - lengths["native", 0.0]) < 0.6
    assert lengths["python", 2.0] < lengths["python", 0.0] - 1.2
    assert lengths["native", 2.0] < lengths["native", 0.0] - 1.2


@pytest.mark.parametrize("impl", IMPLS)
async def test_openings_come_from_the_raw_policy(impl: str) -> None:
    class Prefers0(HashEvaluator):
        async def evaluate(self, planes, globals_, **kw):  # type: ignore[no-untyped-def]
            r = await super().evaluate(planes, globals_, **kw)
            r.policy[:] = 0.02 / (r.policy.shape[1] - 1)
            r.policy[:, 0] = 0.98
            return r

    config = _all_on(
        opening_policy_prob=1.0, opening_moves_19=30.0, opening_temperature=1.0, max_game_moves=6
    )
    if impl == "python":
        games = [
            (await play_selfplay_game(Prefers0(), GameSpec(7, CHINESE, 7.5, config), seed=s)).record
            for s in range(30)
        ]
    else:
        sp = NativeSelfPlay(Prefers0(), GameSpec(7, CHINESE, 7.5, config), seed=5, threaded=False)
        games = [g.record for g in await sp.play(30, 30)]
    lengths = [sum(1 for t in rec.targets if t.visits == 0) for rec in games]
    # Exponential with mean 30 * 49 / 361 = 4.07 moves (truncated to whole moves, capped at 6).
    assert 1.5 < np.mean(lengths) < 4.5
    first = [rec.moves[0] for rec, k in zip(games, lengths, strict=True) if k > 0]
    # Point 0 under the random symmetry of the evaluation: a corner.
    assert sum(m in (0, 6, 42, 48) for m in first) >= 0.8 * len(first)


@pytest.mark.parametrize("impl", IMPLS)
async def test_cheap_searches_use_no_noise_and_make_no_rows(impl: str) -> None:
    cheap = dict(full_search_prob=0.0, cheap_visits=8, temperature_moves_19=0, max_game_moves=30)
    noisy = _all_on(opening_policy_prob=0.0, **cheap)
    quiet = _all_on(opening_policy_prob=0.0, noise_fraction=0.0, forced_playouts_k=0.0, **cheap)
    a = (await _games(impl, noisy, 1))[0]
    b = (await _games(impl, quiet, 1))[0]
    # Noise (and forced playouts) would change the searches; cheap ones are exactly as quiet.
    assert list(a.moves) == list(b.moves)
    assert [list(t.policy_probs) for t in a.targets] == [list(t.policy_probs) for t in b.targets]
    assert not any(t.full_search for t in a.targets)
    assert len(training_rows(a)["policy"]) == 0


def test_settings_round_trip_through_selfplay_settings() -> None:
    cfg = Config(
        forced_playouts_k=1.5,
        score_utility_factor=0.25,
        opening_policy_prob=0.125,
        opening_moves_19=8.0,
        opening_temperature=2.0,
        full_search_prob=0.375,
        cheap_visits=32,
    )
    wire = coordinator_pb2.SelfPlaySettings.FromString(selfplay_settings(cfg).SerializeToString())
    got = SelfPlayConfig.from_settings(wire, visits=200)
    assert got.forced_playouts_k == 1.5
    assert got.search.score_utility_factor == 0.25
    assert (got.opening_policy_prob, got.opening_moves_19, got.opening_temperature) == (
        0.125,
        8.0,
        2.0,
    )
    assert (got.full_search_prob, got.cheap_visits, got.search.visits) == (0.375, 32, 200)
    nat = native_config(got, 9)
    assert nat["forced_playouts_k"] == 1.5 and nat["score_utility_factor"] == 0.25
    assert nat["score_utility_scale"] == 9.0 and nat["opening_moves"] == 8.0 * 81 / 361
    # 0 is "off" on the wire and is kept; an older coordinator that sends nothing means off.
    off = SelfPlayConfig.from_settings(
        selfplay_settings(Config(forced_playouts_k=0.0, score_utility_factor=0.0)), visits=50
    )
    assert off.forced_playouts_k == 0.0 and off.search.score_utility_factor == 0.0
    old = SelfPlayConfig.from_settings(coordinator_pb2.SelfPlaySettings(), visits=50)
    assert old.forced_playouts_k == 0.0 and old.opening_policy_prob == 0.0
    assert old.search.score_utility_factor == 0.0
    # The coordinator's defaults hand out KataGo's forced playouts and score utility.
    default = SelfPlayConfig.from_settings(selfplay_settings(Config()), visits=50)
    assert default.forced_playouts_k == 2.0 and default.search.score_utility_factor == 0.5


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"forced_playouts_k": -1.0}, "forced_playouts_k"),
        ({"opening_policy_prob": 1.5}, "opening_policy_prob"),
        ({"opening_temperature": 0.0}, "opening_temperature"),
        ({"score_utility_factor": -0.1}, "score_utility_factor"),
    ],
)
def test_bad_settings_are_refused_by_name(kwargs, name) -> None:
    with pytest.raises(ValueError, match=name):
        Config(**kwargs).check()
    with pytest.raises(ValueError, match=name):
        if name == "score_utility_factor":
            SearchConfig(**kwargs)
        else:
            SelfPlayConfig(**kwargs)


@needs_native
def test_native_refuses_bad_settings() -> None:
    for key, value in (("forced_playouts_k", -1.0), ("opening_temperature", 0.0)):
        config = dict(native_config(SelfPlayConfig(), 9), **{key: value})
        with pytest.raises(ValueError, match=key):
            native.ext.GameSet(9, CHINESE, 7.5, config)
