"""The C++ board against the Python reference (kgrpc.go.board.PyBoard), move by move.

Random games of every size 2..19 under every rules preset: the same legal moves, ko and
superko bans, captures, stones, hashes, liberties (through the feature planes), feature bytes,
eyes, scores and ownership (with and without dead stones), the same IllegalMoveError messages
for illegal tries, and the same random playouts draw for draw. Larger runs are marked slow.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kgrpc.go import features, symmetry
from kgrpc.go.board import BLACK, WHITE, IllegalMoveError, NativeBoard, PyBoard
from kgrpc.go.playout import random_move, random_playout
from kgrpc.go.rules import PRESETS, Rules
from kgrpc.schema import NUM_PLANES
from tests.native_helpers import needs_native

pytestmark = needs_native

SIZES = list(range(2, 20))
RULES = list(PRESETS.values()) + [Rules("territory", "situational", True)]


def pair(n: int, rules: Rules, komi: float = 7.5):
    return PyBoard(n, rules, komi), NativeBoard(n, rules, komi)


def same_state(py, nat, *, deep: bool) -> None:
    assert py.moves == nat.moves
    assert py.to_play == nat.to_play and py.ko_point == nat.ko_point
    assert py.captures == nat.captures
    assert py.consecutive_passes == nat.consecutive_passes
    assert py.is_over() == nat.is_over() and py.move_number == nat.move_number
    assert py.position_hash() == nat.position_hash()
    assert np.array_equal(py.stones, nat.stones)
    assert py.score() == nat.score()
    assert np.array_equal(py.area_ownership(), nat.area_ownership())
    if not deep:
        return
    nat.check_invariants()
    assert np.array_equal(py.legal_mask(), nat.legal_mask())
    assert py.legal_moves() == nat.legal_moves()
    assert py.ko_banned() == nat.ko_banned()
    p1, g1 = features.encode_flat(py)
    p2, g2 = features.encode_flat(nat)
    assert p1.dtype == p2.dtype == bool and g1.dtype == g2.dtype == np.float32
    assert np.array_equal(p1, p2) and np.array_equal(g1, g2)
    assert features.pack_planes(p1[None]).tobytes() == features.pack_planes(p2[None]).tobytes()
    for p in np.flatnonzero(py.stones).tolist()[:12]:
        assert py.group_liberties(p) == nat.group_liberties(p)
        assert py.group_stones(p) == nat.group_stones(p)  # same order, too
    for p in random.Random(py.move_number).sample(range(py.num_points), min(py.num_points, 24)):
        for colour in (BLACK, WHITE):
            assert py.is_own_eye(p, colour) == nat.is_own_eye(p, colour)


def try_illegal(py, nat, rng: random.Random) -> None:
    """Illegal tries (occupied, ko, suicide, superko, off-board): same answer, same message."""
    nn = py.num_points
    tries = [rng.randrange(-2, nn + 3) for _ in range(4)] + py.ko_banned()
    for m in tries:
        assert py.is_legal(m) == nat.is_legal(m), m
        if py.is_legal(m):
            continue
        with pytest.raises(IllegalMoveError) as e1:
            py.play(m)
        with pytest.raises(IllegalMoveError) as e2:
            nat.play(m)
        assert str(e1.value) == str(e2.value)


def play_game(n: int, rules: Rules, seed: int, *, deep_every: int) -> int:
    rng = random.Random(seed)
    komi = rng.choice([0.0, 0.5, 6.5, 7.5, -3.0])
    py, nat = pair(n, rules, komi)
    moves = 0
    while not py.is_over() and moves < 4 * n * n:
        deep = moves % deep_every == 0
        same_state(py, nat, deep=deep)
        if deep:
            try_illegal(py, nat, rng)
        # Mostly random legal non-eye moves; sometimes a pass, sometimes an eye fill.
        r = rng.random()
        if r < 0.03:
            m = py.pass_move
        elif r < 0.1:
            legal = py.legal_moves()
            m = legal[rng.randrange(len(legal))]
        else:
            m = random_move(py, rng)
        py.play(m)
        nat.play(m)
        moves += 1
    same_state(py, nat, deep=True)
    if py.stones.any():
        stones = np.flatnonzero(py.stones).tolist()
        dead = rng.sample(stones, min(len(stones), rng.randrange(1, 4)))
        assert py.score(dead) == nat.score(dead)
        assert np.array_equal(py.ownership(dead), nat.ownership(dead))
        with pytest.raises(ValueError, match="holds no stone") as e1:
            py.score(dead + dead[:1])
        with pytest.raises(ValueError) as e2:
            nat.score(dead + dead[:1])
        assert str(e1.value) == str(e2.value)
    return moves


@pytest.mark.slow
@pytest.mark.parametrize("rules", RULES, ids=str)
def test_random_games_every_size_move_by_move(rules: Rules) -> None:
    total = 0
    for n in SIZES:
        for seed in range(2 if n <= 9 else 1):
            total += play_game(n, rules, 1000 * n + seed, deep_every=1 if n <= 7 else 11)
    assert total > 1000


@pytest.mark.parametrize("rules", RULES, ids=str)
def test_playouts_identical_draw_for_draw(rules: Rules) -> None:
    """random_playout on both boards with equal Random states: the same games, to the end."""
    games = 0
    for n in SIZES:
        for seed in range(20 if n <= 9 else 3):
            r1, r2 = random.Random(seed), random.Random(seed)
            py, nat = pair(n, rules, 7.5)
            assert random_playout(py, r1) == random_playout(nat, r2)
            assert r1.getstate() == r2.getstate()
            same_state(py, nat, deep=False)
            nat.check_invariants()
            games += 1
    assert games > 150


def test_random_move_and_module_random() -> None:
    random.seed(5)
    py, nat = pair(9, PRESETS["chinese"])
    for _ in range(60):
        state = random.getstate()
        m1 = random_move(py)
        random.setstate(state)
        m2 = random_move(nat)
        assert m1 == m2
        py.play(m1)
        nat.play(m2)


def test_custom_random_uses_the_public_path() -> None:
    class Quirky(random.Random):
        def random(self) -> float:  # a Random with its own random(): no in-place draws
            return super().random() ** 2

    r1, r2 = Quirky(3), Quirky(3)
    py, nat = pair(7, PRESETS["tromp-taylor"])
    random_playout(py, r1)
    random_playout(nat, r2)
    assert py.is_over() and nat.is_over()
    nat.check_invariants()


def test_set_stones_errors_and_positions() -> None:
    rng = random.Random(11)
    for n in (2, 3, 5, 9, 19):
        for trial in range(40):
            nn = n * n
            pts = rng.sample(range(nn), rng.randrange(0, nn))
            cut = rng.randrange(len(pts) + 1)
            black, white = pts[:cut], pts[cut:]
            if trial % 7 == 0:
                white = white + black[:1]  # named twice
            if trial % 11 == 0:
                black = black + [nn + trial]  # off the board
            to_play = rng.choice([BLACK, WHITE])
            py, nat = pair(n, rng.choice(RULES))
            try:
                py.set_stones(black, white, to_play)
            except ValueError as exc:
                with pytest.raises(ValueError) as e2:
                    nat.set_stones(black, white, to_play)
                assert str(exc) == str(e2.value)
                continue
            nat.set_stones(black, white, to_play)
            same_state(py, nat, deep=True)
            m = random_move(py, random.Random(trial))
            py.play(m)
            nat.play(m)
            same_state(py, nat, deep=True)


def test_api_details_match() -> None:
    py, nat = pair(5, PRESETS["aga"], 6.5)
    for b in (py, nat):
        assert (b.size, b.num_points, b.pass_move, b.komi) == (5, 25, 25, 6.5)
        assert b.rules is PRESETS["aga"] and b.max_moves is None
    assert str(py) == str(nat)
    c = nat.copy()
    c.play(12)
    assert nat.move_number == 0 and c.move_number == 1
    nat.set_to_play(WHITE)
    py.set_to_play(WHITE)
    assert nat.to_play == py.to_play == WHITE
    assert NativeBoard(9).rules == PRESETS["chinese"]
    nat.captures[BLACK] = 4
    assert nat.captures == {BLACK: 4, WHITE: 0} and dict(nat.captures) == {1: 4, -1: 0}
    assert nat.copy().captures[BLACK] == 4 and str(nat.captures) == "{1: 4, -1: 0}"
    with pytest.raises(KeyError):
        nat.captures[0]
    capped = NativeBoard(3, max_moves=2)
    capped.play(0)
    capped.play(1)
    assert capped.is_over() and not capped.is_legal(9)
    with pytest.raises(IllegalMoveError, match="move cap reached"):
        capped.play(9)
    with pytest.raises(ValueError, match="out of range"):
        NativeBoard(20)
    with pytest.raises(TypeError, match="rules must be a Rules"):
        NativeBoard(9, "chinese")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a sensible number"):
        NativeBoard(9, komi=float("nan"))
    assert NativeBoard(np.int64(9)).size == 9
    with pytest.raises(ValueError, match="no stone"):
        nat.group_liberties(3)


def test_symmetry_maps_and_symmetric_encoding() -> None:
    from kgrpc.native import ext

    for n in SIZES:
        src, dst = ext.symmetry_maps(n)
        grid = np.arange(n * n).reshape(n, n)
        for s in range(8):
            assert np.array_equal(src[s], symmetry.apply_planes(grid, s).ravel())
            for p in range(n * n + 1):
                assert dst[s][p] == symmetry.apply_move(p, s, n)
    py, nat = pair(7, PRESETS["tromp-taylor"])
    random_playout(py, random.Random(2), max_moves=30)
    for m in py.moves:
        nat.play(m)
    planes, _ = features.encode(py)
    for s in range(8):
        got, _ = ext.encode_flat(nat, s)
        assert np.array_equal(got.reshape(NUM_PLANES, 7, 7), symmetry.apply_planes(planes, s))


@pytest.mark.slow
def test_go_suites_pass_on_pure_python_too(tmp_path: Path) -> None:
    """The fast rules/feature/record tests with KGRPC_NATIVE=0 (the reference still works)."""
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, KGRPC_NATIVE="0")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-x",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            "tests/test_go_rules.py",
            "tests/test_go_features.py",
            "tests/test_records.py",
            "tests/test_records_reasons.py",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("rules", RULES, ids=str)
def test_many_random_games_every_size(rules: Rules) -> None:
    # 20 games a small board, 4 a large one, every size and preset (about 10 s a preset on
    # 2 cores): the sweep make test can afford; the move-by-move tests above check every
    # position of fewer games, and the GNU Go oracle long games of 9x9 and 19x19.
    for n in SIZES:
        for seed in range(20 if n <= 9 else 4):
            play_game(n, rules, 7000 + 100 * n + seed, deep_every=1 if n <= 7 else 5)


def test_writable_properties_take_what_the_python_board_takes() -> None:
    # kgrpc-eval's referee lifts the move cap of a board copy with None.
    for cls in (PyBoard, NativeBoard):
        b = cls(9, max_moves=12)
        b.max_moves = None
        rng = random.Random(0)
        for _ in range(20):
            b.play(random_move(b, rng))
        assert b.max_moves is None and len(b.moves) == 20, cls
        b.max_moves = 5
        assert b.max_moves == 5 and b.is_over(), cls
