"""Publish a model file to the coordinator: the ``PublishModel`` client stream.

Stream layout (coordinator.proto): one ``PublishModelRequest`` with ``header`` (name, sha256,
size, blocks, channels, training steps/rows, feature version: all read from the ONNX file's
``kgrpc.*`` metadata props, docs/formats.md section 5), then ``data`` chunks of at most
``chunk_bytes`` in file order. Needs a trainer token. The reply says whether the coordinator
released the model at once or scheduled a gating match; the trainer only logs it. A model of
another feature version is refused here already (the coordinator refuses it too).

:class:`Publisher` is the training loop's way to publish: candidates go to a background
thread that retries a publish failing with a transient error (the coordinator restarting or
unreachable: :data:`kgrpc.net.RETRYABLE_CODES`) with growing, jittered waits until it
succeeds or a newer candidate supersedes it. A refusal (INVALID_ARGUMENT, ALREADY_EXISTS,
PERMISSION_DENIED, ...) is final. The outcome is noted next to the file, ``NAME.onnx.published``
or ``NAME.onnx.refused`` (the coordinator's reason): at the next start
:func:`unpublished_candidate` finds the newest export that was neither, so a candidate
is not lost to a trainer restart during an outage either. The thread owns the trainer's
only gRPC event loop; other calls (pulling shards) run on it through :meth:`Publisher.call`,
so grpc.aio is never used from two threads at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import grpc

from kgrpc.durable import atomic_write_bytes
from kgrpc.net import RETRYABLE_CODES, Backoff, describe, make_channel
from kgrpc.precision import FP32, variant_file_name
from kgrpc.schema import ModelMetadata, check_feature_version
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc
from trainer.export import read_metadata
from trainer.naming import parse_name

log = logging.getLogger("kgrpc.train")
T = TypeVar("T")
CHUNK_BYTES = 1 << 20
PUBLISHED_SUFFIX = ".published"
REFUSED_SUFFIX = ".refused"


def build_header(path: str | os.PathLike[str]) -> coordinator_pb2.PublishHeader:
    """Header from the file's bytes and metadata; ValueError on a file that is not ours."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such model file")
    try:
        meta = read_metadata(p)  # ValueError without kgrpc.name
    except ValueError:
        raise
    except Exception as exc:  # onnx raises its own DecodeError on a file that is not ONNX
        raise ValueError(f"{p}: not an ONNX model: {exc}") from exc
    md = ModelMetadata.from_meta(meta, str(p))
    check_feature_version(md.feature_version, f"model file {p}")
    if md.precision != FP32:  # the coordinator would refuse it: a release is its fp32 file
        raise ValueError(
            f"{p}: a {md.precision} file; publish the release's {FP32} file "
            f"({variant_file_name(md.name, FP32)})"
        )
    name, blocks, channels = md.name, md.blocks, md.channels
    parsed = parse_name(name)  # the coordinator rejects other names; fail early and clearly
    steps = md.training_steps if "training_steps" in meta else parsed.steps
    rows = md.training_rows if "training_rows" in meta else parsed.rows
    if (parsed.blocks, parsed.channels) != (blocks, channels):
        raise ValueError(
            f"{p}: name {name} says b{parsed.blocks}c{parsed.channels} but the "
            f"metadata says b{blocks}c{channels}"
        )
    sha = hashlib.sha256()
    size = 0
    with open(p, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            sha.update(chunk)
            size += len(chunk)
    return coordinator_pb2.PublishHeader(
        name=name,
        sha256=sha.hexdigest(),
        size_bytes=size,
        blocks=blocks,
        channels=channels,
        training_steps=steps,
        training_rows=rows,
        feature_version=md.feature_version,
    )


async def _requests(
    path: Path, header: coordinator_pb2.PublishHeader, chunk_bytes: int
) -> AsyncIterator[coordinator_pb2.PublishModelRequest]:
    yield coordinator_pb2.PublishModelRequest(header=header)
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            yield coordinator_pb2.PublishModelRequest(data=chunk)


async def publish_model(
    address: str,
    token: str,
    path: str | os.PathLike[str],
    *,
    tls_ca: str | None = None,
    chunk_bytes: int = CHUNK_BYTES,
    timeout_s: float = 300.0,
) -> coordinator_pb2.PublishModelResponse:
    """Stream ``path`` to the coordinator; returns its reply (raises grpc.aio.AioRpcError)."""
    if not token:
        raise ValueError("publishing needs a trainer token (--token or $KGRPC_TRAINER_TOKEN)")
    p = Path(path)
    header = build_header(p)
    async with make_channel(address, token=token, tls_ca=tls_ca or None) as channel:
        stub = coordinator_pb2_grpc.CoordinatorStub(channel)
        return await stub.PublishModel(_requests(p, header, chunk_bytes), timeout=timeout_s)


def publish_model_sync(
    address: str, token: str, path: str | os.PathLike[str], **kw: object
) -> coordinator_pb2.PublishModelResponse:
    """For the synchronous training loop: a private event loop per call."""
    return asyncio.run(publish_model(address, token, path, **kw))  # type: ignore[arg-type]


def describe_response(resp: coordinator_pb2.PublishModelResponse) -> str:
    what = "gating match scheduled" if resp.gating_scheduled else "released"
    return f"published {resp.model.name} ({resp.model.size_bytes} bytes): {what}"


# --------------------------------------------------------------------------- retrying


def unpublished_candidate(models_dir: str | os.PathLike[str]) -> Path | None:
    """The newest exported model (most training steps) in ``models_dir`` whose publish was
    neither acknowledged nor refused, if it is the newest export at all (an older one is
    superseded by the newer)."""
    newest: tuple[int, int, Path] | None = None
    for p in Path(models_dir).glob("*.onnx"):
        try:
            n = parse_name(p.stem)
        except ValueError:
            continue
        key = (n.steps, n.rows, p)
        if newest is None or key[:2] > newest[:2]:
            newest = key
    if newest is None:
        return None
    path = newest[2]
    done = (
        path.with_name(path.name + PUBLISHED_SUFFIX).exists()
        or path.with_name(path.name + REFUSED_SUFFIX).exists()
    )
    return None if done else path


class Publisher:
    """Publishes candidates from a background thread, retrying transient failures.

    ``submit(path)`` hands over the newest candidate (an older one still waiting is dropped:
    superseded); ``wait(timeout)`` waits until nothing is waiting; ``close()`` stops the
    thread (a candidate still waiting stays unpublished on disk for the next start).
    ``report`` receives one line per outcome (the training loop's progress messages).
    """

    def __init__(
        self,
        address: str,
        token: str,
        *,
        tls_ca: str | None = None,
        backoff: Backoff | None = None,
        timeout_s: float = 300.0,
        report: Callable[[str], None] | None = None,
    ) -> None:
        self.address, self.token, self.tls_ca = address, token, tls_ca
        self.timeout_s = timeout_s
        self.backoff = backoff or Backoff(base_s=2.0, factor=1.5, cap_s=120.0)
        self.report = report or log.info
        self.published: list[str] = []  # names, in order (for tests and the demo)
        self.attempts = 0
        self._lock = threading.Lock()
        self._pending: Path | None = None
        self._idle = threading.Event()
        self._idle.set()
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._closing = False
        self._thread = threading.Thread(target=self._thread_main, name="kgrpc-publish", daemon=True)
        self._thread.start()
        self._ready.wait()

    # ---------------------------------------------------------------- from the training loop
    def submit(self, path: str | os.PathLike[str]) -> None:
        with self._lock:
            old, self._pending = self._pending, Path(path)
            self._idle.clear()
        if old is not None and old != self._pending:
            self.report(f"{old.name} not published: superseded by {Path(path).name}")
        self._poke()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` (a gRPC client coroutine) on the publisher's event loop; block."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def wait(self, timeout: float | None = None) -> bool:
        """True once no candidate is waiting (published, refused or superseded)."""
        return self._idle.wait(timeout)

    @property
    def pending(self) -> Path | None:
        with self._lock:
            return self._pending

    def close(self) -> None:
        self._closing = True
        self._poke()
        self._thread.join(30)

    # ---------------------------------------------------------------- the thread
    def _poke(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            loop.call_soon_threadsafe(wake.set)

    def _thread_main(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._ready.set()
        while not self._closing:
            with self._lock:
                path = self._pending
            if path is None:
                await self._sleep(None)
                continue
            delay = await self._attempt(path)
            if delay is not None:
                await self._sleep(delay)

    async def _sleep(self, seconds: float | None) -> None:
        assert self._wake is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
        self._wake.clear()

    def _finish(self, path: Path, suffix: str, text: str) -> None:
        try:
            atomic_write_bytes(path.with_name(path.name + suffix), text.encode())
        except OSError as exc:
            log.warning("could not note the publish of %s: %s", path.name, exc)
        with self._lock:
            if self._pending == path:
                self._pending = None
                self._idle.set()

    async def _attempt(self, path: Path) -> float | None:
        """One publish of ``path``: None when done with it, else the seconds to wait."""
        self.attempts += 1
        try:
            resp = await publish_model(
                self.address, self.token, path, tls_ca=self.tls_ca, timeout_s=self.timeout_s
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() in RETRYABLE_CODES:
                with self._lock:
                    if self._pending != path:
                        return 0.0  # superseded meanwhile: on to the newer candidate
                delay = self.backoff.next_delay()
                # describe(): what to do when the coordinator disagrees with us about TLS
                self.report(
                    f"publishing {path.name} failed ({describe(exc)}); retrying in {delay:.0f} s"
                )
                return delay
            self.report(
                f"{path.name} refused by the coordinator: {exc.code().name}: {exc.details()}"
            )
            self._finish(path, REFUSED_SUFFIX, f"{exc.code().name}: {exc.details()}\n")
            return None
        except (OSError, ValueError) as exc:  # the file itself: gone or not a model of ours
            self.report(f"{path.name} cannot be published: {exc}")
            self._finish(path, REFUSED_SUFFIX, f"{exc}\n")
            return None
        self.backoff.reset()
        self.published.append(resp.model.name)
        self.report(describe_response(resp))
        self._finish(path, PUBLISHED_SUFFIX, resp.model.sha256 + "\n")
        return None
