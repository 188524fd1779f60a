"""kgrpc.shards: write/load round trip, plain numpy.load, atomicity, bad input."""

import numpy as np
import pytest

from kgrpc import shards
from kgrpc.schema import NUM_GLOBALS, packed_row_bytes


def rows(n: int, r: int, games: int = 2) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    policy = rng.random((r, n * n + 1)).astype(np.float32)
    policy /= policy.sum(axis=1, keepdims=True)
    return {
        "states": rng.integers(0, 256, (r, packed_row_bytes(n)), dtype=np.uint8),
        "globals": rng.random((r, NUM_GLOBALS)).astype(np.float32),
        "policy": policy,
        "value": rng.choice([-1.0, 1.0], r).astype(np.float32),
        "score": rng.normal(size=r).astype(np.float32),
        "ownership": rng.integers(-1, 2, (r, n * n), dtype=np.int8),
        "move_number": np.arange(r, dtype=np.int32),
        "game_index": (np.arange(r) % games).astype(np.int32),
        "root_value": rng.random(r).astype(np.float32),
    }


def test_round_trip_with_plain_numpy(tmp_path) -> None:
    data = rows(9, 12)
    path = tmp_path / "games_00001.npz"
    size = shards.write_shard(
        path, data, board_size=9, komi=7.5, rules="chinese", game_ids=["a" * 36, "b"]
    )
    assert size == path.stat().st_size
    z = np.load(path)  # plain numpy, no pickle
    assert z["states"].dtype == np.uint8 and z["states"].shape == (12, packed_row_bytes(9))
    assert z["policy"].shape == (12, 82)
    assert z["ownership"].dtype == np.int8
    assert int(z["board_size"]) == 9 and float(z["komi"]) == 7.5 and str(z["rules"]) == "chinese"
    assert int(z["format_version"]) == 1
    assert list(z["game_ids"]) == ["a" * 36, "b"]
    loaded = shards.load_shard(path)
    for k, v in data.items():
        np.testing.assert_array_equal(loaded[k], v)
    assert not [p for p in tmp_path.iterdir() if p.name != "games_00001.npz"]  # no temp left


def test_bad_rows_are_refused(tmp_path) -> None:
    data = rows(9, 4)
    data["policy"] = data["policy"][:, :10]
    with pytest.raises(shards.ShardFormatError, match="policy"):
        shards.write_shard(
            tmp_path / "x.npz", data, board_size=9, komi=7.5, rules="chinese", game_ids=["a", "b"]
        )
    data = rows(9, 4)
    with pytest.raises(shards.ShardFormatError, match="game_index"):
        shards.write_shard(
            tmp_path / "x.npz", data, board_size=9, komi=7.5, rules="chinese", game_ids=["a"]
        )
    del data["value"]
    with pytest.raises(shards.ShardFormatError, match="missing"):
        shards.write_shard(
            tmp_path / "x.npz", data, board_size=9, komi=7.5, rules="chinese", game_ids=["a", "b"]
        )
    assert not list(tmp_path.iterdir())


def test_overwrite_is_atomic_and_truncated_file_is_refused(tmp_path) -> None:
    path = tmp_path / "latest_games.npz"
    shards.write_shard(
        path, rows(9, 4), board_size=9, komi=7.5, rules="chinese", game_ids=["a", "b"]
    )
    shards.write_shard(
        path, rows(9, 6), board_size=9, komi=7.5, rules="chinese", game_ids=["a", "b"]
    )
    assert len(shards.load_shard(path)["value"]) == 6
    blob = path.read_bytes()
    bad = tmp_path / "bad.npz"
    bad.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(shards.ShardFormatError):
        shards.load_shard(bad)


def test_window_streams_the_newest_rows_of_several_shards(tmp_path) -> None:
    """write_window equals concatenating the sources, dropping the oldest rows beyond the
    window and renumbering the games still used; the result is a shard like any other."""
    sources, parts, ids = [], [], []
    for i, (r, games) in enumerate([(10, 3), (7, 2), (12, 4)]):
        data = rows(9, r, games)
        data["move_number"] += 100 * i  # tells the sources apart
        names = [f"g{i}-{j}" for j in range(games)]
        path = tmp_path / f"games_{i:05d}.npz"
        shards.write_shard(path, data, board_size=9, komi=7.5, rules="chinese", game_ids=names)
        data = {k: v.copy() for k, v in data.items()}
        data["game_index"] = data["game_index"] + len(ids)
        sources.append(path)
        parts.append(data)
        ids.extend(names)
    merged = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    out = tmp_path / "latest_games.npz"
    for wanted in (25, 29, 100, 5):
        n = shards.write_window(out, sources, wanted, board_size=9, komi=7.5, rules="japanese")
        expect = {k: v[-min(wanted, 29) :] for k, v in merged.items()}
        used = np.unique(expect["game_index"])
        assert n == len(expect["value"])
        got = shards.load_shard(out)
        assert list(got["game_ids"]) == [ids[i] for i in used]
        np.testing.assert_array_equal(
            got["game_index"], np.searchsorted(used, expect["game_index"])
        )
        for k in shards.ROW_KEYS:
            if k != "game_index":
                np.testing.assert_array_equal(got[k], expect[k], err_msg=k)
        assert str(got["rules"]) == "japanese" and int(got["board_size"]) == 9
        assert np.load(out)["policy"].shape == (n, 82)  # plain numpy reads it
    assert shards.write_window(out, sources, 0, board_size=9, komi=7.5, rules="chinese") == 0
    with pytest.raises(shards.ShardFormatError, match="board size"):
        shards.write_window(out, sources, 10, board_size=13, komi=7.5, rules="chinese")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left
    assert len(shards.load_shard(out)["value"]) == 5  # the refused call left the file alone


def test_shard_streamed_from_games_equals_the_merged_shard(tmp_path) -> None:
    games = [rows(9, r, 1) for r in (5, 1, 8)]
    for g in games:
        del g["game_index"]  # numbered by the writer
    games[1]["policy"] = games[1]["policy"].astype(np.float64)  # cast to the schema's dtype
    ids = ["a", "b" * 36, "c"]
    path = tmp_path / "games_00002.npz"
    n = shards.write_shard_games(path, games, board_size=9, komi=6.5, rules="aga", game_ids=ids)
    assert n == 14
    got = shards.load_shard(path)
    merged = {k: np.concatenate([g[k] for g in games]) for k in games[0]}
    merged["game_index"] = np.repeat(np.arange(3, dtype=np.int32), [5, 1, 8])
    for k in shards.ROW_KEYS:
        assert got[k].dtype == shards.ROW_KEYS[k][0], k
        np.testing.assert_array_equal(got[k], merged[k].astype(got[k].dtype), err_msg=k)
    assert list(got["game_ids"]) == ids
    assert str(got["rules"]) == "aga" and float(got["komi"]) == 6.5
    assert np.load(path)["states"].shape == (14, packed_row_bytes(9))  # plain numpy reads it
    bad = [dict(games[0]), games[1]]
    bad[0]["ownership"] = bad[0]["ownership"][:, :5]
    with pytest.raises(shards.ShardFormatError, match=r"game 0 \(a\): ownership"):
        shards.write_shard_games(
            tmp_path / "bad.npz", bad, board_size=9, komi=6.5, rules="aga", game_ids=ids[:2]
        )
    assert not (tmp_path / "bad.npz").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left
