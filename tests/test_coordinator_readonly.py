"""Issue 31: a coordinator started on a read-only data directory says so in one line and
exits 2, without a traceback (it used to report a failing disk, to be retried).

The directory is made read-only for real: without write permission when the tests run as
an ordinary user, or as a read-only bind mount when they run as root (whom permissions do
not stop); the test is skipped where neither is possible.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kgrpc.coordinator.storage_health import ReadOnlyDataDir, check_writable


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    src = tmp_path / "data"
    src.mkdir()
    (src / "kept.txt").write_text("stays\n")
    if os.geteuid() != 0:
        src.chmod(0o555)
        try:
            yield src
        finally:
            src.chmod(0o755)
        return
    ro = tmp_path / "ro"
    ro.mkdir()
    ok = subprocess.run(["mount", "--bind", str(src), str(ro)], capture_output=True).returncode
    if ok != 0:
        pytest.skip("running as root without the right to mount: cannot make a read-only dir")
    try:
        if subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)]).returncode != 0:
            pytest.skip("cannot remount read-only")
        yield ro
    finally:
        subprocess.run(["umount", str(ro)], check=False)


def test_check_writable_names_a_read_only_directory(read_only_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ReadOnlyDataDir, match=f"data directory {read_only_dir} is read-only"):
        check_writable(read_only_dir)
    with pytest.raises(ReadOnlyDataDir, match="is read-only"):
        check_writable(read_only_dir / "run")  # to be created inside it
    check_writable(tmp_path / "fresh")  # writable: created, probe removed
    assert list((tmp_path / "fresh").iterdir()) == []


def test_start_up_on_a_read_only_data_dir_is_one_line_and_exit_2(read_only_dir: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kgrpc.coordinator",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            str(read_only_dir),
            "--log-level",
            "WARNING",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        # The pure-Python engine: the native core's own start-up notes are not the point here.
        env={**os.environ, "KGRPC_NATIVE": "0"},
    )
    assert proc.returncode == 2, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert lines == [
        f"kgrpc-coordinator: the data directory {read_only_dir} is read-only "
        f"({'read-only file system' if os.geteuid() == 0 else 'no write permission'}): the "
        "coordinator writes its index, ingest journal, shards and models there; make it "
        "writable or give another --data-dir"
    ], proc.stderr
    assert "Traceback" not in proc.stderr and "disk" not in proc.stderr
    assert sorted(p.name for p in read_only_dir.iterdir()) == ["kept.txt"]
