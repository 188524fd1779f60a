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


VERSION_TOO_OLD = "version_too_old"
"""Details prefix of the FAILED_PRECONDITION that ``Register`` answers a worker older than the
coordinator's ``min_worker_version``; the rest says what to install. The worker stops (no
retry can help) and logs it."""


def parse_version(text: str) -> tuple[int, ...] | None:
    """The numbers of ``kgrpc-worker/0.1.0`` (RegisterRequest.version) or ``0.1.0``: (0, 1, 0);
    a suffix after the numbers (``0.2.0rc1``, ``+local``) is ignored. None when there are no
    numbers to read."""
    text = text.strip().rsplit("/", 1)[-1]
    numbers = []
    for part in text.split("."):
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        numbers.append(int(digits))
        if len(digits) != len(part):
            break
    return tuple(numbers) or None


def older_than(version: str, minimum: str) -> bool:
    """Whether ``version`` is below ``minimum`` (``0.1`` equals ``0.1.0``); a version without
    numbers is older than any minimum."""
    got, floor = parse_version(version), parse_version(minimum)
    if floor is None:
        raise ValueError(f"{minimum!r} is not a version (expected numbers such as 0.2.0)")
    if got is None:
        return True
    width = max(len(got), len(floor))
    return got + (0,) * (width - len(got)) < floor + (0,) * (width - len(floor))


def is_version_too_old(code_name: str, details: str | None) -> bool:
    """Whether a Register error (status code name, details) says "this worker is too old"."""
    return code_name == "FAILED_PRECONDITION" and (details or "").startswith(VERSION_TOO_OLD)


PRECISION_ABSENT = "precision_absent"
"""Details of the NOT_FOUND that ``DownloadModel`` answers for a known model that has no file
in the precision asked for: the client asks for the fp32 file instead (every model has one).
Any other NOT_FOUND means the model itself is unknown."""


def is_precision_absent(code_name: str, details: str | None) -> bool:
    """Whether a DownloadModel error (status code name, details) says "no file in that
    precision" (rather than "no such model")."""
    return code_name == "NOT_FOUND" and (details or "").startswith(PRECISION_ABSENT)
