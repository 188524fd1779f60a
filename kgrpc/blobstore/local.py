"""The local-directory backend: key ``a/b/c`` is the file ``ROOT/a/b/c``.

With ``ROOT`` the coordinator's data directory this is exactly the layout runs have always
had (``training_data/<run>/games_00001.npz``, ``models/NAME.onnx``), so an existing data
directory is a store as it is. Writes go through :mod:`kgrpc.durable` (temporary file in the
same directory, fsync, rename, directory fsync). A create-only put links the finished
temporary file to its name (``link(2)`` fails when the name exists), so two writers of one
key cannot both win and neither can replace the other's object.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from kgrpc.blobstore.base import (
    BlobExistsError,
    BlobNotFoundError,
    BlobStore,
    BlobStoreError,
    ObjectInfo,
    check_key,
    check_prefix,
)
from kgrpc.digest import file_digest
from kgrpc.durable import atomic_writer, fsync_dir

# kgrpc.durable's temporary files (".NAME.RANDOM.tmp"): never objects.
_TEMP = re.compile(r"^\..+\.tmp$")
COPY_BYTES = 1 << 20


class LocalBlobStore(BlobStore):
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.url = str(self.root)

    @property
    def is_local(self) -> bool:
        return True

    def local_path(self, key: str) -> Path:
        return self.root / check_key(key)

    # ------------------------------------------------------------------ writes
    def _finish(self, tmp: Path, final: Path, create_only: bool) -> None:
        """Move the fsynced ``tmp`` to ``final`` (or link it, create-only) durably."""
        try:
            if create_only:
                try:
                    os.link(tmp, final)
                except FileExistsError:
                    if file_digest(tmp) != file_digest(final):
                        raise BlobExistsError(
                            f"{final} exists with different content (create-only put)"
                        ) from None
                os.unlink(tmp)
            else:
                os.replace(tmp, final)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        fsync_dir(final.parent)

    def _write(self, key: str, fill: object, create_only: bool) -> ObjectInfo:
        final = self.local_path(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
        tmp = Path(name)
        try:
            with os.fdopen(fd, "wb") as f:
                fill(f)  # type: ignore[operator]
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self._finish(tmp, final, create_only)
        return ObjectInfo(key, final.stat().st_size)

    def put_bytes(self, key: str, data: bytes, *, create_only: bool = False) -> ObjectInfo:
        return self._write(key, lambda f: f.write(data), create_only)

    def put_file(
        self, key: str, path: str | os.PathLike[str], *, create_only: bool = False
    ) -> ObjectInfo:
        final = self.local_path(key)
        src = Path(path)
        if not src.is_file():
            raise BlobNotFoundError(f"no file {src} to store")
        if src.absolute() == final.absolute() or (final.exists() and src.samefile(final)):
            # The caller wrote the object's own file (atomically, through kgrpc.durable).
            return ObjectInfo(key, final.stat().st_size)

        def fill(f: object) -> None:
            with open(src, "rb") as s:
                shutil.copyfileobj(s, f, COPY_BYTES)  # type: ignore[arg-type]

        return self._write(key, fill, create_only)

    def delete(self, key: str) -> None:
        path = self.local_path(key)
        try:
            path.unlink()
        except FileNotFoundError:
            return
        fsync_dir(path.parent)

    # ------------------------------------------------------------------ reads
    def _open(self, key: str) -> object:
        try:
            return open(self.local_path(key), "rb")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise BlobNotFoundError(f"no object {key!r} in {self.url}") from None

    def get_bytes(self, key: str) -> bytes:
        with self._open(key) as f:  # type: ignore[attr-defined]
            return f.read()  # type: ignore[no-any-return]

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise ValueError(f"bad range: offset {offset}, length {length}")
        with self._open(key) as f:  # type: ignore[attr-defined]
            f.seek(offset)
            return f.read(length)  # type: ignore[no-any-return]

    def download(self, key: str, path: str | os.PathLike[str]) -> ObjectInfo:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        with self._open(key) as src, atomic_writer(target) as f:  # type: ignore[attr-defined]
            shutil.copyfileobj(src, f, COPY_BYTES)
        return ObjectInfo(key, target.stat().st_size)

    def stat(self, key: str) -> ObjectInfo | None:
        try:
            st = self.local_path(key).stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not os.path.isfile(self.local_path(key)):
            return None
        return ObjectInfo(key, st.st_size)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        check_prefix(prefix)
        # Walk only the directory the prefix names (or its parent, for a partial name).
        head, _, _ = prefix.rpartition("/")
        start = self.root / head if head else self.root
        found: list[ObjectInfo] = []
        for dirpath, dirnames, filenames in os.walk(start):
            rel_dir = Path(dirpath).relative_to(self.root).as_posix()
            base = "" if rel_dir == "." else rel_dir + "/"
            # Keep a directory that lies under the prefix or on the way to it.
            dirnames[:] = [
                d
                for d in dirnames
                if (base + d + "/").startswith(prefix) or prefix.startswith(base + d + "/")
            ]
            for name in filenames:
                key = base + name
                if _TEMP.match(name) or not key.startswith(prefix):
                    continue
                with contextlib.suppress(FileNotFoundError):
                    found.append(ObjectInfo(key, os.stat(os.path.join(dirpath, name)).st_size))
        found.sort(key=lambda o: o.key)
        return iter(found)

    def check(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BlobStoreError(f"store {self.url}: cannot create the directory: {exc}") from None
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise BlobStoreError(f"store {self.url}: the directory is not writable")
