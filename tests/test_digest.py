"""kgrpc.digest: the one file hash every component identifies models and shards by."""

import hashlib
import os

from kgrpc.digest import CHUNK_BYTES, file_digest


def test_file_digest_matches_hashlib_across_chunk_boundaries(tmp_path) -> None:
    for size in (0, 1, CHUNK_BYTES, 2 * CHUNK_BYTES + 17):
        data = os.urandom(size)
        path = tmp_path / f"f{size}"
        path.write_bytes(data)
        got = file_digest(path)
        assert got.size == size
        assert got.sha256 == hashlib.sha256(data).hexdigest()
