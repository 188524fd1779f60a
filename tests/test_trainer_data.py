"""Shard discovery, the game window, symmetry augmentation and the background loader."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kgrpc.programs.bench.train import write_synthetic_run, write_synthetic_shard
from kgrpc.schema import NUM_PLANES
from trainer.augment import apply_symmetries, symmetry_permutations
from trainer.batches import batch_plan, make_batch
from trainer.data import ShardError, ShardIndex, WindowLoader
from trainer.loader import BackgroundLoader


def test_index_orders_and_skips_current(tmp_path) -> None:
    write_synthetic_run(tmp_path, 3, 40, 4, 5)
    # The rolling copy and temp files of an in-progress write are not shards to train on.
    write_synthetic_shard(tmp_path / "training_data/current/latest_games.npz", 40, 4, 5)
    (tmp_path / "training_data/run_001/.games_00004.npz.tmp").write_bytes(b"partial")
    shards = ShardIndex(tmp_path).refresh()
    assert [s.index for s in shards] == [1, 2, 3]
    assert all(s.rows == 40 and s.games == 4 and s.board_size == 5 for s in shards)


def test_window_keeps_newest_games_cut_at_game_boundary(tmp_path) -> None:
    write_synthetic_run(tmp_path, 3, 40, 4, 5)  # 10 rows per game
    index = ShardIndex(tmp_path)
    window = WindowLoader(window_games=6).load(index.refresh())
    # Newest shard whole (4 games, 40 rows), 2 newest games of the middle one (20 rows).
    assert window.games == 6 and window.rows == 60
    assert [s.index for s in window.shards] == [2, 3]
    newest = np.load(tmp_path / "training_data/run_001/games_00003.npz")
    np.testing.assert_array_equal(window.by_size[5].states[-40:], newest["states"])
    middle = np.load(tmp_path / "training_data/run_001/games_00002.npz")
    np.testing.assert_array_equal(window.by_size[5].states[:20], middle["states"][20:])


def test_window_groups_board_sizes(tmp_path) -> None:
    write_synthetic_run(tmp_path, 1, 30, 3, 5, run="a")
    write_synthetic_run(tmp_path, 1, 50, 5, 9, run="b")
    window = WindowLoader(100).load(ShardIndex(tmp_path).refresh())
    assert {n: a.rows for n, a in window.by_size.items()} == {5: 30, 9: 50}
    assert window.main_board_size == 9
    for n, batch_idx in _take(batch_plan(window, 8, seed=1), 20):
        assert len(batch_idx) == 8 and batch_idx.max() < window.by_size[n].rows


def test_bad_shard_is_a_clear_error(tmp_path) -> None:
    p = tmp_path / "training_data/r/games_00001.npz"
    p.parent.mkdir(parents=True)
    np.savez(p, states=np.zeros((2, 3), np.uint8))
    with pytest.raises(ShardError, match="missing keys"):
        ShardIndex(tmp_path, strict=True).refresh()
    lenient = ShardIndex(tmp_path)  # the run loop's mode: skip it, say why
    assert lenient.refresh() == [] and "missing keys" in lenient.errors[p]
    write_synthetic_shard(p, 10, 2, 5)
    z = dict(np.load(p))
    z["policy"] = z["policy"][:, :-1]  # wrong width for a 5x5 board
    np.savez(p, **z)
    index = ShardIndex(tmp_path)
    with pytest.raises(ShardError, match="policy is float32\\[10, 25\\], expected"):
        WindowLoader(10, strict=True).load(index.refresh())
    assert WindowLoader(10).load(index.refresh()).rows == 0  # lenient: left out


def test_truncated_shard_is_skipped_not_fatal(tmp_path) -> None:
    # A partly copied file (a shard copied in with cp, a disk that filled up): not a zip yet.
    write_synthetic_run(tmp_path, 2, 20, 2, 5)
    good, bad = sorted((tmp_path / "training_data/run_001").glob("games_*.npz"))
    blob = bad.read_bytes()
    bad.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(ShardError, match="unreadable"):
        ShardIndex(tmp_path, strict=True).refresh()
    lenient = ShardIndex(tmp_path)
    assert [s.path for s in lenient.refresh()] == [good] and bad in lenient.errors
    # Listed while whole, cut short before the window loads it: left out, the run goes on.
    bad.write_bytes(blob)
    listed = ShardIndex(tmp_path).refresh()
    bad.write_bytes(blob[:100])
    with pytest.raises(ShardError, match="unreadable"):
        WindowLoader(10, strict=True).load(listed)
    assert WindowLoader(10).load(listed).rows == 20


def test_permutations_match_numpy_definition() -> None:
    # Hand-made 5x5 position: one stone at row 0, col 1 (point 1).
    n = 5
    board = np.zeros((n, n), np.int8)
    board[0, 1] = 1
    perms = symmetry_permutations(n)
    # np.rot90 turns counter-clockwise: (r, c) -> (n-1-c, r); point 1 lands on (3, 0) = 15.
    expected_point = {0: 1, 1: 15, 2: 23, 3: 9, 4: 5, 5: 3, 6: 19, 7: 21}
    for sym, point in expected_point.items():
        out = board.reshape(-1)[perms[sym]]
        assert out.nonzero()[0].tolist() == [point], sym
        ref = np.rot90(board, sym % 4)
        ref = ref.T if sym >= 4 else ref
        np.testing.assert_array_equal(out.reshape(n, n), ref)
    assert all(sorted(p.tolist()) == list(range(n * n)) for p in perms)


def test_symmetries_agree_with_go_engine() -> None:
    sym_mod = pytest.importorskip("kgrpc.go.symmetry")
    n = 7
    rng = np.random.default_rng(3)
    planes = rng.random((8, NUM_PLANES, n, n)) < 0.4
    policy = rng.random((8, n * n + 1)).astype(np.float32)
    own = rng.integers(-1, 2, (8, n * n)).astype(np.int8)
    syms = torch.arange(8)
    p_t, pol_t, own_t = apply_symmetries(
        torch.from_numpy(planes.reshape(8, NUM_PLANES, -1)),
        torch.from_numpy(policy),
        torch.from_numpy(own),
        syms,
    )
    for s in range(8):
        np.testing.assert_array_equal(
            p_t[s].numpy().reshape(NUM_PLANES, n, n), sym_mod.apply_planes(planes[s], s)
        )
        np.testing.assert_array_equal(pol_t[s].numpy(), sym_mod.apply_policy(policy[s], s, n))
        np.testing.assert_array_equal(own_t[s].numpy(), sym_mod.apply_ownership(own[s], s, n))


def test_augmented_targets_follow_the_planes(tmp_path) -> None:
    # Synthetic targets are functions of the planes: policy = own stones normalised,
    # ownership = own - opponent stones. A correct augmentation preserves both relations.
    write_synthetic_run(tmp_path, 1, 256, 8, 7)
    window = WindowLoader(100).load(ShardIndex(tmp_path).refresh())
    arrs = window.by_size[7]
    idx = np.arange(256)
    plain = make_batch(arrs, idx, None)
    aug = make_batch(arrs, idx, np.random.default_rng(0))
    assert not torch.equal(plain.planes, aug.planes)  # something was transformed
    for b in (plain, aug):
        own, opp = b.planes[:, 1], b.planes[:, 2]
        torch.testing.assert_close(b.ownership, own - opp)
        board = b.policy[:, :49].reshape(-1, 7, 7)
        has = own.sum((1, 2)) > 0
        torch.testing.assert_close(board[has], own[has] / own[has].sum((1, 2), keepdim=True))
        assert torch.all(b.policy[~has, 49] == 1)
        assert torch.all(b.planes[:, 0] == 1)
    # Symmetries permute points, so stone counts and global targets are unchanged.
    torch.testing.assert_close(plain.planes.sum((2, 3)), aug.planes.sum((2, 3)))
    torch.testing.assert_close(plain.value, aug.value)
    torch.testing.assert_close(plain.score, aug.score)


def test_ranks_get_disjoint_batches(tmp_path) -> None:
    write_synthetic_run(tmp_path, 1, 64, 8, 5)
    window = WindowLoader(100).load(ShardIndex(tmp_path).refresh())
    r0 = [i for _, b in _take(batch_plan(window, 8, seed=4, rank=0, world=2), 4) for i in b]
    r1 = [i for _, b in _take(batch_plan(window, 8, seed=4, rank=1, world=2), 4) for i in b]
    assert sorted(r0 + r1) == list(range(64))


def test_background_loader_delivers_and_reports_errors(tmp_path) -> None:
    write_synthetic_run(tmp_path, 2, 50, 5, 5)
    window = WindowLoader(100).load(ShardIndex(tmp_path).refresh())
    with BackgroundLoader(window, 16, threads=2, prefetch=2) as loader:
        batches = [loader.get() for _ in range(12)]  # more than one epoch: endless stream
    assert all(
        b.planes.shape == (16, NUM_PLANES, 5, 5) and b.policy.shape == (16, 26) for b in batches
    )
    assert loader.wait_s >= 0 and loader.batches == 12
    window.by_size[5].states = window.by_size[5].states[:, :3]  # corrupt: unpack fails
    with BackgroundLoader(window, 16) as loader, pytest.raises(RuntimeError, match="loader"):
        loader.get()


def _take(it, k):
    return [next(it) for _ in range(k)]
