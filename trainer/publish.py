"""Publish a model to the coordinator: the ``PublishModel`` client stream, once per file.

Stream layout (coordinator.proto): one ``PublishModelRequest`` with ``header`` (name, sha256,
size, blocks, channels, training steps/rows, feature version, precision: all read from the ONNX
file's ``kgrpc.*`` metadata props, docs/formats.md section 5), then ``data`` chunks of at most
``chunk_bytes`` in file order. Needs a trainer token. The reply says whether the coordinator
released the model at once or scheduled a gating match; the trainer only logs it. A model of
another feature version is refused here already (the coordinator refuses it too).

A release is published file by file (:func:`publish_release`): the fp32 file ``NAME.onnx``
first (it creates the model), then each of ``NAME.fp16.onnx`` and ``NAME.int8.onnx`` that the
export wrote beside it (the coordinator adds them to the model). A refused fp16 or int8 file
is reported and does not hold the release back: clients fall back to the fp32 file.

:class:`Publisher` is the training loop's way to publish: candidates go to a background
thread that retries a publish failing with a transient error (the coordinator restarting or
unreachable: :data:`kgrpc.net.RETRYABLE_CODES`) with growing, jittered waits until it
succeeds or a newer candidate supersedes it (files already acknowledged are not sent again).
A refusal (INVALID_ARGUMENT, ALREADY_EXISTS, PERMISSION_DENIED, ...) of the fp32 file is
final. The outcome is noted next to the file, ``NAME.onnx.published`` or ``NAME.onnx.refused``
(the coordinator's reason): at the next start
:func:`unpublished_candidate` finds the newest export that was neither, so a candidate
is not lost to a trainer restart during an outage either. The thread owns the trainer's
only gRPC event loop; other calls (pulling shards) run on it through :meth:`Publisher.call`,
so grpc.aio is never used from two threads at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc

from kgrpc.digest import file_digest
from kgrpc.durable import atomic_write_bytes
from kgrpc.net import RETRYABLE_CODES, Backoff, describe, make_channel
from kgrpc.precision import FP32, existing_variants, precision_of_path, to_proto, variant_path
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
    if md.precision != precision_of_path(p):  # the engine would refuse it under this name
        raise ValueError(
            f"{p}: the file name says {precision_of_path(p)} but its metadata says {md.precision}"
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
    size, sha256 = file_digest(p)
    return coordinator_pb2.PublishHeader(
        name=name,
        sha256=sha256,
        size_bytes=size,
        blocks=blocks,
        channels=channels,
        training_steps=steps,
        training_rows=rows,
        feature_version=md.feature_version,
        precision=to_proto(md.precision),
    )


async def _requests(
    path: Path, header: coordinator_pb2.PublishHeader, chunk_bytes: int
) -> AsyncIterator[coordinator_pb2.PublishModelRequest]:
    yield coordinator_pb2.PublishModelRequest(header=header)
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            yield coordinator_pb2.PublishModelRequest(data=chunk)


async def _publish_file(
    stub: coordinator_pb2_grpc.CoordinatorStub, path: Path, chunk_bytes: int, timeout_s: float
) -> coordinator_pb2.PublishModelResponse:
    header = build_header(path)
    return await stub.PublishModel(_requests(path, header, chunk_bytes), timeout=timeout_s)


async def publish_model(
    address: str,
    token: str,
    path: str | os.PathLike[str],
    *,
    tls_ca: str | None = None,
    chunk_bytes: int = CHUNK_BYTES,
    timeout_s: float = 300.0,
) -> coordinator_pb2.PublishModelResponse:
    """Stream the one file ``path`` to the coordinator; returns its reply (raises
    grpc.aio.AioRpcError)."""
    if not token:
        raise ValueError("publishing needs a trainer token (--token or $KGRPC_TRAINER_TOKEN)")
    p = Path(path)
    build_header(p)  # a file that is not ours fails before a channel is opened
    async with make_channel(address, token=token, tls_ca=tls_ca or None) as channel:
        stub = coordinator_pb2_grpc.CoordinatorStub(channel)
        return await _publish_file(stub, p, chunk_bytes, timeout_s)


@dataclass
class ReleaseOutcome:
    """A release's publish: the coordinator's last reply (the model with every file it has
    now), the precisions it took in this call, and those it refused (why)."""

    response: coordinator_pb2.PublishModelResponse
    sent: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)


async def publish_release(
    address: str,
    token: str,
    path: str | os.PathLike[str],
    *,
    tls_ca: str | None = None,
    chunk_bytes: int = CHUNK_BYTES,
    timeout_s: float = 300.0,
    done: set[str] | None = None,
) -> ReleaseOutcome:
    """Publish the release of ``path`` (its fp32 file): the fp32 file, then each fp16/int8
    file beside it. ``done``: precisions already acknowledged (skipped; each acknowledged one
    is added). The fp32 file's failure raises (grpc.aio.AioRpcError, ValueError); an fp16 or
    int8 file refused for good (not a transient error) is noted in ``refused`` and the others
    go on; a transient error raises, for the caller to retry."""
    if not token:
        raise ValueError("publishing needs a trainer token (--token or $KGRPC_TRAINER_TOKEN)")
    base = variant_path(path, FP32)
    if not base.is_file():
        raise FileNotFoundError(f"{base}: no such model file (a release needs its fp32 file)")
    done = set() if done is None else done
    outcome: ReleaseOutcome | None = None
    async with make_channel(address, token=token, tls_ca=tls_ca or None) as channel:
        stub = coordinator_pb2_grpc.CoordinatorStub(channel)
        for precision in existing_variants(base):
            f = variant_path(base, precision)
            if precision in done and precision != FP32:
                continue
            try:
                resp = await _publish_file(stub, f, chunk_bytes, timeout_s)
            except grpc.aio.AioRpcError as exc:
                if precision == FP32 or exc.code() in RETRYABLE_CODES:
                    raise
                assert outcome is not None
                outcome.refused[precision] = f"{exc.code().name}: {exc.details()}"
                continue
            except (OSError, ValueError) as exc:
                if precision == FP32:
                    raise
                assert outcome is not None
                outcome.refused[precision] = str(exc)
                continue
            if outcome is None:
                outcome = ReleaseOutcome(resp)
            outcome.response = resp
            outcome.sent.append(precision)
            done.add(precision)
    assert outcome is not None  # the fp32 file exists, and it was published or raised
    return outcome


def publish_model_sync(
    address: str, token: str, path: str | os.PathLike[str], **kw: object
) -> coordinator_pb2.PublishModelResponse:
    """For the synchronous training loop: a private event loop per call."""
    return asyncio.run(publish_model(address, token, path, **kw))  # type: ignore[arg-type]


def publish_release_sync(
    address: str, token: str, path: str | os.PathLike[str], **kw: object
) -> ReleaseOutcome:
    """:func:`publish_release` on a private event loop."""
    return asyncio.run(publish_release(address, token, path, **kw))  # type: ignore[arg-type]


def describe_response(resp: coordinator_pb2.PublishModelResponse) -> str:
    from kgrpc.precision import info_precisions

    what = "gating match scheduled" if resp.gating_scheduled else "released"
    return (
        f"published {resp.model.name} ({resp.model.size_bytes} bytes): {what}; "
        f"files {', '.join(info_precisions(resp.model))}"
    )


def describe_release(outcome: ReleaseOutcome) -> str:
    """One line per refused file after the model's line."""
    lines = [describe_response(outcome.response)]
    for precision, why in outcome.refused.items():
        lines.append(
            f"{outcome.response.model.name} {precision} file refused: {why} "
            f"(clients use the {FP32} file)"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- retrying


def unpublished_candidate(models_dir: str | os.PathLike[str]) -> Path | None:
    """The newest exported model (most training steps) in ``models_dir`` whose publish was
    neither acknowledged nor refused, if it is the newest export at all (an older one is
    superseded by the newer)."""
    newest: tuple[int, int, Path] | None = None
    for p in Path(models_dir).glob("*.onnx"):
        if precision_of_path(p) != FP32:
            continue  # published with its release's fp32 file
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
        self._done: dict[Path, set[str]] = {}  # precisions acknowledged, per release
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
        self._done.pop(path, None)
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
        done = self._done.setdefault(path, set())
        try:
            outcome = await publish_release(
                self.address,
                self.token,
                path,
                tls_ca=self.tls_ca,
                timeout_s=self.timeout_s,
                done=done,
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() in RETRYABLE_CODES:
                with self._lock:
                    if self._pending != path:
                        self._done.pop(path, None)
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
        self.published.append(outcome.response.model.name)
        for line in describe_release(outcome).splitlines():
            self.report(line)
        self._finish(path, PUBLISHED_SUFFIX, outcome.response.model.sha256 + "\n")
        return None
