"""The S3 settings of every program that opens a blob store, declared once.

The coordinator's :class:`~kgrpc.coordinator.config.Config` and the trainer's
:class:`~trainer.config.TrainConfig` both derive from :class:`StoreSettings`, so each program
has the same TOML keys and flags (``store_endpoint``, ``--store-endpoint`` ...) under its own
variable prefix (``KGRPC_COORDINATOR_STORE_ENDPOINT``, ``KGRPC_TRAINER_STORE_ENDPOINT``);
their ``--help`` lists them after the program's own settings (:mod:`kgrpc.settings`). The
``store`` URL itself stays each program's own field: what it means differs between them.
docs/operations.md ("The blob store (S3)") has the table of these settings and the AWS
variables read when one is empty.
"""

from __future__ import annotations

from dataclasses import dataclass

from kgrpc.blobstore.s3 import S3Options
from kgrpc.settings import setting

STORE_SECRETS = ("store_secret_access_key",)
"""The settings here that are secrets: never persisted (checkpoints, logs), a warning when one
is given as a flag (``ps`` shows command lines)."""


@dataclass
class StoreSettings:
    """Where and as whom an S3 store is reached; each empty one is read from its AWS variable
    when the store is opened (:meth:`S3Options.resolved`)."""

    store_endpoint: str = setting(
        "",
        "S3 endpoint URL (e.g. http://127.0.0.1:8333); empty = AWS_ENDPOINT_URL, else AWS",
        group="object store (S3)",
    )
    store_region: str = setting("", "S3 region; empty = AWS_REGION or AWS_DEFAULT_REGION")
    store_access_key_id: str = setting("", "S3 access key id; empty = AWS_ACCESS_KEY_ID")
    store_secret_access_key: str = setting(
        "", "S3 secret key; empty = AWS_SECRET_ACCESS_KEY (better: a variable, not a flag)"
    )

    def store_options(self) -> S3Options:
        """These settings as the S3 backend's options (empty ones still unresolved)."""
        return S3Options(
            endpoint=self.store_endpoint,
            region=self.store_region,
            access_key_id=self.store_access_key_id,
            secret_access_key=self.store_secret_access_key,
        )
