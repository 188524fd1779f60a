"""Pull training shards from the coordinator (``ListShards`` / ``DownloadShard``).

For a trainer without access to the coordinator's data directory. Shards land in the same
layout the coordinator uses, ``DEST/training_data/<run>/<file_name>``, so the rest of the
trainer reads a local cache exactly as it would read the coordinator's own directory.

A download goes to ``<file_name>.part`` (resumed from its length after an interruption, using
``DownloadShard.offset``), is checked against the listed size and sha256, fsynced and renamed
into place, and the directory is fsynced (as kgrpc.shards does) so the rename survives a crash;
a shard already present with the listed size is skipped. Shards are immutable once listed, so
size is enough to recognise a complete one.

A shard of the cache that the listing no longer names (the coordinator leaves out the shards
holding games of a quarantined token: ``kgrpc-coordinator token quarantine``) is moved to
``DEST/training_data/<run>/withdrawn/``, which the trainer does not read, so its next window
holds none of those rows; listed again (the quarantine lifted), it is moved back.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from kgrpc.durable import fsync_dir
from kgrpc.net import make_channel
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc

log = logging.getLogger("kgrpc.train.shards")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


class ShardDownloadError(RuntimeError):
    pass


@dataclass
class PullResult:
    downloaded: list[Path]
    present: int
    bytes: int
    withdrawn: list[Path] = field(default_factory=list)  # moved out of the window
    restored: list[Path] = field(default_factory=list)  # moved back into it


WITHDRAWN_DIR = "withdrawn"
_SHARD_FILE = re.compile(r"^games_\d+\.npz$")  # trainer.data reads these


def _move(src: Path, dest: Path) -> None:
    dest.parent.mkdir(exist_ok=True)
    src.replace(dest)
    fsync_dir(dest.parent)
    fsync_dir(src.parent)


def _withdraw_unlisted(run_dir: Path, listed: set[str], result: PullResult) -> None:
    """Move the cache's shards of ``run_dir`` that the listing no longer names aside."""
    if not run_dir.is_dir():
        return
    for p in sorted(run_dir.iterdir()):
        if p.is_file() and _SHARD_FILE.match(p.name) and p.name not in listed:
            _move(p, run_dir / WITHDRAWN_DIR / p.name)
            result.withdrawn.append(p)
            log.warning("shard %s is no longer listed (a quarantine): withdrawn", p)


def _safe(part: str, what: str) -> str:
    # Names come from the network: never let one escape the cache directory.
    if not _SAFE_NAME.match(part) or part in (".", ".."):
        raise ShardDownloadError(f"refusing {what} {part!r} from the coordinator")
    return part


async def _download(
    stub: coordinator_pb2_grpc.CoordinatorStub,
    info: coordinator_pb2.ShardInfo,
    dest: Path,
    timeout_s: float,
) -> int:
    part = dest.with_name(dest.name + ".part")
    offset = part.stat().st_size if part.exists() else 0
    if offset > info.size_bytes:
        part.unlink()
        offset = 0
    got = 0
    with open(part, "ab") as f:
        call = stub.DownloadShard(
            coordinator_pb2.DownloadShardRequest(
                run=info.run, file_name=info.file_name, offset=offset
            ),
            timeout=timeout_s,
        )
        async for chunk in call:
            if chunk.offset != offset + got:
                raise ShardDownloadError(
                    f"{info.file_name}: chunk at offset {chunk.offset}, expected {offset + got}"
                )
            f.write(chunk.data)
            got += len(chunk.data)
        f.flush()
        os.fsync(f.fileno())
    size = part.stat().st_size
    sha = hashlib.sha256()
    with open(part, "rb") as f:
        while block := f.read(1 << 20):
            sha.update(block)
    if size != info.size_bytes or (info.sha256 and sha.hexdigest() != info.sha256):
        part.unlink(missing_ok=True)  # start over next time
        raise ShardDownloadError(
            f"{info.run}/{info.file_name}: got {size} bytes sha256 "
            f"{sha.hexdigest()[:12]}, listed {info.size_bytes} bytes "
            f"sha256 {info.sha256[:12]}"
        )
    os.replace(part, dest)
    # The rename is durable only once the directory is: without this a crash can leave the
    # shard missing (or the .part back) although it was reported as pulled.
    fsync_dir(dest.parent)
    return got


async def pull_shards(
    address: str,
    token: str,
    dest_dir: str | os.PathLike[str],
    *,
    run: str = "",
    tls_ca: str | None = None,
    timeout_s: float = 600.0,
) -> PullResult:
    """Download every listed shard missing from ``dest_dir/training_data``."""
    if not token:
        raise ValueError("pulling shards needs a trainer token (--token or $KGRPC_TRAINER_TOKEN)")
    root = Path(dest_dir) / "training_data"
    result = PullResult([], 0, 0)
    async with make_channel(address, token=token, tls_ca=tls_ca or None) as channel:
        stub = coordinator_pb2_grpc.CoordinatorStub(channel)
        listing = await stub.ListShards(coordinator_pb2.ListShardsRequest(run=run), timeout=60)
        listed: dict[str, set[str]] = {run: set()} if run else {}
        for info in listing.shards:
            listed.setdefault(_safe(info.run, "run name"), set()).add(info.file_name)
        for name, files in listed.items():
            _withdraw_unlisted(root / name, files, result)
        for info in listing.shards:
            run_dir = root / _safe(info.run, "run name")
            dest = run_dir / _safe(info.file_name, "shard file name")
            aside = run_dir / WITHDRAWN_DIR / dest.name
            if not dest.exists() and aside.exists() and aside.stat().st_size == info.size_bytes:
                _move(aside, dest)  # listed again: back into the window, no new download
                result.restored.append(dest)
            if dest.exists() and dest.stat().st_size == info.size_bytes:
                result.present += 1
                continue
            if not run_dir.is_dir():
                run_dir.mkdir(parents=True, exist_ok=True)
                fsync_dir(run_dir.parent)
            result.bytes += await _download(stub, info, dest, timeout_s)
            result.downloaded.append(dest)
            log.info("pulled shard %s/%s (%d positions)", info.run, info.file_name, info.positions)
    return result


def pull_shards_sync(
    address: str, token: str, dest_dir: str | os.PathLike[str], **kw: object
) -> PullResult:
    return asyncio.run(pull_shards(address, token, dest_dir, **kw))  # type: ignore[arg-type]
