"""The background loader: threads that build the next batches while the trainer steps.

It walks :func:`trainer.batches.batch_plan` and hands ready :class:`trainer.batches.Batch`
objects (pinned on CUDA) to the training loop through a bounded queue (``prefetch``), keeping
the time the loop waited for it: the data-wait share on the progress line.
"""

from __future__ import annotations

import queue
import threading
import time

import numpy as np

from trainer.batches import Batch, batch_plan, make_batch
from trainer.data import Window


class BackgroundLoader:
    """Threads turning the batch plan into ready :class:`Batch` objects ahead of the trainer.

    ``get()`` blocks until a batch is ready and adds the time blocked to ``wait_s``; the
    trainer reports ``wait_s`` over its step time as the data-wait share. numpy's unpackbits
    and torch's gather release the GIL for most of their work, so the threads overlap the
    training step.
    """

    def __init__(
        self,
        window: Window,
        batch_size: int,
        *,
        seed: int = 0,
        rank: int = 0,
        world: int = 1,
        symmetries: bool = True,
        prefetch: int = 8,
        threads: int = 1,
        pin_memory: bool = False,
    ) -> None:
        self._plan = batch_plan(window, batch_size, seed, rank, world)
        self._plan_lock = threading.Lock()
        self._window = window
        self._queue: queue.Queue[object] = queue.Queue(maxsize=prefetch)
        self._stop = threading.Event()
        self._symmetries = symmetries
        self._pin = pin_memory
        self.wait_s = 0.0
        self.batches = 0
        self._threads = [
            threading.Thread(
                target=self._work, args=(seed, rank, i), daemon=True, name=f"kgrpc-loader-{i}"
            )
            for i in range(threads)
        ]
        for t in self._threads:
            t.start()

    def _work(self, seed: int, rank: int, thread: int) -> None:
        rng = np.random.default_rng([seed, rank, thread, 0x5EED])
        try:
            while not self._stop.is_set():
                with self._plan_lock:
                    n, idx = next(self._plan)
                batch = make_batch(
                    self._window.by_size[n], idx, rng if self._symmetries else None, self._pin
                )
                self._put(batch)
        except BaseException as exc:  # handed to the trainer, which re-raises it
            self._put(exc)

    def _put(self, item: object) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def get(self) -> Batch:
        t0 = time.perf_counter()
        item = self._queue.get()
        self.wait_s += time.perf_counter() - t0
        if isinstance(item, BaseException):
            raise RuntimeError(f"data loader failed: {item!r}") from item
        self.batches += 1
        assert isinstance(item, Batch)
        return item

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)

    def __enter__(self) -> BackgroundLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
