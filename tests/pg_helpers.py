"""A real PostgreSQL server for tests: ``initdb`` in a temporary directory, loopback only.

PostgreSQL refuses to run as root, so as root the server runs as the ``postgres`` user
(``runuser``) in a directory handed to it. Each test takes a database of its own
(:meth:`PostgresServer.new_database`), so tests never see each other's rows. The binaries
come from Debian's ``postgresql`` package (``make system-deps`` installs it); without them
the tests that need the server are skipped, except under CI (``CI`` set), where they fail.
The server itself is kgrpc.programs.bench.engines' (``kgrpc-bench ingest`` starts one too).
"""

from kgrpc.programs.bench.engines import PostgresServer, find_bin_dir

__all__ = ["PostgresServer", "find_bin_dir"]
