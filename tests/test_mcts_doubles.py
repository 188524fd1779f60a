"""Test doubles of the evaluator protocol for the MCTS maths (no net involved).

They compute their outputs from the planes they are sent, so they exercise the real feature
encoding and symmetry handling of the search.
"""

from __future__ import annotations

import numpy as np

from kgrpc.evaluator import EvalResult


class FixedEvaluator:
    """Policy = a fixed vector (default uniform), value = a constant."""

    def __init__(self, policy: np.ndarray | None = None, value: float = 0.0) -> None:
        self.policy = policy
        self.value = value
        self.evals = 0
        self.requests = 0
        self.batch_sizes: list[int] = []
        self.models: list[str] = []

    async def evaluate(
        self,
        planes: np.ndarray,
        globals_: np.ndarray,
        *,
        model: str = "",
        want_ownership: bool = False,
    ) -> EvalResult:
        b, _, n, _ = planes.shape
        self.evals += b
        self.requests += 1
        self.batch_sizes.append(b)
        self.models.append(model)
        if self.policy is None:
            policy = np.full((b, n * n + 1), 1.0 / (n * n + 1), np.float32)
        else:
            policy = np.tile(self.policy.astype(np.float32), (b, 1))
        return EvalResult(policy, np.full(b, self.value, np.float32), np.zeros(b, np.float32))

    async def close(self) -> None:
        pass


class StoneCountEvaluator(FixedEvaluator):
    """Uniform policy; value = tanh(stone difference / 3) for the player to move (planes 1, 2)."""

    async def evaluate(
        self,
        planes: np.ndarray,
        globals_: np.ndarray,
        *,
        model: str = "",
        want_ownership: bool = False,
    ) -> EvalResult:
        result = await super().evaluate(planes, globals_, model=model)
        diff = planes[:, 1].sum(axis=(1, 2)).astype(np.float32) - planes[:, 2].sum(axis=(1, 2))
        result.value = np.tanh(diff / 3.0).astype(np.float32)
        result.score = diff.astype(np.float32)
        return result
