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
