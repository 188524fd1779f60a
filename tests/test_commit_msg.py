"""scripts/check-commit-msg.sh: the commit-message convention of CONTRIBUTING.md."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check-commit-msg.sh"
GOOD = "worker: keep the spool on a full disk\n\nA full disk lost finished games.\n"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def check(tmp_path: Path, message: str) -> subprocess.CompletedProcess:
    path = tmp_path / "COMMIT_EDITMSG"
    path.write_text(message)
    return subprocess.run(["bash", str(SCRIPT), str(path)], capture_output=True, text=True)


def test_a_message_that_follows_the_convention_passes(tmp_path: Path) -> None:
    assert check(tmp_path, GOOD).returncode == 0
    subject = "x" * 72
    assert check(tmp_path, f"{subject}\n\nwhy\n").returncode == 0
    # git's comment lines are not part of the message
    commented = "# Please enter the message\n" + GOOD + "# On branch main\n"
    assert check(tmp_path, commented).returncode == 0


@pytest.mark.parametrize(
    "message, problem",
    [
        ("x" * 73 + "\n\nwhy\n", "subject is 73 characters (at most 72)"),
        ("subject\nwhy, with no blank line\n", "the line after the subject must be blank"),
        ("subject only\n", "no body"),
        ("subject\n\n   \n", "no body"),
        ("\n\nbody without a subject\n", "empty subject line"),
    ],
)
def test_each_broken_rule_is_named(tmp_path: Path, message: str, problem: str) -> None:
    res = check(tmp_path, message)
    assert res.returncode == 1 and problem in res.stdout, res.stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_range_checks_every_commit_but_merges(tmp_path: Path) -> None:
    def git(*args: str) -> str:
        env_args = ["-c", "user.name=t", "-c", "user.email=t@example.org"]
        return subprocess.run(
            ["git", *env_args, *args], cwd=tmp_path, check=True, capture_output=True, text=True
        ).stdout.strip()

    git("init", "-q", "-b", "main")
    git("commit", "-q", "--allow-empty", "-m", "base commit with a subject only")
    base = git("rev-parse", "HEAD")
    git("commit", "-q", "--allow-empty", "-m", "good: subject", "-m", "Why it is made.")
    ok = subprocess.run(
        ["bash", str(SCRIPT), "--range", f"{base}..HEAD"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stdout
    git("commit", "-q", "--allow-empty", "-m", "bad: " + "y" * 80)
    bad_sha = git("rev-parse", "HEAD")
    res = subprocess.run(
        ["bash", str(SCRIPT), "--range", f"{base}..HEAD"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 1
    assert f"commit {bad_sha[:12]}: subject is 85 characters" in res.stdout
    assert "no body" in res.stdout and res.stdout.count("commit ") == 2  # two problems, one commit
