"""The evaluation interface MCTS codes against, local or remote.

Deliberately free of torch and onnxruntime imports: a self-play worker that talks to a remote
inference server (``inference.client.InferenceClient``) needs neither. The in-process
implementation is ``inference.local.LocalEvaluator``.

Shapes (docs/formats.md section 2; N = board size, B = positions):

- input ``planes``: bool [B, NUM_PLANES, N, N]; ``globals_``: float32 [B, NUM_GLOBALS];
- :class:`EvalResult` ``policy`` float32 [B, N*N+1] probabilities (softmax over all points and
  pass; the caller masks illegal moves and renormalises), ``value`` float32 [B] in [-1, 1],
  ``score`` float32 [B] in points, ``ownership`` float32 [B, N*N] in [-1, 1] or None when not
  asked for. Everything from the point of view of the player to move.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass
class EvalResult:
    policy: np.ndarray
    value: np.ndarray
    score: np.ndarray
    ownership: np.ndarray | None = None
    model: str = ""

    def __len__(self) -> int:
        return int(self.value.shape[0])


class EvaluationError(RuntimeError):
    """An evaluation failed; ``code`` is the grpc.StatusCode name (e.g. "NOT_FOUND")."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@runtime_checkable
class Evaluator(Protocol):
    evals: int
    requests: int

    async def evaluate(
        self,
        planes: np.ndarray,
        globals_: np.ndarray,
        *,
        model: str = "",
        want_ownership: bool = False,
    ) -> EvalResult: ...

    async def close(self) -> None: ...
