"""Parity of a model file against a reference: figures, bounds and refusal.

The trainer measures every export against the torch model (:mod:`trainer.parity`); the
coordinator measures an fp16 or int8 file against the model's fp32 file when it is published
(:mod:`kgrpc.coordinator.model_check`). Both use the figures and bounds defined here once:

- ``top1``: share of positions where the file's highest-policy move (board or pass) is the
  reference's, or a near-tie of it: one the reference gives at least TOP1_TIE_RATIO of its top
  move's probability;
- ``kl``: mean KL(reference || file) of the policy softmax, in nats;
- ``value_mae`` (tanh value, range [-1, 1]), ``score_mae`` (points), ``ownership_mae``;
- ``max_abs_diff``: the worst single output difference (score divided by a scale);
- ``ref_entropy``: the reference policy's mean entropy. Near log(N*N+1) the policy is flat (a
  fresh network) and top-1 agreement measures ties broken by noise, not a change of play.

Bounds (:class:`ParityBounds`; docs/training.md explains them): top-1 >= 0.95; value MAE <= 0.03
(1.5% of the value's range); score MAE <= 0.6 points (the same 0.03 in the score head's own unit
of SCORE_SCALE = 20 points); KL <= 0.02 nats, which by Pinsker's inequality moves at most
sqrt(0.02 / 2) = 10% of the policy's probability mass, less than the 25% of root noise
self-play mixes into the same prior. Ownership is reported, not bounded (the search does not use
it). numpy only: no torch, no ONNX.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields

import numpy as np

# Which of two moves the reference rates within 10% of each other comes out on top is rounding,
# not a change of play: the search mixes 25% root noise into the same prior, and KL bounds the
# shift of the whole distribution. Counted strictly, int8 files of learn9 nets whose KL was
# 0.001-0.01 nats failed top-1 at 92-95% with nearly every disagreement such a tie (the file's
# top move had 87-100% of the reference's top probability; docs/results/int8-trunk8/).
TOP1_TIE_RATIO = 0.9

# One model's outputs for one position set: policy logits [B, N*N+1], value [B], score [B],
# ownership [B, N, N] (or [B, N*N]).
Outputs = Sequence[np.ndarray]


class ParityError(AssertionError):
    """A model file's outputs are too far from its reference's (the torch model, or the fp32
    file)."""


@dataclass(frozen=True)
class ParityBounds:
    min_top1: float = 0.95
    max_kl: float = 0.02
    max_value_mae: float = 0.03
    max_score_mae: float = 0.6

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_top1 <= 1.0:
            raise ValueError(f"min_top1 must be in [0, 1], got {self.min_top1}")
        for name in ("max_kl", "max_value_mae", "max_score_mae"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class ParityReport:
    precision: str
    positions: int
    top1: float
    kl: float
    value_mae: float
    score_mae: float
    ownership_mae: float
    max_abs_diff: float
    ref_entropy: float
    sizes: str  # e.g. "9,19"

    def violations(self, bounds: ParityBounds) -> list[str]:
        out = []
        if self.top1 < bounds.min_top1:
            out.append(f"policy top-1 agreement {self.top1:.1%} < {bounds.min_top1:.1%}")
        if self.kl > bounds.max_kl:
            out.append(f"policy KL {self.kl:.3g} > {bounds.max_kl:.3g} nats")
        if self.value_mae > bounds.max_value_mae:
            out.append(f"value MAE {self.value_mae:.3g} > {bounds.max_value_mae:.3g}")
        if self.score_mae > bounds.max_score_mae:
            out.append(f"score MAE {self.score_mae:.3g} > {bounds.max_score_mae:.3g} points")
        if not all(
            math.isfinite(getattr(self, f))
            for f in ("top1", "kl", "value_mae", "score_mae", "ownership_mae")
        ):
            out.append("non-finite outputs (NaN or infinity)")
        return out

    def check(self, bounds: ParityBounds) -> ParityReport:
        """``self``, or ParityError listing every bound exceeded."""
        bad = self.violations(bounds)
        if bad:
            raise ParityError(
                f"{self.precision} export refused: "
                + "; ".join(bad)
                + f" (on {self.positions} held-out positions, sizes {self.sizes})"
            )
        return self

    def summary(self) -> str:
        return (
            f"{self.precision}: top-1 {self.top1:.1%}, KL {self.kl:.2g}, "
            f"value MAE {self.value_mae:.2g}, score MAE {self.score_mae:.2g}, "
            f"ownership MAE {self.ownership_mae:.2g} on {self.positions} positions "
            f"(sizes {self.sizes}; torch policy entropy {self.ref_entropy:.2f} nats)"
        )

    def to_metadata(self, prefix: str) -> dict[str, str]:
        """``{prefix}top1`` ... string entries for the model's ``kgrpc.*`` metadata (the
        prefix ends in kgrpc.schema.MODEL_PARITY_PREFIX)."""
        return {
            f"{prefix}{k}": (f"{v:.6g}" if isinstance(v, float) else str(v))
            for k, v in asdict(self).items()
            if k != "precision"
        }

    @classmethod
    def from_metadata(
        cls, meta: dict[str, str], prefix: str, precision: str
    ) -> ParityReport | None:
        """The report recorded by :meth:`to_metadata`, or None when there is none."""
        values: dict[str, object] = {"precision": precision}
        for f in fields(cls):
            if f.name == "precision":
                continue
            raw = meta.get(f"{prefix}{f.name}")
            if raw is None:
                return None
            kind = {"positions": int, "sizes": str}.get(f.name, float)
            try:
                values[f.name] = kind(raw)
            except ValueError:
                return None
        return cls(**values)  # type: ignore[arg-type]


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64)
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def compare(
    precision: str,
    refs: Sequence[Outputs],
    outs: Sequence[Outputs],
    *,
    score_scale: float = 1.0,
    reference: str = "torch",
) -> ParityReport:
    """Parity figures over several position sets (one Outputs per set, same order) of the
    ``precision`` file against ``reference``; ``max_abs_diff`` takes score differences divided
    by ``score_scale``."""
    agree = kl = v_err = s_err = o_err = entropy = 0.0
    n = o_count = 0
    worst = 0.0
    sizes = []
    for ref, out in zip(refs, outs, strict=True):
        rp, rv, rs, ro = (np.asarray(a, dtype=np.float64) for a in ref)
        op, ov, os_, oo = (np.asarray(a, dtype=np.float64) for a in out)
        if rp.shape != op.shape or rv.shape != ov.shape:
            raise ParityError(
                f"{precision}: output shapes differ: {reference} policy {rp.shape}, "
                f"export {op.shape}"
            )
        b = rp.shape[0]
        sizes.append(str(int(round(math.sqrt(rp.shape[1] - 1)))))
        lp, lq = _log_softmax(rp), _log_softmax(op)
        p = np.exp(lp)
        p_file_top = p[np.arange(b), op.argmax(axis=1)]
        agree += float((p_file_top >= TOP1_TIE_RATIO * p.max(axis=1)).sum())
        kl += float((p * (lp - lq)).sum())
        entropy += float(-(p * lp).sum())
        v_err += float(np.abs(rv - ov).sum())
        s_err += float(np.abs(rs - os_).sum())
        o_err += float(np.abs(ro.reshape(b, -1) - oo.reshape(b, -1)).sum())
        o_count += ro.size
        n += b
        diffs = (
            np.abs(rp - op),
            np.abs(rv - ov),
            np.abs(rs - os_) / score_scale,
            np.abs(ro.reshape(b, -1) - oo.reshape(b, -1)),
        )
        worst = max(worst, *(float(d.max()) if d.size else 0.0 for d in diffs))
    if n == 0:
        raise ValueError("parity needs at least one position")
    # KL >= 0; rounding gives -1e-17 for identical policies.
    return ParityReport(
        precision,
        n,
        agree / n,
        max(0.0, kl / n),
        v_err / n,
        s_err / n,
        o_err / max(1, o_count),
        worst,
        entropy / n,
        ",".join(sizes),
    )
