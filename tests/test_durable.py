"""kgrpc.durable: atomic replacement, no temporary left behind, errors not hidden."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgrpc import durable


def test_atomic_write_replaces_whole_file_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "f.bin"
    durable.atomic_write_bytes(target, b"one", mkdir=True)
    durable.atomic_write_bytes(target, b"two")
    assert target.read_bytes() == b"two"
    assert [p.name for p in target.parent.iterdir()] == ["f.bin"]


def test_failed_write_keeps_the_old_file_and_removes_the_temp(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "f.bin"
    durable.atomic_write_bytes(target, b"old")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(durable.os, "replace", broken_replace)
    with pytest.raises(OSError, match="No space"):
        durable.atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]


def test_fsync_dir_raises_for_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        durable.fsync_dir(tmp_path / "missing")
