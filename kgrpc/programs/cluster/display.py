"""What a cluster run shows while it runs: a live table redrawn in place on a terminal, or a
plain status line every 15 s, both from the coordinator's ``GetStats``; and timed messages."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from kgrpc.programs.cluster.text import elo_interval, mm_ss, model_status
from kgrpc.v1 import common_pb2, coordinator_pb2

PLAIN_EVERY_S = 15.0
RATE_WINDOW_S = 60.0


@dataclass
class Snapshot:
    """The newest ``GetStats`` answer, and recent counts for the rates."""

    stats: coordinator_pb2.Stats | None = None
    at: float = 0.0
    history: list[tuple[float, int, int]] = field(default_factory=list)  # (t, games, positions)

    def record(self, stats: coordinator_pb2.Stats) -> None:
        now = time.monotonic()
        self.stats = stats
        self.at = now
        self.history.append((now, stats.games_accepted, stats.positions_accepted))
        self.history = [h for h in self.history if now - h[0] <= RATE_WINDOW_S]

    def rates(self) -> tuple[float, float]:
        """Games and positions accepted per second over the last minute."""
        h = self.history
        if len(h) < 2 or h[-1][0] - h[0][0] < 1:
            return 0.0, 0.0
        dt = h[-1][0] - h[0][0]
        return (h[-1][1] - h[0][1]) / dt, (h[-1][2] - h[0][2]) / dt


class Display:
    """Messages and the status view of one run that started at ``started`` (monotonic)."""

    def __init__(self, board_size: int, root: Path, live: bool, started: float) -> None:
        self.board_size = board_size
        self.root = root
        self.live = live
        self.started = started
        self.dashboard = ""  # the dashboard URL, when on
        self._last_plain = 0.0

    def say(self, text: str) -> None:
        print(f"[{mm_ss(time.monotonic() - self.started)}] {text}", flush=True)

    def render(self, snapshot: Snapshot, address: str, trainer_log: Path | None) -> str:
        s = snapshot.stats
        elapsed = time.monotonic() - self.started
        n = self.board_size
        head = f"kgrpc-cluster  {n}x{n}  {mm_ss(elapsed)}  coordinator {address}  data {self.root}"
        if self.dashboard:
            head += f"\ndashboard {self.dashboard}"
        if s is None:
            return head + "\n(waiting for the coordinator)"
        gps, pps = snapshot.rates()
        moves = sum(w.stats.moves_per_s for w in s.workers)
        visits = sum(w.stats.visits_per_s for w in s.workers)
        evals = sum(w.stats.nn_evals_per_s for w in s.workers)
        batch = [w.stats.mean_batch_size for w in s.workers if w.stats.mean_batch_size]
        mean_batch = sum(batch) / len(batch) if batch else 0
        lines = [
            head,
            f"games     accepted {s.games_accepted:>7}  rejected {s.games_rejected:>4}  "
            f"duplicate {s.games_duplicate:>4}   {gps:6.2f} games/s",
            f"positions accepted {s.positions_accepted:>7}  shards {s.shards_written:>4}   "
            f"{pps:8.1f} positions/s",
            f"workers   {len(s.workers)}: {moves:7.1f} moves/s  {visits:8.1f} visits/s  "
            f"{evals:8.1f} NN evals/s  mean batch {mean_batch:5.1f}",
            "",
            f"{'model':<34}{'status':<11}{'Elo':>8}{'steps':>8}{'rows':>9}",
        ]
        if s.models_total > len(s.models):
            lines.append(f"(the newest {len(s.models)} of {s.models_total} models)")
        for m in sorted(s.models, key=lambda m: m.created_unix_ms):
            lines.append(
                f"{m.name:<34}{model_status(m.status):<11}{m.elo:>8.1f}"
                f"{m.training_steps:>8}{m.training_rows:>9}"
            )
        if s.matches:
            lines += ["", f"{'gating: candidate':<34}{'W-L-D':>10}{'Elo (95% CI)':>26}  decision"]
            for m in s.matches:
                lines.append(
                    f"{m.candidate_model:<34}{f'{m.wins}-{m.losses}-{m.draws}':>10}"
                    f"{elo_interval(m.elo_diff, m.elo_low, m.elo_high):>26}  "
                    f"{m.decision}"
                )
        if s.workers:
            lines += ["", f"{'worker':<12}{'games':>7}{'moves/s':>9}{'visits/s':>10}  model"]
            for w in s.workers:
                lines.append(
                    f"{(w.display_name or w.username)[:11]:<12}{w.games_accepted:>7}"
                    f"{w.stats.moves_per_s:>9.1f}{w.stats.visits_per_s:>10.1f}  "
                    f"{w.stats.current_model}"
                )
        from kgrpc.programs.eval.curve import newest_line, records_from_stats

        if ladder := newest_line(records_from_stats(s)):
            lines += ["", ladder]
        if trainer_log is not None:
            lines += ["", f"trainer: {last_line(trainer_log)}"]
        return "\n".join(lines)

    def show(self, snapshot: Snapshot, address: str, trainer_log: Path | None) -> None:
        """Redraw the table (live), or print a status line if the last is 15 s old (plain)."""
        if self.live:
            sys.stdout.write("\x1b[H\x1b[2J" + self.render(snapshot, address, trainer_log) + "\n")
            sys.stdout.flush()
            return
        if time.monotonic() - self._last_plain < PLAIN_EVERY_S:
            return
        s = snapshot.stats
        if s is not None:
            released = sum(1 for m in s.models if m.status == common_pb2.MODEL_STATUS_RELEASED)
            pending = sum(1 for m in s.matches if m.decision == "pending")
            gps, _ = snapshot.rates()
            # GetStats answers one page of models and matches (the newest): say so when a long
            # run has more.
            total = max(s.models_total, len(s.models))
            among = f" among the newest {len(s.models)}" if total > len(s.models) else ""
            self.say(
                f"games {s.games_accepted} ({gps:.2f}/s), positions {s.positions_accepted}, "
                f"shards {s.shards_written}, models {total} ({released} released{among}), "
                f"pending matches {pending}"
            )
        self._last_plain = time.monotonic()


def last_line(path: Path) -> str:
    """The last non-blank line of a log (progress bars' ``\\r`` counts as a line end)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            text = f.read().decode(errors="replace").replace("\r", "\n")
        lines = [ln for ln in text.splitlines() if ln.strip()]
        return lines[-1][-100:] if lines else "(starting)"
    except OSError:
        return "(no log yet)"
