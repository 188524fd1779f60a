"""Follow the coordinator's model releases (``kgrpc-inference --coordinator ADDR --token T``).

The channel is :func:`kgrpc.net.make_channel`'s: plaintext, or TLS with
``--coordinator-tls-ca PEM`` (the token then rides on call credentials).

``WatchModels`` (server stream) announces each released model; the file comes from
``DownloadModel`` chunks, is checked against the announced sha256 and size, and is stored
atomically as ``<model_dir>/<name>.onnx`` (so an existing file is a verified one and is not
downloaded again). Each release is loaded beside the current model and becomes the default;
the previous one is unloaded once idle. ``fetch(name)`` is also the registry's on-demand
fetcher for a request naming a published model that is not loaded (a gating match).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import tempfile
from pathlib import Path

import grpc

from inference.models import ModelRegistry
from kgrpc.net import make_channel
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc

log = logging.getLogger("kgrpc.inference.follow")

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def _as_ca(tls_ca: str | bytes | os.PathLike[str] | None) -> str | bytes | Path | None:
    # make_channel takes PEM bytes or a path; "" (the config default) means plaintext.
    if tls_ca is None or isinstance(tls_ca, bytes):
        return tls_ca
    return Path(tls_ca) if str(tls_ca) else None


class CoordinatorFollower:
    def __init__(self, address: str, token: str | None, model_dir: str | os.PathLike[str],
                 registry: ModelRegistry, *, retry_s: float = 1.0,
                 max_retry_s: float = 30.0,
                 tls_ca: str | bytes | os.PathLike[str] | None = None) -> None:
        self.address = address
        self.token = token
        # CA (or self-signed coordinator certificate, PEM path or bytes): makes the channel TLS.
        self.tls_ca = tls_ca
        self.model_dir = Path(model_dir)
        self.registry = registry
        self.retry_s = retry_s
        self.max_retry_s = max_retry_s
        self._channel: grpc.aio.Channel | None = None
        self._locks: dict[str, asyncio.Lock] = {}
        self.releases_loaded = 0

    @property
    def stub(self) -> coordinator_pb2_grpc.CoordinatorStub:
        if self._channel is None:
            # The shared client channel: TLS when a CA is given, the token attached to every
            # call (call credentials on TLS, interceptors on plaintext), 64 MiB messages and
            # keepalive, which also keeps the long WatchModels stream alive through NATs.
            self._channel = make_channel(self.address, token=self.token,
                                         tls_ca=_as_ca(self.tls_ca))
        return coordinator_pb2_grpc.CoordinatorStub(self._channel)

    async def fetch(self, name: str) -> str:
        """Local path of model ``name``, downloading it first if needed.

        Raises KeyError when the coordinator does not know the model.
        """
        if not _SAFE_NAME.match(name):
            raise KeyError(name)
        path = self.model_dir / f"{name}.onnx"
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            if path.is_file():
                return str(path)
            try:
                await self._download(name, path)
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.NOT_FOUND:
                    raise KeyError(name) from exc
                raise
        return str(path)

    async def _download(self, name: str, path: Path) -> None:
        self.model_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=self.model_dir)
        digest = hashlib.sha256()
        size = 0
        info = None
        try:
            with os.fdopen(fd, "wb") as f:
                call = self.stub.DownloadModel(
                    coordinator_pb2.DownloadModelRequest(name=name, offset=0))
                async for chunk in call:
                    if chunk.HasField("info"):
                        info = chunk.info
                    if chunk.offset != size:
                        raise OSError(f"model {name}: chunk at offset {chunk.offset}, "
                                      f"expected {size}")
                    f.write(chunk.data)
                    digest.update(chunk.data)
                    size += len(chunk.data)
                f.flush()
                os.fsync(f.fileno())
            if info is None:
                raise OSError(f"model {name}: download carried no model info")
            if size != info.size_bytes or digest.hexdigest() != info.sha256:
                raise OSError(f"model {name}: got {size} bytes sha256 {digest.hexdigest()}, "
                              f"announced {info.size_bytes} bytes sha256 {info.sha256}")
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        log.info("downloaded model %s (%d bytes) to %s", name, size, path)

    async def run(self) -> None:
        """Follow releases until cancelled, reconnecting with backoff."""
        delay = self.retry_s
        while True:
            try:
                call = self.stub.WatchModels(
                    coordinator_pb2.WatchModelsRequest(known_model=self.registry.default))
                async for release in call:
                    delay = self.retry_s
                    name = release.model.name
                    if name == self.registry.default:
                        continue
                    path = await self.fetch(name)
                    await self.registry.load(path, make_default=True, retire_previous=True)
                    self.releases_loaded += 1
                    log.info("following release %s", name)
            except asyncio.CancelledError:
                raise
            except (grpc.aio.AioRpcError, OSError, KeyError) as exc:
                log.warning("coordinator %s: %s; retrying in %.1fs", self.address,
                            exc.details() if isinstance(exc, grpc.aio.AioRpcError) else exc,
                            delay)
            except Exception as exc:
                # A release ONNX Runtime cannot load (or any other surprise) must not end the
                # following: the server keeps its model and takes the next release.
                log.error("following releases: %s: %s; retrying in %.1fs",
                          type(exc).__name__, exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.max_retry_s)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
