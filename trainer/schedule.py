"""How much to train on, how fast, and how often: pure functions of the run's counters.

Three rules of the KataGo recipe (arXiv 1902.10565; docs/training.md, "Trainer recipe"), each
a function of counters the checkpoint keeps, so a resumed run continues where it stopped:

- :func:`window_rows`: the training window grows with the data. With ``c`` =
  ``window_min_rows``, ``a`` = ``window_exponent`` and ``b`` = ``window_growth``, a run that
  has produced ``N`` rows trains on the newest ``W(N)`` rows::

      W(N) = N                                  while N <= c
      W(N) = c * (1 + b * ((N / c) ** a - 1) / a)   beyond

  The slope at ``N = c`` is ``b`` (each new row adds ``b`` rows to the window) and falls as
  ``N ** (a - 1)``: early data, made by weak nets, leaves the window quickly while it is small,
  and a long run still trains on a window that keeps growing, more slowly than the data.
- :func:`lr_factor`: the learning rate's share of ``lr`` after ``samples`` training samples:
  a linear warm-up from 1/10 over ``lr_warmup_samples``, then ``constant``, ``step`` (times
  ``lr_decay_factor`` every ``lr_decay_samples``) or ``cosine`` (down to ``lr_decay_factor``
  over ``lr_decay_samples``, then flat).
- :class:`SampleBudget`: training samples per new data row held near ``samples_per_row``:
  every new row adds that many samples of credit; a generation trains the credit in whole
  steps, at most ``steps_per_generation``; what is left carries over, at most one
  generation's worth (so a trainer that fell behind does not owe the past forever).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainer.config import TrainConfig

WARMUP_START = 0.1  # the warm-up starts at lr / 10


def window_rows(total_rows: int, min_rows: int, exponent: float, growth: float) -> int | None:
    """Rows of the window after ``total_rows`` rows of data; None = no limit
    (``min_rows`` 0: the window is ``window_games`` games only)."""
    if min_rows <= 0:
        return None
    if total_rows <= min_rows:
        return max(total_rows, 0)
    c = float(min_rows)
    grown = c * (1.0 + growth * ((total_rows / c) ** exponent - 1.0) / exponent)
    return min(total_rows, int(grown))


def config_window_rows(cfg: TrainConfig, total_rows: int) -> int | None:
    return window_rows(total_rows, cfg.window_min_rows, cfg.window_exponent, cfg.window_growth)


def lr_factor(
    samples: int,
    schedule: str = "constant",
    warmup_samples: int = 0,
    decay_samples: int = 0,
    decay_factor: float = 0.1,
) -> float:
    """The learning rate's share of the peak ``lr`` after ``samples`` training samples."""
    if warmup_samples > 0 and samples < warmup_samples:
        return WARMUP_START + (1.0 - WARMUP_START) * samples / warmup_samples
    after = samples - max(warmup_samples, 0)
    if schedule == "constant":
        return 1.0
    if decay_samples <= 0:
        raise ValueError(f"lr schedule {schedule!r} needs decay_samples >= 1")
    if schedule == "step":
        return decay_factor ** (after // decay_samples)
    if schedule == "cosine":
        t = min(after / decay_samples, 1.0)
        return decay_factor + (1.0 - decay_factor) * 0.5 * (1.0 + math.cos(math.pi * t))
    raise ValueError(f"unknown lr schedule {schedule!r}")


def config_lr(cfg: TrainConfig, samples: int) -> float:
    """The learning rate ``cfg`` asks for after ``samples`` training samples."""
    return cfg.lr * lr_factor(
        samples,
        cfg.lr_schedule,
        cfg.lr_warmup_samples,
        cfg.lr_decay_samples,
        cfg.lr_decay_factor,
    )


@dataclass
class SampleBudget:
    """Steps of the next generation under ``samples_per_row`` (see the module docstring).

    ``credit`` (samples not yet trained) and ``credited_rows`` (data rows already turned into
    credit) live in :class:`trainer.checkpoint.TrainState`; :meth:`plan` reads and updates
    them there.
    """

    samples_per_row: float
    max_steps: int
    samples_per_step: int  # batch size x processes

    @classmethod
    def from_config(cls, cfg: TrainConfig, world_size: int = 1) -> SampleBudget:
        return cls(cfg.samples_per_row, cfg.steps_per_generation, cfg.batch_size * world_size)

    @property
    def enabled(self) -> bool:
        return self.samples_per_row > 0

    def plan(self, credit: float, credited_rows: int, total_rows: int) -> tuple[int, float]:
        """(steps to train now, credit left afterwards) with ``total_rows`` rows of data."""
        if not self.enabled:
            return self.max_steps, 0.0
        new_rows = max(total_rows - credited_rows, 0)
        credit += self.samples_per_row * new_rows
        steps = min(self.max_steps, int(credit // self.samples_per_step))
        left = credit - steps * self.samples_per_step
        return steps, min(left, float(self.max_steps * self.samples_per_step))
