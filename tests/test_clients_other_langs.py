"""The Node.js and C++ example clients (clients-src/) against the coordinator.

Each client is a real program built from clients-src/ with the code that
scripts/gen-clients.sh generates from protos/: it registers, asks for a task
(GetTask), uploads one game played for it (a GameRecord made here by
:mod:`kgrpc.randgame` with the task's board size, rules and komi, handed over as a
file of serialized bytes, which the client stamps with the task id and model) as a
zstd-compressed GameBatch over UploadGames, reads GetStats back, and prints a
one-line JSON summary that these tests check, and then check again through the
Python API.

Two kinds of server:
* the real coordinator (``kgrpc.coordinator.testing.start_coordinator``) on
  127.0.0.1, with a tiny model released so that it hands out tasks: the game must
  be ACCEPTED and counted, a bad token refused, a tampered game REJECTED, a game
  that does not fit the task never sent;
* a recording stand-in (below) that keeps exactly what each client put on the
  wire, so the tests can check the metadata and the payload byte for byte.

Toolchains: scripts/install-client-deps.sh installs them. Without them the
tests skip and say what is missing, unless KGRPC_REQUIRE_CLIENTS=1 (or CI=true
and KGRPC_REQUIRE_CLIENTS is not 0), where a missing toolchain fails instead.
The C++ client is built once per session (incremental make: the objects stay
under clients/cpp/build between sessions).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
import zstandard

from kgrpc.go.rules import preset_to_proto
from kgrpc.randgame import make_random_game
from kgrpc.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc, records_pb2

ROOT = Path(__file__).resolve().parents[1]
GEN = ROOT / "scripts" / "gen-clients.sh"
NODE_DIR = ROOT / "clients" / "node"
CPP_BIN = ROOT / "clients" / "cpp" / "build" / "kgrpc-client"
CLIENT_TIMEOUT_S = 60.0
LANGS = ["node", "cpp"]
# Builds and runs programs in other languages (the C++ build alone takes minutes the
# first time): `make test` runs them, `make test-fast` does not.
pytestmark = pytest.mark.slow


def _strict() -> bool:
    flag = os.environ.get("KGRPC_REQUIRE_CLIENTS")
    if flag is not None:
        return flag == "1"
    return os.environ.get("CI", "").lower() == "true"


def _missing(what: str) -> None:
    msg = (
        f"{what}; run `bash scripts/install-client-deps.sh` (as root) to install the client "
        f"toolchains"
    )
    if _strict():
        pytest.fail(
            msg + " [KGRPC_REQUIRE_CLIENTS/CI: missing toolchains fail instead of skipping]"
        )
    pytest.skip(msg)


def _run(cmd: list[str], what: str, timeout: float = 600) -> None:
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        pytest.fail(
            f"{what} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    print(f"{what}: {time.monotonic() - t0:.1f}s", file=sys.stderr)


@pytest.fixture(scope="session")
def node_client() -> list[str]:
    node = shutil.which("node")
    if node is None:
        _missing("node is not installed")
    for pkg in ("@grpc/grpc-js", "@grpc/proto-loader", "protobufjs", "zstd-napi"):
        if not (NODE_DIR / "node_modules" / pkg / "package.json").is_file():
            _missing(f"npm package {pkg} is not installed under clients/node/node_modules")
    _run(["bash", str(GEN), "--only", "node"], "gen-clients (node)")
    return [node, str(NODE_DIR / "client.js")]


@pytest.fixture(scope="session")
def cpp_client() -> list[str]:
    for tool in ("g++", "make", "protoc", "grpc_cpp_plugin", "pkg-config"):
        if shutil.which(tool) is None:
            _missing(f"{tool} is not installed")
    probe = subprocess.run(
        ["pkg-config", "--exists", "grpc++", "protobuf", "libzstd"], capture_output=True
    )
    if probe.returncode != 0:
        _missing(
            "pkg-config does not find grpc++, protobuf and libzstd (Debian: libgrpc++-dev "
            "libprotobuf-dev libzstd-dev)"
        )
    _run(["bash", str(GEN), "--only", "cpp"], "gen-clients (cpp)")
    _run(
        ["make", "-s", "-C", str(ROOT / "clients-src" / "cpp"), f"-j{os.cpu_count() or 1}"],
        "C++ client build",
    )
    if not os.access(CPP_BIN, os.X_OK):
        pytest.fail(f"the C++ build succeeded but {CPP_BIN} is not there")
    return [str(CPP_BIN)]


@pytest.fixture
def client_cmd(request: pytest.FixtureRequest) -> tuple[str, list[str]]:
    lang = request.param
    return lang, request.getfixturevalue(f"{lang}_client")


@dataclass
class ClientRun:
    returncode: int
    stdout: str
    stderr: str

    def summary(self) -> dict:
        lines = [ln for ln in self.stdout.splitlines() if ln.strip()]
        assert lines, f"client printed nothing (exit {self.returncode}); stderr:\n{self.stderr}"
        try:
            return json.loads(lines[-1])
        except json.JSONDecodeError:
            raise AssertionError(
                f"client's last line is not JSON: {lines[-1]!r}; stderr:\n{self.stderr}"
            ) from None


async def run_client(
    cmd: list[str], address: str, token: str, game_file: Path, username: str
) -> ClientRun:
    """Runs a client without blocking the event loop (the coordinator lives in it)."""
    proc = await asyncio.create_subprocess_exec(
        *cmd,
        "--address",
        address,
        "--game",
        str(game_file),
        "--username",
        username,
        "--timeout-s",
        "30",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "KGRPC_TOKEN": token},
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), CLIENT_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"{cmd[-1]} did not finish within {CLIENT_TIMEOUT_S}s") from None
    return ClientRun(proc.returncode, out.decode(), err.decode())


def write_game(tmp_path: Path, seed: int, komi: float = 7.5) -> tuple[records_pb2.GameRecord, Path]:
    """A 9x9 game with komi 7.5 under Chinese rules: what the coordinator's first task asks
    (default curriculum and settings)."""
    game = make_random_game(9, seed=seed, komi=komi)
    path = tmp_path / f"game-{seed}.bin"
    path.write_bytes(game.SerializeToString())
    return game, path


# --- against the real coordinator ------------------------------------------------------------


@pytest.fixture
async def coordinator(tmp_path: Path):
    from kgrpc.coordinator.testing import start_coordinator
    from tests.dashboard_helpers import FIRST, publish

    running = await start_coordinator(tmp_path / "coord")
    try:
        await publish(running, FIRST)  # released at once: GetTask hands out self-play with it
        yield running
    finally:
        await running.stop()


async def python_stats(address: str, token: str) -> coordinator_pb2.Stats:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = coordinator_pb2_grpc.CoordinatorStub(channel)
        return await stub.GetStats(
            coordinator_pb2.GetStatsRequest(),
            metadata=[("authorization", f"Bearer {token}")],
            timeout=30,
        )


@pytest.mark.parametrize("client_cmd", LANGS, indirect=True)
async def test_client_registers_uploads_and_reads_stats(
    client_cmd, coordinator, tmp_path: Path
) -> None:
    lang, cmd = client_cmd
    game, path = write_game(tmp_path, seed=11)
    t0 = time.monotonic()
    run = await run_client(
        cmd, coordinator.address, coordinator.worker_token, path, f"{lang}-example"
    )
    elapsed = time.monotonic() - t0
    s = run.summary()
    assert run.returncode == 0, f"{lang} client exit {run.returncode}: {s}; stderr:\n{run.stderr}"
    assert s["client"] == lang
    assert s["ack_status"] == "GAME_STATUS_ACCEPTED", s
    assert s["game_id"] == game.game_id
    # The game named the task the client was given, issued to its worker.
    terms = (await coordinator.app.db(coordinator.app.tasks.terms, [s["task_id"]]))[s["task_id"]]
    assert terms.worker_id == s["worker_id"] and terms.models == ("kg-b2c16-s0-d0",)
    assert s["accepted"] == 1
    assert s["games_accepted"] == 1
    assert s["worker_games_accepted"] == 1
    assert s["worker_id"]
    # The payload really was compressed: a 9x9 game with targets shrinks well under zstd.
    assert 0 < s["compressed_bytes"] < s["batch_bytes"]
    print(f"{lang} client run: {elapsed:.2f}s", file=sys.stderr)

    # What the client printed is what the coordinator holds.
    stats = await python_stats(coordinator.address, coordinator.worker_token)
    assert stats.games_accepted == 1 and stats.games_rejected == 0
    workers = {w.worker_id: w for w in stats.workers}
    assert s["worker_id"] in workers, f"worker {s['worker_id']} not in {list(workers)}"
    # Credited to the token's label; the client's user name is no display name by default.
    assert workers[s["worker_id"]].username == "test worker"
    assert workers[s["worker_id"]].display_name == ""
    conn = coordinator.connect(readonly=True)
    try:
        sent = conn.execute(
            "SELECT username FROM workers WHERE worker_id = ?", (s["worker_id"],)
        ).fetchone()["username"]
    finally:
        conn.close()
    assert sent == f"{lang}-example"  # what the client registered with is kept
    assert workers[s["worker_id"]].games_accepted == 1


@pytest.mark.parametrize("client_cmd", LANGS, indirect=True)
async def test_client_reports_a_rejected_game(client_cmd, coordinator, tmp_path: Path) -> None:
    lang, cmd = client_cmd
    game = make_random_game(9, seed=12)
    # Flip the result: the moves replay fine, the claimed winner and score do not.
    game.result.score = -game.result.score if game.result.score else 3.5
    game.result.winner = {common_pb2.COLOR_BLACK: common_pb2.COLOR_WHITE}.get(
        game.result.winner, common_pb2.COLOR_BLACK
    )
    path = tmp_path / "bad.bin"
    path.write_bytes(game.SerializeToString())
    run = await run_client(
        cmd, coordinator.address, coordinator.worker_token, path, f"{lang}-example"
    )
    s = run.summary()
    assert run.returncode == 3, (
        f"{lang} client should exit 3 on a rejected game, got {run.returncode}: {s}"
    )
    assert s["ack_status"] == "GAME_STATUS_REJECTED" and s["ack_reason"] == "result_mismatch", s
    assert s["ack_detail"], s
    assert s["games_accepted"] == 0


@pytest.mark.parametrize("client_cmd", LANGS, indirect=True)
async def test_client_does_not_send_a_game_that_does_not_fit_its_task(
    client_cmd, coordinator, tmp_path: Path
) -> None:
    lang, cmd = client_cmd
    _, path = write_game(tmp_path, seed=14, komi=6.5)  # the task asks for 7.5
    run = await run_client(
        cmd, coordinator.address, coordinator.worker_token, path, f"{lang}-example"
    )
    assert run.returncode == 1, f"{lang} client: exit {run.returncode}\n{run.stdout}\n{run.stderr}"
    assert "does not fit task selfplay-" in run.stderr and "komi" in run.stderr, run.stderr
    stats = await python_stats(coordinator.address, coordinator.worker_token)
    assert stats.games_received == 0


@pytest.mark.parametrize("client_cmd", LANGS, indirect=True)
async def test_client_with_a_bad_token_fails_clearly(
    client_cmd, coordinator, tmp_path: Path
) -> None:
    lang, cmd = client_cmd
    _, path = write_game(tmp_path, seed=13)
    run = await run_client(cmd, coordinator.address, "not-a-token", path, f"{lang}-example")
    assert run.returncode == 1, f"{lang} client: exit {run.returncode}\n{run.stdout}\n{run.stderr}"
    assert "Register: UNAUTHENTICATED" in run.stderr, run.stderr
    stats = await python_stats(coordinator.address, coordinator.worker_token)
    assert stats.games_received == 0 and len(stats.workers) == 0


# --- against a recording stand-in: what exactly goes on the wire ---------------------------


RECORDED_TASK = coordinator_pb2.Task(
    task_id="selfplay-recorded-1",
    rules=preset_to_proto("chinese"),
    komi=7.5,
    board_size=9,
    visits=8,
    selfplay=coordinator_pb2.SelfPlayTask(model="m-recorded", games=1),
    max_moves=162,
)


@dataclass
class Recorder(coordinator_pb2_grpc.CoordinatorServicer):
    metadata: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    uploads: list[coordinator_pb2.UploadGamesRequest] = field(default_factory=list)
    task_requests: list[coordinator_pb2.GetTaskRequest] = field(default_factory=list)

    def _note(self, method: str, context: grpc.aio.ServicerContext) -> None:
        self.metadata.append(
            (method, {k: v for k, v in context.invocation_metadata() if isinstance(v, str)})
        )

    async def Register(self, request, context):  # noqa: N802 - gRPC method name
        self._note("Register", context)
        assert request.username and request.hostname and request.version
        return coordinator_pb2.RegisterResponse(worker_id="w-recorded-1", heartbeat_interval_s=30)

    async def GetTask(self, request, context):  # noqa: N802
        """First "wait 1 s" (no model released yet), then a self-play task."""
        self._note("GetTask", context)
        self.task_requests.append(request)
        if len(self.task_requests) == 1:
            return coordinator_pb2.Task(task_id="wait", retry_after_s=1)
        return RECORDED_TASK

    async def UploadGames(self, request_iterator, context):  # noqa: N802
        self._note("UploadGames", context)
        acks = []
        async for req in request_iterator:
            self.uploads.append(req)
            batch = records_pb2.GameBatch.FromString(
                zstandard.ZstdDecompressor().decompress(req.games_zstd)
            )
            acks += [
                coordinator_pb2.GameAck(
                    game_id=g.game_id, status=coordinator_pb2.GAME_STATUS_ACCEPTED
                )
                for g in batch.games
            ]
        return coordinator_pb2.UploadGamesResponse(acks=acks, accepted=len(acks))

    async def GetStats(self, request, context):  # noqa: N802
        self._note("GetStats", context)
        return coordinator_pb2.Stats(
            games_accepted=len(self.uploads),
            workers=[
                coordinator_pb2.WorkerStatus(
                    worker_id="w-recorded-1", games_accepted=len(self.uploads)
                )
            ],
        )


@pytest.mark.parametrize("client_cmd", LANGS, indirect=True)
async def test_client_wire_format(client_cmd, tmp_path: Path) -> None:
    lang, cmd = client_cmd
    recorder = Recorder()
    server = grpc.aio.server()
    coordinator_pb2_grpc.add_CoordinatorServicer_to_server(recorder, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        game, path = write_game(tmp_path, seed=21)
        run = await run_client(cmd, f"127.0.0.1:{port}", "tok-123", path, f"{lang}-wire")
    finally:
        await server.stop(None)
    s = run.summary()
    assert run.returncode == 0, f"{lang}: exit {run.returncode}: {s}\n{run.stderr}"
    assert s["worker_id"] == "w-recorded-1" and s["ack_status"] == "GAME_STATUS_ACCEPTED"
    assert s["games_accepted"] == 1 and s["worker_games_accepted"] == 1

    assert [m for m, _ in recorder.metadata] == [
        "Register",
        "GetTask",
        "GetTask",
        "UploadGames",
        "GetStats",
    ]
    assert [r.worker_id for r in recorder.task_requests] == ["w-recorded-1"] * 2
    for method, md in recorder.metadata:
        assert md.get("authorization") == "Bearer tok-123", f"{method}: {md}"

    assert len(recorder.uploads) == 1
    req = recorder.uploads[0]
    assert req.game_count == 1
    # A real zstd frame (magic 28 b5 2f fd) holding a GameBatch with our game, stamped
    # with the worker id from Register, the task's id and model, and otherwise unchanged.
    assert req.games_zstd[:4] == b"\x28\xb5\x2f\xfd"
    batch = records_pb2.GameBatch.FromString(
        zstandard.ZstdDecompressor().decompress(req.games_zstd)
    )
    assert len(batch.games) == 1
    sent = batch.games[0]
    assert sent.worker_id == "w-recorded-1"
    expected = records_pb2.GameRecord()
    expected.CopyFrom(game)
    expected.worker_id = "w-recorded-1"
    expected.task_id = "selfplay-recorded-1"
    expected.black_model = expected.white_model = "m-recorded"
    assert sent == expected
