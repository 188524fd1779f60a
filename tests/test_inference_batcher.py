"""Batcher semantics with real ONNX Runtime sessions on tiny models."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np
import pytest

from inference.batcher import Batcher, QueueFullError
from inference.cache import EvalCache
from inference.engine import Engine
from inference.local import LocalEvaluator
from inference.wire import pack_planes
from kgrpc.evaluator import EvalResult, EvaluationError, Evaluator
from tests.inference_helpers import make_model, positions


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(tmp_path_factory.mktemp("m") / "a.onnx", "kg-b1c8-s0-d0")


@pytest.fixture(scope="module")
def engine(model_path: Path) -> Engine:
    return Engine(model_path, device="cpu", intra_threads=1)


class Recorder:
    """Wraps the real engine, recording batch sizes; can hold a batch until released."""

    def __init__(self, engine: Engine, hold_first: bool = False) -> None:
        self.engine = engine
        self.sizes: list[int] = []
        self.release = threading.Event()
        self.started = threading.Event()
        if not hold_first:
            self.release.set()

    def __call__(self, n: int, packed: np.ndarray, g: np.ndarray):  # type: ignore[no-untyped-def]
        self.sizes.append(packed.shape[0])
        self.started.set()
        self.release.wait(30)
        return self.engine.run(n, packed, g)


def req(count: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    planes, g = positions(count, n, seed)
    return pack_planes(planes), g


async def test_batch_cut_by_size(engine: Engine) -> None:
    rec = Recorder(engine)
    b = Batcher(rec, max_batch=4, max_delay_ms=60_000, in_flight=1)
    futs = [b.submit(9, *req(1, 9, i)) for i in range(8)]
    await asyncio.gather(*futs)  # would wait a minute if only the delay cut batches
    assert rec.sizes == [4, 4]
    await b.close()


async def test_batch_cut_by_delay(engine: Engine) -> None:
    rec = Recorder(engine)
    b = Batcher(rec, max_batch=64, max_delay_ms=20, in_flight=1)
    await asyncio.gather(*[b.submit(9, *req(1, 9, i)) for i in range(3)])
    assert rec.sizes == [3]
    assert b.metrics.batches == 1 and b.metrics.mean_batch_size == 3
    await b.close()


async def test_whole_requests_only_and_oversized_request_runs_alone(engine: Engine) -> None:
    rec = Recorder(engine)
    b = Batcher(rec, max_batch=4, max_delay_ms=50, in_flight=1)
    futs = [b.submit(9, *req(3, 9, 1)), b.submit(9, *req(3, 9, 2)), b.submit(9, *req(9, 9, 3))]
    futs.append(b.submit(9, *req(1, 9, 4)))
    out = await asyncio.gather(*futs)
    assert rec.sizes == [3, 3, 9, 1]
    assert [o[0].shape[0] for o in out] == [3, 3, 9, 1]
    await b.close()


async def test_results_equal_direct_evaluation_no_mixing(engine: Engine) -> None:
    b = Batcher(engine.run, max_batch=16, max_delay_ms=5, in_flight=2)
    reqs = [req(1 + i % 5, 9, 100 + i) for i in range(40)]
    outs = await asyncio.gather(*[b.submit(9, p, g) for p, g in reqs])
    assert b.metrics.mean_batch_size > 1  # they really were batched together
    for (p, g), got in zip(reqs, outs, strict=True):
        want = engine.run(9, p, g)
        for a, w in zip(got, want, strict=True):
            np.testing.assert_allclose(a, w, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got[0].sum(axis=1), 1.0, rtol=1e-5)
    await b.close()


async def test_board_sizes_get_separate_batches(engine: Engine) -> None:
    rec = Recorder(engine)
    b = Batcher(rec, max_batch=64, max_delay_ms=10, in_flight=1)
    outs = await asyncio.gather(*[b.submit(n, *req(1, n, i)) for i, n in enumerate([5, 9] * 3)])
    assert sorted(rec.sizes) == [3, 3]
    assert [o[0].shape[1] for o in outs] == [26, 82] * 3
    await b.close()


async def test_cancelled_request_is_not_evaluated(engine: Engine) -> None:
    rec = Recorder(engine, hold_first=True)
    b = Batcher(rec, max_batch=1, max_delay_ms=0, in_flight=1)
    first = b.submit(9, *req(1, 9, 1))
    await asyncio.to_thread(rec.started.wait, 10)  # the first batch is running
    gone = b.submit(9, *req(2, 9, 2))
    kept = b.submit(9, *req(1, 9, 3))
    assert b.queue_depth == 3
    gone.cancel()
    await asyncio.sleep(0)  # done callbacks run on the next loop iteration
    assert b.queue_depth == 1
    rec.release.set()
    await first
    out = await kept
    assert out[0].shape[0] == 1
    assert rec.sizes == [1, 1]  # the cancelled 2-position request never ran
    await b.close()


async def test_bounded_queue_rejects(engine: Engine) -> None:
    rec = Recorder(engine, hold_first=True)
    b = Batcher(rec, max_batch=1, max_delay_ms=0, max_queue=4, in_flight=1)
    running = b.submit(9, *req(1, 9, 0))
    await asyncio.to_thread(rec.started.wait, 10)
    queued = [b.submit(9, *req(1, 9, i)) for i in range(4)]
    with pytest.raises(QueueFullError, match="queue full"):
        b.submit(9, *req(1, 9, 9))
    assert b.metrics.rejected_queue_full == 1
    rec.release.set()
    await asyncio.gather(running, *queued)
    await b.submit(9, *req(1, 9, 9))  # room again
    await b.close()


async def test_model_failure_fails_the_batch_not_the_batcher(engine: Engine) -> None:
    calls = {"n": 0}

    def flaky(n: int, p: np.ndarray, g: np.ndarray):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("boom")
        return engine.run(n, p, g)

    b = Batcher(flaky, max_batch=8, max_delay_ms=5, in_flight=1)
    bad = await asyncio.gather(
        *[b.submit(9, *req(1, 9, i)) for i in range(2)], return_exceptions=True
    )
    assert all(isinstance(e, RuntimeError) for e in bad)
    good = await b.submit(9, *req(1, 9, 5))
    assert good[0].shape == (1, 82)
    await b.close()


def test_cache_lru() -> None:
    c = EvalCache(2)
    p, g = req(3, 9, 1)
    keys = [EvalCache.key("m", 9, p[i], g[i]) for i in range(3)]
    assert EvalCache.key("other", 9, p[0], g[0]) != keys[0]
    for i, k in enumerate(keys):
        c.put(k, (np.zeros(82), float(i), 0.0, np.zeros(81)))
    assert c.get(keys[0]) is None and len(c) == 2
    assert c.get(keys[2])[1] == 2.0
    assert (c.hits, c.misses) == (1, 1)


async def test_local_evaluator(model_path: Path, engine: Engine, tmp_path: Path) -> None:
    other = make_model(tmp_path / "b.onnx", "kg-b1c8-s10-d100", seed=5)
    ev = LocalEvaluator(
        [model_path, other], device="cpu", max_batch=8, max_delay_ms=2, cache_size=100
    )
    assert isinstance(ev, Evaluator)
    planes, g = positions(6, 9, 7)
    res = await asyncio.gather(
        *[
            ev.evaluate(planes[i : i + 1], g[i : i + 1], model="kg-b1c8-s0-d0", want_ownership=True)
            for i in range(6)
        ]
    )
    want = engine.run(9, pack_planes(planes), g)
    for i, r in enumerate(res):
        assert isinstance(r, EvalResult) and r.model == "kg-b1c8-s0-d0"
        np.testing.assert_allclose(r.policy[0], want[0][i], rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(r.ownership[0], want[3][i], rtol=1e-4, atol=1e-6)
    default = await ev.evaluate(planes, g)  # the last path is the default
    assert default.model == "kg-b1c8-s10-d100" and default.ownership is None
    assert not np.allclose(default.policy, want[0], atol=1e-4)
    again = await ev.evaluate(planes, g)  # served from the cache
    np.testing.assert_array_equal(again.policy, default.policy)
    assert ev.metrics.cache_hits == 6
    assert (ev.evals, ev.requests) == (18, 8)
    with pytest.raises(EvaluationError, match="NOT_FOUND"):
        await ev.evaluate(planes, g, model="nope")
    with pytest.raises(EvaluationError, match="INVALID_ARGUMENT"):
        await ev.evaluate(planes[:, :3], g)
    await ev.close()


async def test_cache_entries_hold_only_their_own_position(engine: Engine) -> None:
    # An entry that is a view into its batch's output keeps the whole batch alive: a full
    # cache would then hold up to max_batch times the memory it is sized for.
    from inference.models import LoadedModel

    batcher = Batcher(engine.run, max_batch=16, max_delay_ms=1)
    model = LoadedModel(engine, batcher, EvalCache(100))
    p, g = req(8, 9, 3)
    first = await model.evaluate(9, p, g)
    assert len(model.cache) == 8
    for policy, _, _, own in model.cache._map.values():
        for a in (policy, own):
            assert a.base is None or a.base.nbytes == a.nbytes
    again = await model.evaluate(9, p, g)
    for x, y in zip(first, again, strict=True):
        np.testing.assert_array_equal(x, y)
    await batcher.close()


def test_cache_key_is_unambiguous() -> None:
    # Model name, board size and rows were hashed back to back: a longer name could absorb
    # the size byte and a row prefix, so two different requests shared one key.
    r1 = np.arange(47, dtype=np.uint8)  # one 5x5 row
    r2 = np.concatenate([np.full(104, ord("A"), np.uint8), [5], r1]).astype(np.uint8)  # 9x9
    g = np.zeros(8, np.float32)
    name1 = "m\t" + "A" * 104
    assert EvalCache.key(name1, 5, r1, g) != EvalCache.key("m", 9, r2, g)
