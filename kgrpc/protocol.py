"""Protocol rules both ends of an RPC follow that the protos cannot express.

Each is defined here once and imported by the coordinator (which answers) and by the worker
or any other client (which acts on the answer); docs/clients.md states them for clients in
other languages.

Errors a client acts on carry a machine-readable form, the gRPC error model's
``google.rpc.Status`` in the ``grpc-status-details-bin`` trailer, holding one
``google.rpc.ErrorInfo`` (domain :data:`ERROR_DOMAIN`, reason such as ``MATCH_SUPERSEDED``,
metadata naming what the error is about) beside the human message, which still starts with
the reason's old string prefix (``match_superseded: ...``) for clients of the last release.
Clients read the structured form (:func:`error_info`) and fall back to the prefix only when
an answer has none (a coordinator of the last release).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import grpc
    from google.rpc import error_details_pb2

ERROR_DOMAIN = "kgrpc.v1"
"""``ErrorInfo.domain`` of every structured error kgrpc answers."""
DETAILS_KEY = "grpc-status-details-bin"
"""The trailer that holds the serialized ``google.rpc.Status`` (the gRPC error model's key)."""


def reason(prefix: str) -> str:
    """The ``ErrorInfo.reason`` of a details prefix: ``match_superseded`` -> ``MATCH_SUPERSEDED``
    (UPPER_SNAKE_CASE, as the error model asks)."""
    return prefix.upper()


def status_trailer(
    code: grpc.StatusCode, message: str, why: str, metadata: Mapping[str, str] | None = None
) -> tuple[tuple[str, bytes], ...]:
    """The trailing metadata of an error answered with code ``code`` and details ``message``
    that carries ``ErrorInfo(reason=why, domain=ERROR_DOMAIN, metadata)`` (server side)."""
    from google.protobuf import any_pb2
    from google.rpc import error_details_pb2, status_pb2

    info = error_details_pb2.ErrorInfo(reason=why, domain=ERROR_DOMAIN, metadata=metadata or {})
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(code=code.value[0], message=message, details=[detail])
    return ((DETAILS_KEY, status.SerializeToString()),)


def error_info(err: BaseException) -> error_details_pb2.ErrorInfo | None:
    """The ``ErrorInfo`` of domain :data:`ERROR_DOMAIN` an RPC error carries in its
    ``grpc-status-details-bin`` trailer; None when it carries none (or one that does not
    agree with the call's own code and message, which the error model forbids)."""
    trailer = getattr(err, "trailing_metadata", None)
    if trailer is None:
        return None
    try:
        from google.rpc import error_details_pb2
        from grpc_status import rpc_status

        status = rpc_status.from_call(err)  # checks code and message against the call's
    except (ImportError, ValueError):
        return None
    if status is None:
        return None
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info) and info.domain == ERROR_DOMAIN:
            return info
    return None


def _says(err: BaseException, code_name: str, prefix: str) -> bool:
    """Whether the RPC error ``err`` has code ``code_name`` and the reason of ``prefix``: from
    its ErrorInfo, or, when it has none (a coordinator of the last release), its details."""
    code = _call(err, "code")
    if code is None or getattr(code, "name", None) != code_name:
        return False
    info = error_info(err)
    if info is not None:
        return info.reason == reason(prefix)
    return str(_call(err, "details") or "").startswith(prefix)


def _call(err: BaseException, method: str) -> Any:
    fn = getattr(err, method, None)
    return fn() if callable(fn) else None


MATCH_SUPERSEDED = "match_superseded"
"""Details of the FAILED_PRECONDITION that ``ReportMatchResult`` answers for a match task whose
match was superseded by a release: the client drops the task and its remaining games at once
(no retry; nothing was recorded)."""


def is_match_superseded(err: BaseException) -> bool:
    """Whether a ReportMatchResult error says "superseded" (ErrorInfo metadata: ``task_id``,
    ``candidate``, ``reference``, ``best``)."""
    return _says(err, "FAILED_PRECONDITION", MATCH_SUPERSEDED)


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


def is_version_too_old(err: BaseException) -> bool:
    """Whether a Register error says "this worker is too old" (ErrorInfo metadata:
    ``minimum``, ``version``)."""
    return _says(err, "FAILED_PRECONDITION", VERSION_TOO_OLD)


PRECISION_ABSENT = "precision_absent"
"""Details of the NOT_FOUND that ``DownloadModel`` answers for a known model that has no file
in the precision asked for: the client asks for the fp32 file instead (every model has one).
Any other NOT_FOUND means the model itself is unknown."""


def is_precision_absent(err: BaseException) -> bool:
    """Whether a DownloadModel error says "no file in that precision" (rather than "no such
    model"; ErrorInfo metadata: ``model``, ``precision``, ``available``)."""
    return _says(err, "NOT_FOUND", PRECISION_ABSENT)
