"""The worker's model cache: ``<dir>/<name>.onnx``, downloaded from the coordinator in chunks,
resumed after an interruption (``<name>.onnx.part`` keeps the bytes so far) and checked
against the sha256 the coordinator announces before it is used."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
from pathlib import Path

import grpc

from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc

log = logging.getLogger("kgrpc.worker.models")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


class ModelDownloadError(RuntimeError):
    pass


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class ModelCache:
    def __init__(self, directory: str | os.PathLike[str], keep: int = 4) -> None:
        # A volunteer's worker runs for weeks and a release comes every hour or so: only the
        # `keep` newest model files stay on disk (0 = keep all). A pruned one that is needed
        # again (an old reference model in a gating match) is simply downloaded again.
        self.keep = keep
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._verified: dict[str, str] = {}  # name -> sha256 checked this run
        self._locks: dict[str, asyncio.Lock] = {}
        self.downloads = 0
        self.resumed_bytes = 0

    def path(self, name: str) -> Path:
        if not _SAFE_NAME.match(name):
            raise ModelDownloadError(f"model name {name!r} is not usable as a file name")
        return self.dir / f"{name}.onnx"

    def has(self, name: str) -> bool:
        return name in self._verified and self.path(name).exists()

    async def ensure(
        self,
        stub: coordinator_pb2_grpc.CoordinatorStub,
        name: str,
        sha256: str = "",
        *,
        timeout_s: float = 600.0,
    ) -> Path:
        """The verified local file of model ``name``, downloading (or resuming) as needed."""
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            final = self.path(name)
            if (
                name in self._verified
                and final.exists()
                and (not sha256 or self._verified[name] == sha256)
            ):
                return final
            if final.exists() and not sha256:
                # Cached by an earlier run: ask for the announced sha256 (a download from the
                # end of the file carries only the model info) instead of fetching it again.
                sha256 = await self._announced_sha256(stub, name, final.stat().st_size)
            if final.exists() and sha256:
                digest = await asyncio.to_thread(sha256_file, final)
                if digest == sha256:
                    self._verified[name] = digest
                    return final
                log.warning(
                    "cached %s has sha256 %s, expected %s: downloading again",
                    final.name,
                    digest[:12],
                    sha256[:12],
                )
                final.unlink()
            await self._download(stub, name, sha256, timeout_s)
            return final

    @staticmethod
    async def _announced_sha256(
        stub: coordinator_pb2_grpc.CoordinatorStub, name: str, offset: int
    ) -> str:
        call = stub.DownloadModel(
            coordinator_pb2.DownloadModelRequest(name=name, offset=offset), timeout=30
        )
        try:
            async for chunk in call:
                if chunk.HasField("info"):
                    return str(chunk.info.sha256)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.OUT_OF_RANGE:  # a longer file: download it anew
                raise
        finally:
            call.cancel()
        return ""

    async def _download(
        self, stub: coordinator_pb2_grpc.CoordinatorStub, name: str, sha256: str, timeout_s: float
    ) -> None:
        final = self.path(name)
        part = final.with_name(final.name + ".part")
        offset = part.stat().st_size if part.exists() else 0
        if offset:
            log.info("resuming download of %s at byte %d", name, offset)
            self.resumed_bytes += offset
        expected_sha, expected_size = sha256, -1
        call = stub.DownloadModel(
            coordinator_pb2.DownloadModelRequest(name=name, offset=offset), timeout=timeout_s
        )
        with open(part, "ab") as f:
            async for chunk in call:
                if chunk.HasField("info"):
                    expected_size = chunk.info.size_bytes
                    if chunk.info.sha256:
                        if expected_sha and chunk.info.sha256 != expected_sha:
                            raise ModelDownloadError(
                                f"{name}: coordinator sends sha256 {chunk.info.sha256}, "
                                f"release said {expected_sha}"
                            )
                        expected_sha = chunk.info.sha256
                if chunk.data:
                    if chunk.offset != f.tell():
                        raise ModelDownloadError(
                            f"{name}: chunk at offset {chunk.offset}, expected {f.tell()}"
                        )
                    f.write(chunk.data)
            f.flush()
            os.fsync(f.fileno())
        size = part.stat().st_size
        if expected_size >= 0 and size != expected_size:
            if size > expected_size:
                part.unlink()
            raise ModelDownloadError(f"{name}: got {size} bytes, expected {expected_size}")
        digest = await asyncio.to_thread(sha256_file, part)
        if expected_sha and digest != expected_sha:
            part.unlink()  # a corrupt prefix would be resumed forever: start over next time
            raise ModelDownloadError(f"{name}: sha256 {digest} does not match {expected_sha}")
        os.replace(part, final)
        self._verified[name] = digest
        self.downloads += 1
        self.prune(protect=name)
        log.info("downloaded model %s (%d bytes, sha256 %s)", name, size, digest[:12])

    def prune(self, protect: str = "") -> list[str]:
        """Delete all but the ``keep`` most recently downloaded models (never ``protect``).

        An engine that already loaded a deleted file keeps working: the session holds its own
        copy of the weights.
        """
        if self.keep <= 0:
            return []
        files = sorted(self.dir.glob("*.onnx"), key=lambda p: p.stat().st_mtime, reverse=True)
        removed = []
        for path in files[self.keep :]:
            if path.stem == protect:
                continue
            path.unlink(missing_ok=True)
            self._verified.pop(path.stem, None)
            removed.append(path.stem)
        if removed:
            log.info(
                "model cache: removed %s (keeping the %d newest)", ", ".join(removed), self.keep
            )
        return removed
