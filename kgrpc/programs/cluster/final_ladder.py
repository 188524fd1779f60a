"""The final ladder of a cluster run (``--final-ladder-games N``): after training, the newest
released model is rated by ``kgrpc-eval ladder`` against random play and GNU Go level 1 (when
installed), N games each at ``--eval-visits``, as a child process logging to
``logs/ladder-final.log``. Its reports (``ladder.md``, ``ladder.csv``, ``ladder.png``, the
games as SGF) go to ``DATA_DIR/final-ladder``; the summary prints ``ladder.md``'s results.
The model's sidecar (``model/NAME.json``) gives the ladder the run's facts it cannot read from
a lone file: the self-play games accepted, the model's creation time and the run's start, so
its row shows the run's wall-clock time, not zero."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kgrpc.durable import atomic_write_bytes
from kgrpc.programs.cluster.options import ClusterConfig
from kgrpc.programs.cluster.supervise import ClusterError, Supervisor

DIR = "final-ladder"
CHILD = "ladder-final"  # a "ladder" child: stopped first (supervise.STOP_ORDER)


@dataclass(frozen=True)
class FinalLadder:
    model: str
    out: Path
    gnugo: bool  # GNU Go level 1 was a reference

    @property
    def report(self) -> Path:
        return self.out / "ladder.md"

    def results(self) -> list[str]:
        """ladder.md without its title and plot: the table and the best-model lines."""
        text = self.report.read_text() if self.report.exists() else ""
        keep = [ln for ln in text.splitlines()[1:] if not ln.startswith("![")]
        while keep and not keep[0].strip():
            keep.pop(0)
        return keep


def ladder_args(model_dir: Path, cfg: ClusterConfig, out: Path, gnugo: bool) -> list[str]:
    """``python`` arguments of the final ladder."""
    return [
        "-m",
        "kgrpc.programs.eval",
        "ladder",
        "--models",
        str(model_dir),
        "--games",
        str(cfg.final_ladder_games),
        "--size",
        str(cfg.board_size),
        "--komi",
        f"{cfg.komi:g}",
        "--visits",
        str(cfg.evaluation_visits),
        "--parallel",
        str(cfg.final_ladder_parallel),
        "--gnugo-levels",
        "1" if gnugo else "",
        "--no-first",
        "--out",
        str(out),
    ]


def model_facts(created_unix: float, selfplay_games: int, run_start_unix: float) -> bytes:
    """The sidecar ``kgrpc-eval ladder --models`` reads beside ``NAME.onnx``."""
    facts = {
        "created_unix": created_unix,
        "selfplay_games": selfplay_games,
        "run_start_unix": run_start_unix,
    }
    return json.dumps(facts, indent=1).encode() + b"\n"


async def run_final_ladder(
    procs: Supervisor,
    model: str,
    root: Path,
    cfg: ClusterConfig,
    say: Callable[[str], None],
    facts: bytes | None = None,
) -> FinalLadder:
    """Rate ``model`` (DATA_DIR/models/NAME.onnx), with ``facts`` (:func:`model_facts`) as
    its sidecar; raises ClusterError when the ladder fails."""
    from kgrpc.programs.eval.referee import find_gnugo

    out = root / DIR
    model_dir = out / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(root / "models" / f"{model}.onnx", model_dir / f"{model}.onnx")
    if facts is not None:
        atomic_write_bytes(model_dir / f"{model}.json", facts)
    gnugo = find_gnugo() is not None
    refs = "random play" + (" and GNU Go level 1" if gnugo else "")
    say(
        f"final ladder: {model} against {refs}, {cfg.final_ladder_games} games each at "
        f"{cfg.evaluation_visits} visits (log: {procs.logs / f'{CHILD}.log'})"
    )
    if not gnugo:
        say("GNU Go is not installed (apt-get install gnugo): no GNU Go reference")
    child = await procs.spawn(CHILD, ladder_args(model_dir, cfg, out, gnugo), expected_exit=True)
    rc = await child.proc.wait()
    if rc != 0:
        tail = child.log.read_text(errors="replace")[-1500:] if child.log.exists() else ""
        raise ClusterError(f"the final ladder failed (exit {rc}); last lines:\n{tail}")
    return FinalLadder(model, out, gnugo)
