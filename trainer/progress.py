"""Progress reporting: a status line on a terminal, log lines otherwise, and a CSV of losses.

The CSV (``WORK_DIR/train_log.csv``) has one row per optimiser step, columns
``time,step,samples,loss,policy,value,score,ownership,lr,board_size``; it is appended to
across restarts (the header is written once, when the file is created).
"""

from __future__ import annotations

import csv
import os
import sys
import time
from pathlib import Path
from typing import TextIO

CSV_COLUMNS = (
    "time",
    "step",
    "samples",
    "loss",
    "policy",
    "value",
    "score",
    "ownership",
    "lr",
    "board_size",
)


class CsvLog:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists() or self.path.stat().st_size == 0
        self._f = open(self.path, "a", newline="")  # noqa: SIM115 - kept open for the run
        self._w = csv.writer(self._f)
        if new:
            self._w.writerow(CSV_COLUMNS)

    def write(
        self, step: int, samples: int, losses: dict[str, float], lr: float, board_size: int
    ) -> None:
        self._w.writerow(
            [
                f"{time.time():.3f}",
                step,
                samples,
                *(f"{losses[k]:.6g}" for k in CSV_COLUMNS[3:8]),
                f"{lr:.3g}",
                board_size,
            ]
        )

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        self._f.close()


class Progress:
    """Steps/s, samples/s, data-wait share and smoothed losses.

    On a tty: a ``\\r`` status line redrawn at most 4 times a second. Otherwise a log line
    every ``log_every_s`` seconds (and at :meth:`done`), so a redirected log stays readable.
    """

    def __init__(
        self, stream: TextIO | None = None, log_every_s: float = 10.0, tty: bool | None = None
    ) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.every = 0.25 if self.tty else log_every_s
        self._last_draw = 0.0
        self._ema: dict[str, float] = {}
        self._line_open = False
        self.start = time.perf_counter()
        self.steps = 0
        self.samples = 0
        self.wait_s = 0.0
        self.step = 0

    def reset(self) -> None:
        self.start = time.perf_counter()
        self.steps = self.samples = 0
        self.wait_s = 0.0

    def update(self, step: int, batch: int, losses: dict[str, float], wait_s: float) -> None:
        self.step = step
        self.steps += 1
        self.samples += batch
        self.wait_s = wait_s
        for k, v in losses.items():
            self._ema[k] = v if k not in self._ema else 0.95 * self._ema[k] + 0.05 * v
        now = time.perf_counter()
        if now - self._last_draw >= self.every:
            self._last_draw = now
            self._draw()

    def figures(self) -> dict[str, float]:
        el = max(time.perf_counter() - self.start, 1e-9)
        return {
            "steps_per_s": self.steps / el,
            "samples_per_s": self.samples / el,
            "data_wait_share": self.wait_s / el,
        }

    def line(self) -> str:
        f = self.figures()
        losses = " ".join(f"{k} {v:.3f}" for k, v in self._ema.items())
        return (
            f"step {self.step} | {f['steps_per_s']:.2f} steps/s "
            f"{f['samples_per_s']:.0f} samples/s | data wait "
            f"{100 * f['data_wait_share']:.1f}% | {losses}"
        )

    def _draw(self) -> None:
        if self.tty:
            self.stream.write("\r\x1b[K" + self.line())
            self._line_open = True
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()

    def message(self, text: str) -> None:
        """A log line that does not get mixed into the status line."""
        if self._line_open:
            self.stream.write("\n")
            self._line_open = False
        self.stream.write(text + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self.tty:
            self._draw()
            self.stream.write("\n")
            self._line_open = False
        else:
            self._draw()
        self.stream.flush()
