"""The dynamic batcher: many small requests -> few large network runs.

Requests (one or more positions of one board size, packed planes + globals) go into a queue per
board size. ``in_flight`` worker coroutines each take the oldest queue and cut a batch when it
holds ``max_batch`` positions or ``max_delay_ms`` after its oldest request arrived (Triton's
max_queue_delay); the batch runs in a thread (ONNX Runtime releases the GIL) while another
worker is already gathering the next one (KataGo's several NN server threads per model).

A request is never split or mixed: its positions are contiguous in the batch and the result
slices go back to that request's future. A request whose future is cancelled (its client went
away) is dropped if it has not been cut into a batch yet. The queue is bounded by
``max_queue`` positions: ``submit`` raises :class:`QueueFullError` rather than growing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from inference.metrics import Metrics

Outputs = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
RunFn = Callable[[int, np.ndarray, np.ndarray], Outputs]


class QueueFullError(Exception):
    """The batcher's queue is at its bound; answer RESOURCE_EXHAUSTED."""


class BatcherClosedError(Exception):
    """The batcher was closed (model unloaded or server shutting down)."""


@dataclass(eq=False)
class _Item:
    packed: np.ndarray
    globals_: np.ndarray
    future: asyncio.Future[Outputs]
    t_enqueued: float
    queued: bool = True

    @property
    def count(self) -> int:
        return int(self.packed.shape[0])


class _SizeQueue:
    def __init__(self) -> None:
        self.items: deque[_Item] = deque()
        self.live = 0  # positions in not-cancelled queued items

    def drop_dead_head(self) -> None:
        while self.items and self.items[0].future.done():
            self.items.popleft()


class Batcher:
    def __init__(
        self,
        run: RunFn,
        *,
        max_batch: int = 64,
        max_delay_ms: float = 2.0,
        max_queue: int = 4096,
        in_flight: int = 2,
        metrics: Metrics | None = None,
        executor: ThreadPoolExecutor | None = None,
    ) -> None:
        if max_batch < 1 or in_flight < 1 or max_queue < 1:
            raise ValueError("max_batch, in_flight and max_queue must be >= 1")
        self._run = run
        self.max_batch = max_batch
        self.max_delay = max_delay_ms / 1000.0
        self.max_queue = max_queue
        self.in_flight = in_flight
        self.metrics = metrics or Metrics()
        self._own_executor = executor is None
        self._executor = executor or ThreadPoolExecutor(in_flight, thread_name_prefix="ort")
        self._queues: dict[int, _SizeQueue] = {}
        self._live = 0
        self._wake = asyncio.Event()
        self._workers: list[asyncio.Task[None]] = []
        self._running_batches = 0
        self._closed = False

    @property
    def queue_depth(self) -> int:
        return self._live

    @property
    def busy(self) -> bool:
        return self._live > 0 or self._running_batches > 0

    def start(self) -> None:
        if not self._workers:
            self._workers = [asyncio.ensure_future(self._worker()) for _ in range(self.in_flight)]

    def submit(
        self, board_size: int, packed: np.ndarray, globals_: np.ndarray
    ) -> asyncio.Future[Outputs]:
        """Queue one request; the future resolves to its (policy, value, score, ownership)."""
        if self._closed:
            raise BatcherClosedError("batcher is closed")
        count = int(packed.shape[0])
        if self._live + count > self.max_queue:
            self.metrics.rejected_queue_full += 1
            raise QueueFullError(
                f"inference queue full ({self._live} queued + {count} > {self.max_queue})"
            )
        self.start()
        loop = asyncio.get_running_loop()
        item = _Item(packed, globals_, loop.create_future(), loop.time())
        q = self._queues.get(board_size)
        if q is None:
            q = self._queues[board_size] = _SizeQueue()
        q.items.append(item)
        q.live += count
        self._live += count

        def on_done(fut: asyncio.Future[Outputs], item: _Item = item, q: _SizeQueue = q) -> None:
            if fut.cancelled() and item.queued:  # its client went away before the batch
                item.queued = False
                q.live -= item.count
                self._live -= item.count

        item.future.add_done_callback(on_done)
        self._wake.set()
        return item.future

    async def evaluate(self, board_size: int, packed: np.ndarray, globals_: np.ndarray) -> Outputs:
        return await self.submit(board_size, packed, globals_)

    def _oldest(self) -> tuple[int, _SizeQueue] | None:
        best: tuple[int, _SizeQueue] | None = None
        for size, q in self._queues.items():
            q.drop_dead_head()
            if q.items and (best is None or q.items[0].t_enqueued < best[1].items[0].t_enqueued):
                best = (size, q)
        return best

    def _take(self, q: _SizeQueue) -> list[_Item]:
        taken: list[_Item] = []
        total = 0
        while q.items:
            item = q.items[0]
            if item.future.done():
                q.items.popleft()
                continue
            # Whole requests only; a request larger than max_batch runs alone.
            if taken and total + item.count > self.max_batch:
                break
            q.items.popleft()
            item.queued = False
            q.live -= item.count
            self._live -= item.count
            taken.append(item)
            total += item.count
            if total >= self.max_batch:
                break
        return taken

    async def _worker(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closed:
            found = self._oldest()
            if found is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            size, q = found
            deadline = q.items[0].t_enqueued + self.max_delay
            while q.live < self.max_batch and not self._closed and loop.time() < deadline:
                self._wake.clear()
                try:
                    async with asyncio.timeout_at(deadline):
                        await self._wake.wait()
                except TimeoutError:
                    break
            items = self._take(q)
            if items:
                await self._run_batch(size, items)

    async def _run_batch(self, size: int, items: list[_Item]) -> None:
        loop = asyncio.get_running_loop()
        t_cut = loop.time()
        waits = [(t_cut - it.t_enqueued) * 1000.0 for it in items]
        packed = [it.packed for it in items]
        globals_ = [it.globals_ for it in items]

        def work() -> tuple[Outputs, float]:
            t0 = time.perf_counter()
            p = packed[0] if len(packed) == 1 else np.concatenate(packed)
            g = globals_[0] if len(globals_) == 1 else np.concatenate(globals_)
            out = self._run(size, p, g)
            return out, (time.perf_counter() - t0) * 1000.0

        self._running_batches += 1
        try:
            (policy, value, score, own), compute_ms = await loop.run_in_executor(
                self._executor, work
            )
        except asyncio.CancelledError:  # closed while running: nobody will resolve these
            for it in items:
                if not it.future.done():
                    it.future.set_exception(BatcherClosedError("batcher closed"))
            raise
        except Exception as exc:  # the model failed: every request in the batch fails
            self.metrics.errors += len(items)
            for it in items:
                if not it.future.done():
                    it.future.set_exception(exc)
            return
        finally:
            self._running_batches -= 1
        total = sum(it.count for it in items)
        self.metrics.record_batch(total, compute_ms, waits)
        start = 0
        for it in items:
            end = start + it.count
            if not it.future.done():
                it.future.set_result(
                    (policy[start:end], value[start:end], score[start:end], own[start:end])
                )
            start = end

    async def wait_idle(self, poll_s: float = 0.01) -> None:
        while self.busy:
            await asyncio.sleep(poll_s)

    async def close(self) -> None:
        """Stop the workers; requests still queued fail with BatcherClosedError."""
        self._closed = True
        self._wake.set()
        for w in self._workers:
            w.cancel()
        for w in self._workers:
            with contextlib.suppress(asyncio.CancelledError):
                await w
        self._workers = []
        for q in self._queues.values():
            for it in q.items:
                if not it.future.done():
                    it.future.set_exception(BatcherClosedError("model unloaded"))
            q.items.clear()
            q.live = 0
        self._live = 0
        if self._own_executor:
            self._executor.shutdown(wait=False)
