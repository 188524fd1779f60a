"""Input features (docs/formats.md section 2), their packed form, and the 8 symmetries."""

from __future__ import annotations

import random

import numpy as np
import pytest

from kgrpc.go.board import BLACK, WHITE, Board
from kgrpc.go.coords import from_gtp
from kgrpc.go.features import (
    NUM_GLOBALS,
    NUM_PLANES,
    encode,
    pack_planes,
    packed_row_bytes,
    unpack_planes,
)
from kgrpc.go.playout import random_playout
from kgrpc.go.rules import PRESETS, Rules
from kgrpc.go.symmetry import (
    NUM_SYMMETRIES,
    apply_move,
    apply_ownership,
    apply_planes,
    apply_policy,
    inverse,
)


def at(planes: np.ndarray, plane: int, gtp: str, size: int) -> bool:
    p = from_gtp(gtp, size)
    return bool(planes[plane].reshape(-1)[p])


def points(planes: np.ndarray, plane: int, size: int) -> set[int]:
    return set(np.flatnonzero(planes[plane].reshape(-1)).tolist())


def test_planes_on_a_hand_made_position():
    n = 5
    b = Board(n, komi=7.5)
    v = lambda s: from_gtp(s, n)  # noqa: E731
    # Black C3, white C4, black B4, white D3, black pass, white B3 ... build a ko-free shape.
    for m in ("C3", "C4", "B4", "D3", "pass", "B3"):
        b.play(v(m) if m != "pass" else b.pass_move)
    # Black to move. Black: C3 (libs C2 only? C3 neighbours C4 W, B3 W, D3 W, C2 -> 1 lib),
    # B4 (libs A4, B5 -> 2). White: C4 (C5, D4 -> 2), D3 (D4, E3, D2 -> 3), B3 (A3, B2 -> 2).
    planes, glob = encode(b)
    assert planes.shape == (NUM_PLANES, n, n) and planes.dtype == bool
    assert glob.shape == (NUM_GLOBALS,) and glob.dtype == np.float32
    assert planes[0].all()
    assert points(planes, 1, n) == {v("C3"), v("B4")}
    assert points(planes, 2, n) == {v("C4"), v("D3"), v("B3")}
    assert points(planes, 3, n) == {v("C3")}
    assert points(planes, 4, n) == {v("B4")}
    assert points(planes, 5, n) == set()
    assert points(planes, 6, n) == set()
    assert points(planes, 7, n) == {v("C4"), v("B3")}
    assert points(planes, 8, n) == {v("D3")}
    assert points(planes, 9, n) == set()
    assert points(planes, 10, n) == {v("B3")}
    assert points(planes, 11, n) == set()  # black's pass
    assert points(planes, 12, n) == {v("D3")}
    assert points(planes, 13, n) == {v("B4")}
    assert points(planes, 14, n) == {v("C4")}
    # Black to move: komi is black's debt; no pass last, a pass two moves ago.
    assert glob.tolist() == pytest.approx([-0.375, 0, 0, 0, 0, 0, 1, 5 / 19])

    # White's view after black passes: colours swap, komi flips sign.
    b.play(b.pass_move)
    planes_w, glob_w = encode(b)
    assert points(planes_w, 1, n) == {v("C4"), v("D3"), v("B3")}
    assert points(planes_w, 6, n) == {v("C3")}
    assert glob_w[0] == pytest.approx(0.375) and glob_w[5] == 1 and glob_w[6] == 0


def test_ko_plane_and_rule_globals():
    b = Board(5, PRESETS["tromp-taylor"])
    b.set_stones(
        black=[from_gtp(s, 5) for s in ("B5", "A4", "B3")],
        white=[from_gtp(s, 5) for s in ("C5", "B4", "D4", "C3")],
    )
    b.play(from_gtp("C4", 5))  # black takes B4
    planes, glob = encode(b)
    # B4 is the ko; white A5 would be a single-stone suicide (legal under tromp-taylor) that
    # leaves the board unchanged, so positional superko bans it too.
    assert points(planes, 9, 5) == {from_gtp("B4", 5), from_gtp("A5", 5)}
    assert glob[1:5].tolist() == [0, 1, 0, 1]
    j = Board(9, PRESETS["japanese"])
    assert encode(j)[1][1:5].tolist() == [1, 0, 0, 0]
    s = Board(9, Rules("area", "situational", False))
    assert encode(s)[1][1:5].tolist() == [0, 0, 1, 0]


@pytest.mark.parametrize("size", [2, 5, 9, 19])
def test_pack_unpack_round_trip(size):
    rng = np.random.default_rng(size)
    planes = rng.random((7, NUM_PLANES, size, size)) < 0.5
    packed = pack_planes(planes)
    assert packed.dtype == np.uint8 and packed.shape == (7, packed_row_bytes(size))
    assert packed_row_bytes(size) == -(-NUM_PLANES * size * size // 8)
    assert np.array_equal(unpack_planes(packed, 7, size), planes)
    assert np.array_equal(unpack_planes(packed.tobytes(), 7, size), planes)
    # Same bits as the documented numpy call.
    assert np.array_equal(packed, np.packbits(planes.reshape(7, -1), axis=1))
    with pytest.raises(ValueError, match="bytes"):
        unpack_planes(packed.tobytes()[:-1], 7, size)
    with pytest.raises(ValueError, match="uint8"):
        unpack_planes(packed[:3], 7, size)


def _random_game(size: int, rng: random.Random, length: int) -> list[int]:
    b = Board(size)
    random_playout(b, rng, max_moves=length)
    return b.moves


def test_symmetry_inverse_and_group_properties():
    n = 7
    x = np.arange(3 * n * n).reshape(3, n, n)
    pol = np.arange(n * n + 1, dtype=np.float32)
    seen = set()
    for s in range(NUM_SYMMETRIES):
        y = apply_planes(x, s)
        seen.add(y.tobytes())
        assert np.array_equal(apply_planes(y, inverse(s)), x)
        assert np.array_equal(apply_policy(apply_policy(pol, s, n), inverse(s), n), pol)
        assert apply_policy(pol, s, n)[-1] == pol[-1]
        for p in (0, 3, 24, n * n):
            assert apply_move(apply_move(p, s, n), inverse(s), n) == p
    assert len(seen) == 8
    assert np.array_equal(apply_planes(x, 0), x)
    assert np.array_equal(apply_planes(x, 1), np.rot90(x, 1, axes=(1, 2)))
    assert np.array_equal(apply_planes(x, 4), np.swapaxes(x, 1, 2))
    with pytest.raises(ValueError):
        apply_planes(x, 8)


@pytest.mark.parametrize("size", [5, 9])
def test_transform_then_play_equals_play_then_transform(size):
    rng = random.Random(100 + size)
    for _ in range(3):
        moves = _random_game(size, rng, rng.randrange(10, 3 * size * size))
        original = Board(size)
        for m in moves:
            original.play(m)
        planes, glob = encode(original)
        mask = original.legal_mask().astype(np.float32)
        own = original.area_ownership()
        for s in range(NUM_SYMMETRIES):
            t = Board(size)
            for m in moves:
                t.play(apply_move(m, s, size))
            t.check_invariants()
            tp, tg = encode(t)
            assert np.array_equal(tp, apply_planes(planes, s))
            assert np.array_equal(tg, glob)
            assert np.array_equal(t.legal_mask().astype(np.float32), apply_policy(mask, s, size))
            assert np.array_equal(t.area_ownership(), apply_ownership(own, s, size))
            assert t.score() == original.score()
            assert np.array_equal(t.stones, apply_ownership(original.stones, s, size))


def test_encode_is_consistent_with_board_state_over_random_games():
    rng = random.Random(5)
    for size in (9, 13):
        b = Board(size)
        while not b.is_over() and b.move_number < 200:
            planes, _ = encode(b)
            flat = planes.reshape(NUM_PLANES, -1)
            stones = b.stones
            me, opp = b.to_play, -b.to_play
            assert np.array_equal(flat[1], stones == me)
            assert np.array_equal(flat[2], stones == opp)
            for p in np.flatnonzero(stones).tolist():
                libs = min(b.group_liberties(p), 3)
                base = 3 if stones[p] == me else 6
                assert flat[base + libs - 1, p]
                assert flat[3:9, p].sum() == 1
            assert not flat[3:9, stones == 0].any()
            mask = b.legal_mask()
            b.play(rng.choice([m for m in np.flatnonzero(mask).tolist()]))
    assert BLACK == 1 and WHITE == -1
