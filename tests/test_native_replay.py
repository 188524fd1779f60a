"""The native record replay against the Python reference: same verdicts, same rows.

Random legal games of every size 2..19 under every preset, valid and corrupted in many ways
(illegal and off-board moves, moves after the end, malformed policies, bad values, wrong
results and ownership, resignations, bad komi/size/rules). ``kgrpc_native.replay`` must give
the reason code the Python replay raises, and for valid records the same board, score,
ownership, feature bytes and training rows.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from kgrpc import native
from kgrpc.randgame import make_random_game
from kgrpc.records.errors import REASON_CODES, ReplayError
from kgrpc.records.replay import proto_to_board_replay, replay_native, replay_python
from kgrpc.records.rows import training_rows
from kgrpc.records.validate import validate_record
from kgrpc.v1 import common_pb2, records_pb2
from tests.native_helpers import needs_native

pytestmark = needs_native

PRESET_NAMES = ["chinese", "japanese", "tromp-taylor", "aga"]


def python_verdict(rec: records_pb2.GameRecord, check: bool = True):
    try:
        return "", replay_python(rec, collect_features=True, check_targets=check)
    except ReplayError as exc:
        return exc.reason_code, None


def compare(rec: records_pb2.GameRecord, check: bool = True) -> str:
    code, ref = python_verdict(rec, check)
    out = native.ext.replay(rec.SerializeToString(), True, check)
    assert out["reason"] == code, (code, out)
    if code:
        with pytest.raises(ReplayError) as exc:  # the dispatching entry point too
            proto_to_board_replay(rec, check_targets=check)
        assert exc.value.reason_code == code
        return code
    got = replay_native(rec, check_targets=check)
    assert got.board.moves == ref.board.moves
    assert got.board.position_hash() == ref.board.position_hash()
    assert got.score == ref.score and got.winner == ref.winner
    assert got.resigned == ref.resigned and got.rules == ref.rules
    assert np.array_equal(got.ownership, ref.ownership)
    assert got.row_moves == ref.row_moves
    assert got.states.tobytes() == ref.states.tobytes()
    assert got.globals.tobytes() == ref.globals.tobytes()
    assert got.movers.tobytes() == ref.movers.tobytes()
    rows_ref = training_rows(rec, ref)
    rows_got = training_rows(rec, got)
    assert rows_ref.keys() == rows_got.keys()
    for key in rows_ref:
        assert rows_ref[key].dtype == rows_got[key].dtype, key
        assert rows_ref[key].tobytes() == rows_got[key].tobytes(), key
    return code


def corruptions(rec: records_pb2.GameRecord, rng: random.Random):
    """(name, corrupted copy) pairs; each copy is a fresh record."""
    n = rec.board_size
    nn = n * n
    moves = len(rec.moves)

    def copy() -> records_pb2.GameRecord:
        c = records_pb2.GameRecord()
        c.CopyFrom(rec)
        return c

    i = rng.randrange(moves)
    c = copy()
    c.moves[i] = rng.randrange(nn)  # often occupied or illegal, sometimes just another game
    yield "random_point", c
    c = copy()
    c.moves[i] = rng.choice([-1, nn + 1, 10**6])
    yield "off_board", c
    c = copy()
    c.moves.extend([nn, nn, 0])
    c.targets.extend([c.targets[-1]] * 3)
    yield "after_end", c
    c = copy()
    del c.targets[-1]
    yield "targets_mismatch", c
    t = rec.targets[i]
    for name, edit in [
        ("sum", lambda t: t.policy_probs.__setitem__(0, t.policy_probs[0] + 0.5)),
        ("negative", lambda t: t.policy_probs.__setitem__(0, -0.1)),
        ("nan", lambda t: t.policy_probs.__setitem__(0, math.nan)),
        ("empty", lambda t: (t.ClearField("policy_moves"), t.ClearField("policy_probs"))),
        ("lengths", lambda t: t.policy_moves.append(nn)),
        (
            "duplicate",
            lambda t: (t.policy_moves.append(t.policy_moves[0]), t.policy_probs.append(0.0)),
        ),
        ("range", lambda t: t.policy_moves.__setitem__(0, nn + 1)),
        ("illegal", lambda t: t.policy_moves.__setitem__(0, rng.randrange(nn))),
        ("value", lambda t: setattr(t, "root_value", rng.choice([1.5, math.nan, -2.0]))),
        ("score", lambda t: setattr(t, "root_score", math.inf)),
        ("played_visits", lambda t: setattr(t, "played_visits", rng.choice([-1, t.visits + 1]))),
    ]:
        c = copy()
        edit(c.targets[i])
        yield "policy_" + name, c
    del t
    c = copy()
    c.result.winner = rng.choice(
        [common_pb2.COLOR_BLACK, common_pb2.COLOR_WHITE, common_pb2.COLOR_UNSPECIFIED, 7]
    )
    yield "winner", c
    c = copy()
    c.result.score += rng.choice([0.5, 1.0, 1e-4, math.nan])
    yield "score", c
    c = copy()
    c.result.ownership[rng.randrange(nn)] = rng.choice([-1, 0, 1])
    yield "ownership_point", c
    c = copy()
    del c.result.ownership[-1]
    yield "ownership_short", c
    c = copy()
    c.result.resigned = True
    c.result.winner = rng.choice(
        [common_pb2.COLOR_BLACK, common_pb2.COLOR_WHITE, common_pb2.COLOR_UNSPECIFIED]
    )
    c.result.score = rng.choice([1.5, -1.5, 0.0, nn + 10.0, math.inf])
    if rng.random() < 0.3:
        c.result.ownership[0] = 2
    if rng.random() < 0.3:
        c.result.ClearField("ownership")
    yield "resigned", c
    full = [j for j, t in enumerate(rec.targets) if t.full_search]
    if full:  # the played move without visits: format 2 says so, older ones by the policy
        c = copy()
        j = rng.choice(full)
        c.format_version = rng.choice([0, 1, 2])
        t = c.targets[j]
        t.played_visits = 0
        probs = [
            0.0 if m == c.moves[j] else p
            for m, p in zip(t.policy_moves, t.policy_probs, strict=True)
        ]
        rest = sum(probs)
        if rest > 0:
            t.ClearField("policy_probs")
            t.policy_probs.extend([p / rest for p in probs])
        yield "played_unvisited", c
    c = copy()
    c.result.resigned = True
    c.moves.extend([c.board_size**2] * 2)  # two passes, then "resigned"
    c.targets.extend([c.targets[-1]] * 2)
    yield "resigned_after_passes", c
    c = copy()
    c.komi = rng.choice([math.nan, math.inf, nn + 1.0, -(nn + 1.0), 0.5])
    yield "komi", c
    c = copy()
    c.board_size = rng.choice([0, 1, 20, 25])
    yield "size", c
    c = copy()
    c.rules.ko = rng.choice([0, 4])
    yield "rules", c


@pytest.mark.slow
def test_valid_games_every_size_and_preset() -> None:
    count = 0
    for n in range(2, 20):
        for name in PRESET_NAMES:
            for seed in range(3 if n <= 9 else 1):
                komi = random.Random(seed).choice([0.5, 7.5, 6.0]) if n > 2 else 0.5
                rec = make_random_game(
                    n,
                    name,
                    komi=komi,
                    seed=seed,
                    full_search_prob=0.5,
                    max_moves=min(2 * n * n, 200),
                )
                assert compare(rec) == ""
                if n <= 9:
                    assert compare(rec, check=False) == ""
                count += 1
    assert count > 130


@pytest.mark.slow
def test_corrupted_records_same_verdicts() -> None:
    rng = random.Random(4)
    codes: set[str] = set()
    for n in (2, 3, 5, 7, 9, 13, 19):
        for name in PRESET_NAMES:
            # Capped at 120 moves: the long-game corruptions are the slow test's job.
            cap = min(2 * n * n, 120)
            rec = make_random_game(n, name, seed=n, full_search_prob=0.3, max_moves=cap)
            if len(rec.moves) < 2:
                continue
            for _, bad in corruptions(rec, rng):
                codes.add(compare(bad))
    # Decided by validate_record around the replay, not by the replay itself:
    outside = {
        "too_short",
        "too_long",
        "unfinished",
        "task_mismatch",
        "unknown_task",
        "field_too_long",
    }
    assert set(REASON_CODES) - outside <= codes, codes


def test_validate_record_dispatch_and_repeated_fields() -> None:
    rec = make_random_game(9, "chinese", seed=3)
    res = validate_record(rec)
    assert res.policy is not None and res.root_values is not None
    assert validate_record(rec, collect_features=False).states is None
    # Unpacked encodings of packed fields and unknown fields parse as protobuf does.
    data = rec.SerializeToString()
    extra = bytes([0xA8, 0x06, 0x05])  # field 101 varint 5: unknown, skipped
    out = native.ext.replay(data + extra, True, True)
    assert out["reason"] == ""
    with pytest.raises(ValueError, match="malformed"):
        native.ext.replay(data[:-1] + bytes([0xFF]), True, True)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_many_games_and_corruptions() -> None:
    # 18 sizes x 4 presets x 2 games, each valid and in 7 of its ~25 corrupted copies (drawn
    # at random; every kind is still replayed dozens of times across sizes and presets):
    # ~1,150 records, about 90 s on 2 cores. Games stop at 240 moves (full length up to
    # 10x10): the Python replay of 722-move 19x19 games made this test take 10 minutes on 2
    # cores, and every corruption of every game 6 minutes; the GNU Go oracle tests check long
    # games of both boards move by move.
    rng = random.Random(9)
    kinds_seen: set[str] = set()
    kinds_all: set[str] = set()
    for n in range(2, 20):
        for name in PRESET_NAMES:
            for seed in range(2):
                cap = min(2 * n * n, 240)
                rec = make_random_game(
                    n, name, seed=100 + seed, full_search_prob=0.5, max_moves=cap
                )
                compare(rec)
                if len(rec.moves) >= 2:
                    bad = list(corruptions(rec, rng))
                    kinds_all.update(kind for kind, _ in bad)
                    for kind, copy in rng.sample(bad, min(7, len(bad))):
                        kinds_seen.add(kind)
                        compare(copy)
    assert kinds_seen == kinds_all  # the draw left no kind of corruption out
