"""``kgrpc-gtp --coordinator``: a real coordinator's newest release, downloaded at start and
played over GTP by the engine as a subprocess."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

NAME = "kg-b1c8-s100-d1000"


async def gtp_session(
    commands: list[str], *args: str, token: str = "", env_extra: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of kgrpc-gtp fed ``commands``; the token in the
    environment, as the help advises."""
    env = {**os.environ, "KGRPC_GTP_TOKEN": token, **(env_extra or {})}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kgrpc.programs.gtp",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    stdin = "".join(c + "\n" for c in commands).encode()
    stdout, stderr = await asyncio.wait_for(proc.communicate(stdin), 120)
    return proc.returncode or 0, stdout.decode(), stderr.decode()


async def test_plays_the_newest_release_of_a_coordinator_list(tmp_path: Path, coordinator_factory):  # type: ignore[no-untyped-def]
    from trainer.export import init_model
    from trainer.publish import publish_model

    coord = await coordinator_factory(gating_enabled=False)
    cache = tmp_path / "cache"
    # Nothing released yet: one line, exit 2, and no model is played.
    code, out, err = await gtp_session(
        ["genmove b"],
        "--coordinator",
        coord.address,
        "--model-dir",
        str(cache),
        token=coord.worker_token,
    )
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        f"kgrpc-gtp: the coordinator at {coord.address} has released no model yet"
    ]

    model = tmp_path / f"{NAME}.onnx"
    init_model(5, 1, 8, model, name=NAME, seed=1)
    await publish_model(coord.address, coord.trainer_token, model)

    # A dead replica first and the live one: gRPC's round_robin skips the dead one.
    addresses = f"127.0.0.1:1,{coord.address}"
    commands = ["boardsize 5", "komi 0.5", "genmove b", "quit"]
    args = ("--coordinator", addresses, "--model-dir", str(cache), "--visits", "4")
    code, out, err = await gtp_session(commands, *args, token=coord.worker_token)
    assert code == 0, err
    answers = [a for a in out.split("\n\n") if a.strip()]
    assert len(answers) == 4 and all(a.startswith("=") for a in answers), out
    move = answers[2].removeprefix("=").strip().lower()
    assert move == "pass" or (move[0] in "abcde" and move[1:] in "12345"), move
    assert f"release {NAME} of {addresses}" in err
    # Downloaded into the cache as workers download: the coordinator's bytes, nothing partial.
    assert (cache / f"{NAME}.onnx").read_bytes() == model.read_bytes()
    assert not list(cache.glob("*.part"))
    assert f"model {cache / f'{NAME}.onnx'}" in err  # played as --model FILE

    # The default cache is under XDG_CACHE_HOME.
    xdg = tmp_path / "xdg"
    code, out, err = await gtp_session(
        ["quit"],
        "--coordinator",
        coord.address,
        token=coord.worker_token,
        env_extra={"XDG_CACHE_HOME": str(xdg)},
    )
    assert code == 0, err
    assert (xdg / "kgrpc" / "models" / f"{NAME}.onnx").read_bytes() == model.read_bytes()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--coordinator", "127.0.0.1:1"), "coordinator 127.0.0.1:1: UNAVAILABLE"),
        (("--coordinator", "127.0.0.1:1", "--model", "none"), "UNAVAILABLE"),
        (("--coordinator", "127.0.0.1:1", "--model", "x.onnx"), "--model and --coordinator"),
        (("--coordinator", "nowhere"), "expected HOST:PORT"),
    ],
)
async def test_coordinator_errors_are_one_line_and_exit_2(
    tmp_path: Path, args: tuple[str, ...], needle: str
) -> None:
    code, out, err = await gtp_session(["genmove b"], *args, "--model-dir", str(tmp_path))
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kgrpc-gtp: ") and needle in lines[0], err


async def test_a_bad_token_is_one_line_and_exit_2(tmp_path: Path, coordinator_factory):  # type: ignore[no-untyped-def]
    coord = await coordinator_factory(gating_enabled=False)
    code, out, err = await gtp_session(
        ["genmove b"],
        "--coordinator",
        coord.address,
        "--model-dir",
        str(tmp_path),
        token="not-a-token",
    )
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "UNAUTHENTICATED" in lines[0], err
