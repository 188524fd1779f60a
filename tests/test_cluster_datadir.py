"""kgrpc-cluster never deletes a directory it did not create (issue 11, item 15).

The refusals run the command's entry point (once as ``python -m kgrpc.programs.cluster`` in a
subprocess, the reported accident): it must stop before it starts any process or touches a
file. Reusing and emptying its own runs is checked on real directories through
:func:`prepare_data_dir`; tests/test_e2e_loop.py runs the whole cluster in an own earlier run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kgrpc.programs.cluster.datadir import MARKER, DataDirError, prepare_data_dir
from kgrpc.programs.cluster.main import main


def cluster(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "kgrpc.programs.cluster", *args, "--view", "plain"]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=60)


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with the bytes of files (None for folders)."""
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


def make_checkout(root: Path) -> None:
    (root / ".git" / "objects").mkdir(parents=True)
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "README.md").write_text("my project\n")
    (root / "src").mkdir()
    (root / "src" / "main.py").write_text("print('hello')\n")


def test_data_dir_dot_in_a_checkout_is_refused(tmp_path) -> None:
    """The reported accident: ``kgrpc-cluster --data-dir .`` run in a checkout."""
    make_checkout(tmp_path)
    before = tree(tmp_path)
    res = cluster("--data-dir", ".", cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "is not empty and is not a kgrpc-cluster run" in lines[0]
    assert str(tmp_path) in lines[0] and "nothing was deleted" in lines[0]
    assert tree(tmp_path) == before  # not one file removed, added or changed


@pytest.mark.parametrize("keep", [False, True])
def test_a_directory_with_files_that_is_not_a_run_is_refused_and_kept(
    tmp_path, capsys, keep
) -> None:
    data = tmp_path / "mine"
    make_checkout(data)
    (data / "a-marker-in-a-subfolder").mkdir()
    (data / "a-marker-in-a-subfolder" / MARKER).write_text("")  # only the top level counts
    before = tree(data)
    assert main(["--data-dir", str(data), *(["--keep"] if keep else [])]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"kgrpc-cluster: --data-dir {data} is not empty and is not a")
    assert tree(data) == before


def test_a_file_is_refused(tmp_path, capsys) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("keep me\n")
    assert main(["--data-dir", str(target)]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert target.read_text() == "keep me\n"


def test_a_new_directory_is_created_and_marked(tmp_path) -> None:
    root = tmp_path / "a" / "run"
    prepare_data_dir(root, fresh=True)
    assert root.is_dir() and (root / MARKER).is_file()
    assert [p.name for p in root.iterdir()] == [MARKER]


def test_an_empty_directory_is_used_and_marked(tmp_path) -> None:
    root = tmp_path / "empty"
    root.mkdir()
    prepare_data_dir(root, fresh=True)
    assert (root / MARKER).is_file()


def test_an_own_run_is_emptied_but_not_what_its_links_point_to(tmp_path) -> None:
    root = tmp_path / "run"
    prepare_data_dir(root, fresh=True)
    (root / "logs").mkdir()
    (root / "logs" / "coordinator.log").write_text("old\n")
    (root / "models").mkdir()
    (root / "models" / "kg-b1c8-s0-d0.onnx").write_bytes(b"\x08\x07")
    (root / ".hidden").write_text("x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep\n")
    os.symlink(outside, root / "link-to-dir")
    os.symlink(outside / "precious.txt", root / "link-to-file")

    prepare_data_dir(root, fresh=True)
    assert [p.name for p in root.iterdir()] == [MARKER]
    assert (outside / "precious.txt").read_text() == "keep\n"


def test_keep_reuses_an_own_run_as_it_is(tmp_path) -> None:
    root = tmp_path / "run"
    prepare_data_dir(root, fresh=True)
    (root / "models").mkdir()
    (root / "models" / "m.onnx").write_bytes(b"model")
    before = tree(root)
    prepare_data_dir(root, fresh=False)
    assert tree(root) == before


def test_refusal_touches_nothing_in_process(tmp_path) -> None:
    root = tmp_path / "other"
    root.mkdir()
    (root / "data.bin").write_bytes(b"\x00" * 10)
    with pytest.raises(DataDirError) as info:
        prepare_data_dir(root, fresh=True)
    assert "\n" not in str(info.value)
    assert tree(root) == {"data.bin": b"\x00" * 10}
