"""TLS for every client and server, against real daemons on loopback with a private CA made in
the test (kgrpc.net.certs, the openssl CLI); tokens from the environment; the one-line hint
when a client and a server disagree about TLS (kgrpc.net.handshake)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from inference.client import InferenceClient
from inference.models import ModelRegistry
from inference.server import InferenceServer
from kgrpc.coordinator import cli as coordinator_cli
from kgrpc.coordinator import remote
from kgrpc.coordinator.testing import RunningCoordinator, start_coordinator
from kgrpc.evaluator import EvaluationError
from kgrpc.net import describe, make_channel, tls_mismatch
from kgrpc.net.certs import TlsFiles, have_openssl, make_ca_and_server_cert
from kgrpc.net.handshake import PLAINTEXT_TO_TLS, TLS_TO_PLAINTEXT, UNTRUSTED, WRONG_NAME
from kgrpc.net.server import GrpcServer, tls_credentials
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc
from kgrpc.worker.config import build_config
from kgrpc.worker.daemon import Worker
from tests.inference_helpers import make_model, positions
from tests.worker_helpers import COORD, M1, free_port
from trainer.publish import publish_model

pytestmark = pytest.mark.skipif(not have_openssl(), reason="needs the openssl CLI")

CLIENT_TOKEN = "inference-client-token"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_ca_and_server_cert(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def other_pki(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    """Another CA: a client trusting it must refuse the servers of the first."""
    return make_ca_and_server_cert(tmp_path_factory.mktemp("other-pki"))


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(tmp_path_factory.mktemp("models") / f"{M1}.onnx", M1)


async def tls_coordinator(tmp_path: Path, pki: TlsFiles) -> RunningCoordinator:
    return await start_coordinator(tmp_path, **COORD, tls_cert=str(pki.cert), tls_key=str(pki.key))


async def health(address: str, **channel: Any) -> str | None:
    """None when a health check over this channel works, else :func:`describe` of the error."""
    async with make_channel(address, **channel) as ch:
        try:
            await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
        except grpc.aio.AioRpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAVAILABLE
            assert describe(exc).count("\n") == 0
            return describe(exc)
    return None


async def test_each_tls_mismatch_is_named_by_describe(pki: TlsFiles, other_pki: TlsFiles) -> None:
    tls, plain = (GrpcServer((), max_message_bytes=1 << 20) for _ in range(2))
    tls_port = await tls.start("127.0.0.1:0", tls_credentials(str(pki.cert), str(pki.key)))
    plain_port = await plain.start("127.0.0.1:0")
    tls_addr, plain_addr = f"127.0.0.1:{tls_port}", f"127.0.0.1:{plain_port}"
    try:
        # the right settings: the certificate names both localhost and 127.0.0.1
        assert await health(tls_addr, tls_ca=pki.ca) is None
        assert await health(f"localhost:{tls_port}", tls_ca=str(pki.ca)) is None
        assert await health(plain_addr) is None
        # plaintext client, TLS server: the hint is a question
        text = await health(tls_addr)
        assert text is not None and text.startswith(PLAINTEXT_TO_TLS)
        assert "is it serving TLS? pass --tls-ca" in text and "Socket closed" in text
        # TLS client, plaintext server
        text = await health(plain_addr, tls_ca=pki.ca)
        assert text is not None and text.startswith(TLS_TO_PLAINTEXT)
        # a certificate from another CA; a certificate for another name
        text = await health(tls_addr, tls_ca=other_pki.ca)
        assert text is not None and text.startswith(UNTRUSTED)
        text = await health(tls_addr, tls_ca=pki.ca, server_name="example.org")
        assert text is not None and text.startswith(WRONG_NAME)
        # a server that is down is an outage, not a TLS problem
        text = await health(f"127.0.0.1:{free_port()}")
        assert text is not None and text.startswith("UNAVAILABLE:") and "TLS" not in text
    finally:
        await tls.stop(0)
        await plain.stop(0)


def test_a_ca_file_that_is_no_certificate_fails_at_once(tmp_path: Path, pki: TlsFiles) -> None:
    with pytest.raises(ValueError, match="no PEM certificate"):
        make_channel("127.0.0.1:1", tls_ca=pki.key)
    with pytest.raises(ValueError, match="TLS CA file .*missing.pem"):
        make_channel("127.0.0.1:1", tls_ca=tmp_path / "missing.pem")
    with pytest.raises(ValueError, match="tls_ca: TLS CA file"):
        build_config(coordinator="c:1", token="t", tls_ca=str(tmp_path / "missing.pem")).check()


async def test_worker_plays_over_tls_with_a_tls_inference_server(
    tmp_path: Path, pki: TlsFiles, model: Path
) -> None:
    coord = await tls_coordinator(tmp_path, pki)
    registry = ModelRegistry(device="cpu", max_batch=16)
    await registry.load(str(model), make_default=False, pinned=True)
    server = InferenceServer(registry, tokens=[CLIENT_TOKEN])
    port = await server.start(
        "127.0.0.1:0", credentials=tls_credentials(str(pki.cert), str(pki.key))
    )
    try:
        resp = await publish_model(coord.address, coord.trainer_token, model, tls_ca=str(pki.ca))
        assert resp.model.name == M1
        # token and CA from the environment, as a volunteer's service would give them
        env = {
            "KGRPC_WORKER_TOKEN": coord.worker_token,
            "KGRPC_WORKER_TLS_CA": str(pki.ca),
            "KGRPC_WORKER_INFERENCE_TOKEN": CLIENT_TOKEN,
            "KGRPC_WORKER_INFERENCE_TLS_CA": str(pki.ca),
        }
        cfg = build_config(
            env=env,
            coordinator=coord.address,
            work_dir=tmp_path / "w",
            inference=f"localhost:{port}",
            parallel_games=2,
            games=2,
            quiet=True,
            retry_base_s=0.05,
            retry_cap_s=0.5,
            seed=1,
        )
        assert await asyncio.wait_for(Worker(cfg).run(install_signals=False), 120) == 0
        async with make_channel(coord.address, token=coord.worker_token, tls_ca=pki.ca) as ch:
            stats = await coordinator_pb2_grpc.CoordinatorStub(ch).GetStats(
                coordinator_pb2.GetStatsRequest(), timeout=10
            )
        assert stats.games_accepted == 2
        assert registry.metrics.batches > 0
    finally:
        await server.stop(0)
        await coord.stop()


@pytest.mark.parametrize("coordinator_tls", [True, False])
async def test_worker_facing_the_other_tls_setting_stops_with_the_hint(
    tmp_path: Path, pki: TlsFiles, caplog: pytest.LogCaptureFixture, coordinator_tls: bool
) -> None:
    coord = (
        await tls_coordinator(tmp_path, pki)
        if coordinator_tls
        else await start_coordinator(tmp_path, **COORD)
    )
    try:
        cfg = build_config(
            coordinator=coord.address,
            token=coord.worker_token,
            tls_ca="" if coordinator_tls else str(pki.ca),
            work_dir=tmp_path / "w",
            quiet=True,
            retry_base_s=0.05,
            retry_cap_s=0.2,
        )
        with caplog.at_level(logging.WARNING):
            assert await asyncio.wait_for(Worker(cfg).run(install_signals=False), 60) == 2
    finally:
        await coord.stop()
    hint = PLAINTEXT_TO_TLS if coordinator_tls else TLS_TO_PLAINTEXT
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"coordinator {coord.address} Register failed: {hint} [")
    assert errors[0].endswith("]") and "\n" not in errors[0]


async def test_stats_over_tls_with_token_and_ca_from_the_environment(
    tmp_path: Path,
    pki: TlsFiles,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    coord = await tls_coordinator(tmp_path, pki)
    plain = await start_coordinator(tmp_path / "plain", **COORD)
    try:
        monkeypatch.setenv(coordinator_cli.TOKEN_ENV, coord.worker_token)
        monkeypatch.setenv(coordinator_cli.TLS_CA_ENV, str(pki.ca))
        parser = coordinator_cli.build_parser()
        assert await remote.run(parser.parse_args(["stats", "--coordinator", coord.address])) == 0
        out = capsys.readouterr()
        assert "games" in out.out and "accepted" in out.out and out.err == ""
        # the same CA against a plaintext coordinator: one line saying so
        assert await remote.run(parser.parse_args(["stats", "--coordinator", plain.address])) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and TLS_TO_PLAINTEXT in err and plain.address in err
        # plaintext against the TLS coordinator
        monkeypatch.delenv(coordinator_cli.TLS_CA_ENV)
        parser = coordinator_cli.build_parser()
        assert await remote.run(parser.parse_args(["stats", "--coordinator", coord.address])) == 1
        assert PLAINTEXT_TO_TLS in capsys.readouterr().err
    finally:
        await plain.stop()
        await coord.stop()


async def run_cli(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        env={**os.environ, "GRPC_VERBOSITY": "ERROR", **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=180)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.slow
async def test_trainer_publish_over_tls_with_token_and_ca_from_the_environment(
    tmp_path: Path, pki: TlsFiles, model: Path
) -> None:
    coord = await tls_coordinator(tmp_path, pki)
    base = {"KGRPC_TRAINER_TOKEN": coord.trainer_token}
    try:
        (code, out, err), (plain_code, _, plain_err) = await asyncio.gather(
            run_cli(
                "-m",
                "trainer",
                "publish",
                str(model),
                "--coordinator",
                coord.address,
                env={**base, "KGRPC_TRAINER_TLS_CA": str(pki.ca)},
            ),
            run_cli(
                "-m",
                "trainer",
                "publish",
                str(model),
                "--coordinator",
                coord.address,
                env={**base, "KGRPC_TRAINER_TLS_CA": ""},
            ),
        )
        assert code == 0, err
        assert out.startswith(f"published {M1} ") and "warning" not in err
        assert plain_code == 1 and PLAINTEXT_TO_TLS in plain_err
    finally:
        await coord.stop()


@pytest.mark.slow
async def test_kgrpc_inference_serves_tls_and_follows_a_tls_coordinator(
    tmp_path: Path, pki: TlsFiles, model: Path
) -> None:
    coord = await tls_coordinator(tmp_path, pki)
    await publish_model(coord.address, coord.trainer_token, model, tls_ca=str(pki.ca))
    port = free_port()
    # Tokens from the environment: the coordinator's (to follow) and the clients' it accepts.
    env = {
        **os.environ,
        "GRPC_VERBOSITY": "ERROR",
        "KGRPC_INFERENCE_TOKEN": coord.worker_token,
        "KGRPC_INFERENCE_AUTH_TOKENS": f"someone-else,{CLIENT_TOKEN}",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "inference",
        "--listen",
        f"127.0.0.1:{port}",
        "--device",
        "cpu",
        "--coordinator",
        coord.address,
        "--tls-ca",
        str(pki.ca),
        "--tls-cert",
        str(pki.cert),
        "--tls-key",
        str(pki.key),
        "--model-dir",
        str(tmp_path / "models"),
        "--log-every-s",
        "0",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    address = f"localhost:{port}"
    client = InferenceClient(address, token=CLIENT_TOKEN, tls_ca=str(pki.ca))
    try:
        for _ in range(600):  # the daemon starts, follows the coordinator, loads the release
            if proc.returncode is not None:
                pytest.fail(f"kgrpc-inference exited: {(await proc.communicate())[1]!r}")
            try:
                if (await client.model_info()).default_model == M1:
                    break
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.1)
        planes, globals_ = positions(3, 5, 0)
        assert (await client.evaluate(planes, globals_)).model == M1
        # a plaintext client: refused at once with the hint, not retried
        plain = InferenceClient(address, token=CLIENT_TOKEN)
        with pytest.raises(EvaluationError) as err:
            await plain.evaluate(planes, globals_)
        assert tls_mismatch(err.value) == PLAINTEXT_TO_TLS and plain.retries == 0
        assert describe(err.value).startswith(PLAINTEXT_TO_TLS)
        await plain.close()
        # TLS without a token it knows
        stranger = InferenceClient(address, token="nobody", tls_ca=pki.ca)
        with pytest.raises(EvaluationError) as err:
            await stranger.evaluate(planes, globals_)
        assert err.value.code == "UNAUTHENTICATED", err.value.message
        await stranger.close()
    finally:
        await client.close()
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(proc.communicate(), 60)
        await coord.stop()
    assert proc.returncode == 0, stderr.decode()
    assert "visible to every user" not in stderr.decode()


def test_a_key_that_is_not_the_certificates_is_one_line(
    tmp_path: Path,
    pki: TlsFiles,
    other_pki: TlsFiles,
    model: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from inference import cli as inference_cli

    mixed = ["--tls-cert", str(pki.cert), "--tls-key", str(other_pki.key)]
    assert inference_cli.main(["--model", str(model), "--listen", "127.0.0.1:0", *mixed]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not belong to the certificate" in err
    assert (
        coordinator_cli.main(
            ["serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "coord"), *mixed]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not belong to the certificate" in err


def test_a_token_given_as_a_flag_gets_a_warning_one_from_the_environment_none() -> None:
    from inference.cli import build_parser as inference_parser
    from inference.config import SETTINGS as INFERENCE
    from kgrpc.worker.cli import build_parser as worker_parser
    from kgrpc.worker.config import SETTINGS as WORKER

    args = worker_parser().parse_args(["--token", "t", "--inference-token", "i"])
    warnings = WORKER.secrets_given_as_flags(args, ("token", "inference_token"))
    assert [w.split(" on the command line")[0] for w in warnings] == [
        "warning: --token",
        "warning: --inference-token",
    ]
    assert "set $KGRPC_WORKER_TOKEN instead" in warnings[0]
    assert WORKER.secrets_given_as_flags(worker_parser().parse_args([])) == []
    assert (
        WORKER.from_args(
            worker_parser().parse_args([]), env={"KGRPC_WORKER_TOKEN": "from-env"}
        ).token
        == "from-env"
    )
    args = inference_parser().parse_args(["--auth-token", "a", "--auth-token", "b"])
    assert len(INFERENCE.secrets_given_as_flags(args, ("token", "auth_tokens"))) == 1
    cfg = INFERENCE.from_args(
        inference_parser().parse_args([]),
        env={"KGRPC_INFERENCE_AUTH_TOKENS": "a,b", "KGRPC_INFERENCE_TOKEN": "c"},
    )
    assert (cfg.auth_tokens, cfg.token) == (["a", "b"], "c")


@pytest.mark.slow
def test_the_trainers_publisher_shows_the_hint_then_publishes_with_the_ca(
    tmp_path: Path, pki: TlsFiles
) -> None:
    """``kgrpc-train run`` publishes from its own thread and event loop (the coordinator is
    another process here, as in tests/test_trainer_publish_retry.py)."""
    from kgrpc.net import Backoff
    from tests.model_files import write_model
    from tests.test_trainer_publish_retry import LateCoordinator, wait_until
    from trainer.publish import Publisher

    coord = LateCoordinator(tmp_path, tls_cert=str(pki.cert), tls_key=str(pki.key))
    coord.start()
    path = write_model(tmp_path / f"{M1}.onnx", M1)
    try:
        coord.wait_up()
        for tls_ca in (None, str(pki.ca)):
            lines: list[str] = []
            pub = Publisher(
                coord.address,
                coord.trainer_token,
                tls_ca=tls_ca,
                timeout_s=60,
                backoff=Backoff(base_s=0.05, cap_s=0.2),
                report=lines.append,
            )
            try:
                pub.submit(path)
                if tls_ca is None:  # retried (the coordinator may be reconfigured), with why
                    wait_until(lambda: pub.attempts >= 2)  # noqa: B023
                    assert PLAINTEXT_TO_TLS in lines[0] and not pub.published
                else:
                    assert pub.wait(60), lines
                    assert pub.published == [M1]
            finally:
                pub.close()
    finally:
        coord.stop()


@pytest.mark.slow
async def test_kgrpc_gtp_plays_on_a_tls_inference_server(
    tmp_path: Path, pki: TlsFiles, model: Path
) -> None:
    registry = ModelRegistry(device="cpu", max_batch=16)
    await registry.load(str(model), pinned=True)
    server = InferenceServer(registry, tokens=[CLIENT_TOKEN])
    port = await server.start(
        "127.0.0.1:0", credentials=tls_credentials(str(pki.cert), str(pki.key))
    )

    async def gtp(env: dict[str, str]) -> tuple[str, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "kgrpc.programs.gtp",
            "--model",
            str(model),
            "--size",
            "5",
            "--visits",
            "8",
            "--inference",
            f"localhost:{port}",
            env={**os.environ, "GRPC_VERBOSITY": "ERROR", "KGRPC_GTP_TOKEN": CLIENT_TOKEN, **env},
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(b"genmove b\nquit\n"), 120)
        assert proc.returncode == 0, err.decode()
        return out.decode(), err.decode()

    try:
        (good, good_err), (plain, _) = await asyncio.gather(
            gtp({"KGRPC_GTP_TLS_CA": str(pki.ca)}), gtp({"KGRPC_GTP_TLS_CA": ""})
        )
    finally:
        await server.stop(0)
    move = good.split("\n\n")[0]
    assert move.startswith("= ") and len(move) > 2, good + good_err
    assert registry.metrics.batches > 0
    assert "visible to every user" not in good_err
    # plaintext against the TLS server: the GTP error says what to change
    answer = plain.split("\n\n")[0]
    assert answer.startswith(f"? inference failed: {PLAINTEXT_TO_TLS}"), plain
