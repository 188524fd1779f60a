"""Prometheus /metrics of both daemons, scraped over real HTTP while real traffic flows: the
coordinator's (beside its dashboard) and the inference server's (--metrics-listen)."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from inference.client import InferenceClient
from inference.metrics import metrics_server
from inference.models import ModelRegistry
from inference.server import InferenceServer
from kgrpc.coordinator.testing import upload_requests
from kgrpc.net.metrics import Histogram, parse_listen
from kgrpc.randgame import make_random_game, make_random_games
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc
from tests.dashboard_helpers import FIRST, SECOND, get_text, http_url, populate, publish
from tests.inference_helpers import make_model, positions

MODEL = "kg-b1c8-s0-d0"


async def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, text, headers = await get_text(url)
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_no_best_model_elo_for_a_release_no_match_rated(coordinator_factory) -> None:
    # Gating off: the second release carries the first one's Elo, which measures nothing.
    coord = await coordinator_factory(http_listen="127.0.0.1:0", gating_enabled=False)
    url, name = http_url(coord) + "/metrics", "kgrpc_coordinator_best_model_elo"
    await publish(coord, FIRST)
    assert (name, (("model", FIRST),)) in await scrape(url)  # the anchor: 0 by definition
    await publish(coord, SECOND)
    assert not [k for k in await scrape(url) if k[0] == name]


async def test_coordinator_metrics_move_with_traffic(coordinator_factory) -> None:
    coord = await coordinator_factory(
        http_listen="127.0.0.1:0", gating_games=2, match_chunk_games=2
    )
    url = http_url(coord) + "/metrics"
    before = await scrape(url)
    p = "kgrpc_coordinator_"
    assert value(before, p + "games_total", result="accepted") == 0
    assert value(before, p + "upload_message_seconds_count") == 0
    fed = await populate(coord)
    after = await scrape(url)
    assert value(after, p + "games_total", result="accepted") == 6
    assert value(after, p + "positions_total", result="accepted") == fed.positions
    assert value(after, p + "upload_message_seconds_count") == 2  # 6 games, 4 per message
    assert value(after, p + "upload_message_seconds_bucket", le="+Inf") == 2
    assert value(after, p + "models", status="released") == 2
    assert value(after, p + "gating_matches", decision="released") == 1
    assert value(after, p + "gating_games_total", outcome="win") == 2
    assert value(after, p + "sgf_games_total", kind="selfplay") == 6
    assert value(after, p + "sgf_games_total", kind="gating") == 2
    assert value(after, p + "workers_online") == 1
    assert value(after, p + "validation_queue_games") == 0
    assert value(after, p + "pending_positions") == fed.positions
    assert value(after, p + "best_model_elo", model="kg-b2c16-s2000-d100") > 20

    bad = make_random_game(9, seed=9, worker_id=fed.worker_id)
    bad.moves[3] = bad.moves[2]  # occupied point: illegal_move
    good = make_random_games(2, seed=40)
    await coord.store_tasks_for([bad, *good])
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        resp = await stub.UploadGames(iter(upload_requests([bad, *good])))
        assert (resp.accepted, resp.rejected) == (2, 1)
        await stub.GetStats(coordinator_pb2.GetStatsRequest())
    again = await scrape(url)
    assert value(again, p + "games_total", result="accepted") == 8
    assert value(again, p + "games_total", result="rejected") == 1
    assert value(again, p + "rejections_total", reason="illegal_move") == 1
    assert value(again, p + "upload_message_seconds_count") == 3


async def test_inference_metrics_move_with_traffic(tmp_path: Path) -> None:
    model = make_model(tmp_path / "a.onnx", MODEL)
    registry = ModelRegistry(device="cpu", intra_threads=1, max_delay_ms=2, cache_size=64)
    await registry.load(str(model), pinned=True)
    server = InferenceServer(registry)
    port = await server.start("127.0.0.1:0")
    metrics = metrics_server(registry)
    mport = await metrics.start("127.0.0.1:0")
    url = f"http://127.0.0.1:{mport}/metrics"
    p = "kgrpc_inference_"
    try:
        before = await scrape(url)
        assert value(before, p + "positions_total", model=MODEL) == 0
        assert value(before, p + "models_loaded") == 1
        planes, g = positions(12, 9, 3)
        async with InferenceClient(f"127.0.0.1:{port}", streams=2) as client:
            for i in range(12):
                await client.evaluate(planes[i : i + 1], g[i : i + 1], model=MODEL)
            await client.evaluate(planes[:1], g[:1], model=MODEL)  # a cache hit
        after = await scrape(url)
        assert value(after, p + "positions_total", model=MODEL) == 13
        assert value(after, p + "requests_total") == 13
        assert value(after, p + "cache_hits_total") == 1
        assert value(after, p + "cache_misses_total") == 12
        batches = value(after, p + "batches_total")
        assert batches >= 1
        assert value(after, p + "batch_size_count") == batches
        assert value(after, p + "batch_size_sum") == 12  # the cache hit never reached a batch
        assert value(after, p + "evaluation_seconds_count") == batches
        assert value(after, p + "queue_wait_seconds_count") == 12
        assert value(after, p + "evals_per_second", model=MODEL) > 0
    finally:
        await metrics.stop()
        await server.stop(0)


def test_histogram_buckets_are_cumulative() -> None:
    h = Histogram((1, 5, 10))
    for v in (0.5, 1, 3, 7, 50):
        h.observe(v)
    assert h.buckets() == [("1.0", 2), ("5.0", 3), ("10.0", 4), ("+Inf", 5)]
    assert (h.count, h.sum) == (5, 61.5)


@pytest.mark.parametrize(
    "addr,want",
    [
        ("8080", ("127.0.0.1", 8080)),
        (":0", ("127.0.0.1", 0)),
        ("0.0.0.0:9", ("0.0.0.0", 9)),
        ("[::1]:80", ("::1", 80)),
        ("localhost:1", ("localhost", 1)),
    ],
)
def test_http_addresses_default_to_loopback(addr: str, want: tuple[str, int]) -> None:
    assert parse_listen(addr) == want


@pytest.mark.parametrize("addr", ["x", "host:", "1:99999", "a:b"])
def test_bad_http_addresses_are_refused(addr: str) -> None:
    with pytest.raises(ValueError, match="bad HTTP address"):
        parse_listen(addr)
