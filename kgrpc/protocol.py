"""Protocol rules both ends of an RPC follow that the protos cannot express.

Each is defined here once and imported by the coordinator (which answers) and by the worker
or any other client (which acts on the answer); docs/clients.md states them for clients in
other languages.
"""

from __future__ import annotations

MATCH_SUPERSEDED = "match_superseded"
"""Details of the FAILED_PRECONDITION that ``ReportMatchResult`` answers for a match task whose
match was superseded by a release: the client drops the task and its remaining games at once
(no retry; nothing was recorded)."""


def is_match_superseded(code_name: str, details: str | None) -> bool:
    """Whether a ReportMatchResult error (status code name, details) says "superseded"."""
    return code_name == "FAILED_PRECONDITION" and (details or "").startswith(MATCH_SUPERSEDED)


PRECISION_ABSENT = "precision_absent"
"""Details of the NOT_FOUND that ``DownloadModel`` answers for a known model that has no file
in the precision asked for: the client asks for the fp32 file instead (every model has one).
Any other NOT_FOUND means the model itself is unknown."""


def is_precision_absent(code_name: str, details: str | None) -> bool:
    """Whether a DownloadModel error (status code name, details) says "no file in that
    precision" (rather than "no such model")."""
    return code_name == "NOT_FOUND" and (details or "").startswith(PRECISION_ABSENT)
