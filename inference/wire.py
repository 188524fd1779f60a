"""Wire encoding of the Inference service (protos/kgrpc/v1/inference.proto, docs/formats.md).

Planes: each position's bool [NUM_PLANES, N, N] planes flattened and ``numpy.packbits``-ed (big
bit order, last byte zero-padded) into ``packed_row_bytes(N) = ceil(NUM_PLANES*N*N/8)`` bytes; a
request's
``count`` rows are concatenated, so ``len(planes) == count * packed_row_bytes(N)``
(docs/formats.md section 2, counts from kgrpc/schema.py; identical to
``kgrpc.go.features.pack_planes(x).tobytes()``).
Globals: float32 little-endian [count, NUM_GLOBALS]. Results: policy float16 [count, N*N+1]
(probabilities), value and score float32 [count], ownership float16 [count, N*N].

No onnxruntime here: the client uses this module too.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
import numpy as np

from kgrpc.schema import FEATURE_VERSION, NUM_GLOBALS, NUM_PLANES, packed_row_bytes
from kgrpc.v1 import inference_pb2

MAX_BOARD_SIZE = 25
# Initial metadata an Evaluate stream opens with once the server accepts it (inference.proto).
STREAM_OPEN = ("kgrpc-stream", "open")
MAX_COUNT = 4096


class BadRequest(Exception):
    """A request the server refuses; ``code`` is the gRPC status to answer with."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def pack_planes(planes: np.ndarray) -> np.ndarray:
    """bool [B, NUM_PLANES, N, N] -> uint8 [B, packed_row_bytes(N)]."""
    b = planes.shape[0]
    return np.packbits(planes.reshape(b, -1).astype(bool, copy=False), axis=1)


def unpack_planes_f32(packed: np.ndarray, size: int) -> np.ndarray:
    """uint8 [B, K] -> float32 [B, NUM_PLANES, N, N] (0/1), the network's input."""
    bits = np.unpackbits(packed, axis=1, count=NUM_PLANES * size * size)
    return bits.reshape(packed.shape[0], NUM_PLANES, size, size).astype(np.float32)


@dataclass
class DecodedRequest:
    request_id: int
    model: str
    board_size: int
    count: int
    packed: np.ndarray  # uint8 [count, packed_row_bytes(N)]
    globals_: np.ndarray  # float32 [count, NUM_GLOBALS]
    want_ownership: bool


def decode_request(req: inference_pb2.EvalRequest) -> DecodedRequest:
    """Validate and decode; raises BadRequest(INVALID_ARGUMENT) saying what is wrong."""
    inv = grpc.StatusCode.INVALID_ARGUMENT
    n, count = req.board_size, req.count
    if not 2 <= n <= MAX_BOARD_SIZE:
        raise BadRequest(inv, f"board_size {n} out of range 2..{MAX_BOARD_SIZE}")
    if not 1 <= count <= MAX_COUNT:
        raise BadRequest(inv, f"count {count} out of range 1..{MAX_COUNT}")
    if req.feature_version not in (0, FEATURE_VERSION):
        raise BadRequest(
            inv, f"feature_version {req.feature_version} unsupported (server: {FEATURE_VERSION})"
        )
    row = packed_row_bytes(n)
    if len(req.planes) != count * row:
        raise BadRequest(
            inv,
            f"planes: {len(req.planes)} bytes, expected count*ceil({NUM_PLANES}*N*N/8) = "
            f"{count}*{row} = {count * row} for board_size {n}",
        )
    if len(req.globals) != count * NUM_GLOBALS * 4:
        raise BadRequest(
            inv,
            f"globals: {len(req.globals)} bytes, expected count*{NUM_GLOBALS} float32 = "
            f"{count * NUM_GLOBALS * 4}",
        )
    packed = np.frombuffer(req.planes, dtype=np.uint8).reshape(count, row)
    globals_ = np.frombuffer(req.globals, dtype="<f4").reshape(count, NUM_GLOBALS)
    if not np.isfinite(globals_).all():
        raise BadRequest(inv, "globals contain NaN or infinity")
    return DecodedRequest(req.request_id, req.model, n, count, packed, globals_, req.want_ownership)


def encode_request(
    request_id: int,
    planes: np.ndarray,
    globals_: np.ndarray,
    *,
    model: str = "",
    want_ownership: bool = False,
) -> inference_pb2.EvalRequest:
    """bool [B, NUM_PLANES, N, N] planes + float32 [B, NUM_GLOBALS] globals -> EvalRequest."""
    if planes.ndim != 4 or planes.shape[1] != NUM_PLANES or planes.shape[2] != planes.shape[3]:
        raise ValueError(f"planes must be [B, {NUM_PLANES}, N, N], got {planes.shape}")
    count, n = planes.shape[0], planes.shape[2]
    if globals_.shape != (count, NUM_GLOBALS):
        raise ValueError(f"globals must be [{count}, {NUM_GLOBALS}], got {globals_.shape}")
    return inference_pb2.EvalRequest(
        request_id=request_id,
        model=model,
        board_size=n,
        count=count,
        planes=pack_planes(planes).tobytes(),
        globals=np.ascontiguousarray(globals_, dtype="<f4").tobytes(),
        want_ownership=want_ownership,
        feature_version=FEATURE_VERSION,
    )


def encode_response(
    request_id: int,
    model: str,
    policy: np.ndarray,
    value: np.ndarray,
    score: np.ndarray,
    ownership: np.ndarray | None,
) -> inference_pb2.EvalResponse:
    return inference_pb2.EvalResponse(
        request_id=request_id,
        model=model,
        count=int(value.shape[0]),
        policy=policy.astype("<f2").tobytes(),
        value=value.astype("<f4").tobytes(),
        score=score.astype("<f4").tobytes(),
        ownership=b"" if ownership is None else ownership.astype("<f2").tobytes(),
    )


def decode_response(
    resp: inference_pb2.EvalResponse, board_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """-> float32 policy [count, N*N+1], value, score [count], ownership [count, N*N] | None."""
    count = resp.count
    nn = board_size * board_size
    policy = np.frombuffer(resp.policy, dtype="<f2").astype(np.float32).reshape(count, nn + 1)
    value = np.frombuffer(resp.value, dtype="<f4").copy()
    score = np.frombuffer(resp.score, dtype="<f4").copy()
    own = None
    if resp.ownership:
        own = np.frombuffer(resp.ownership, dtype="<f2").astype(np.float32).reshape(count, nn)
    return policy, value, score, own
