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

Outside pytest (benchmarks, demos) use ``kgrpc.coordinator.testing.start_coordinator``
and ``kgrpc.randgame.make_random_game`` directly.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio

from kgrpc.coordinator.testing import RunningCoordinator, start_coordinator
from kgrpc.randgame import make_random_game


@pytest_asyncio.fixture
async def coordinator_factory(
    tmp_path: Any,
) -> AsyncIterator[Callable[..., Awaitable[RunningCoordinator]]]:
    started: list[RunningCoordinator] = []

    async def factory(**overrides: Any) -> RunningCoordinator:
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
def random_game() -> Callable[..., Any]:
    return make_random_game
