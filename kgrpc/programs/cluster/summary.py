"""The end of a cluster run: the summary printed for people and ``cluster-summary.json``."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from kgrpc.durable import atomic_write_bytes
from kgrpc.programs.cluster.options import ClusterConfig
from kgrpc.programs.cluster.text import elo_interval, mm_ss, model_status
from kgrpc.v1 import coordinator_pb2

if TYPE_CHECKING:
    from kgrpc.programs.cluster.final_ladder import FinalLadder

SUMMARY_FILE = "cluster-summary.json"


def summary_text(
    stats: coordinator_pb2.Stats,
    evaluation: dict,
    root: Path,
    logs: Path,
    elapsed_s: float,
    ladder: bool = False,
    final: FinalLadder | None = None,
) -> str:
    """The final summary; ``ladder``: a rating ladder ran (its lines are shown even when it
    reported nothing); ``final``: the final ladder's results."""
    lines = [
        "",
        "=" * 78,
        "kgrpc-cluster summary",
        "=" * 78,
        f"elapsed {mm_ss(elapsed_s)}; games accepted "
        f"{stats.games_accepted} (rejected {stats.games_rejected}), positions "
        f"{stats.positions_accepted}, shards {stats.shards_written}",
        "",
        f"{'model':<34}{'status':<11}{'Elo vs first':>13}{'steps':>8}{'rows':>9}",
    ]
    models = sorted(stats.models, key=lambda m: m.created_unix_ms)
    unmeasured = 0
    for m in models:
        elo = f"{m.elo:.1f}" if m.elo_measured else "-"
        unmeasured += not m.elo_measured
        lines.append(
            f"{m.name:<34}{model_status(m.status):<11}{elo:>13}"
            f"{m.training_steps:>8}{m.training_rows:>9}"
        )
    if unmeasured:
        lines.append(
            f"(-: no gating match, so no Elo against the first model, for {unmeasured} of "
            "these; the rating ladder rates releases against fixed references)"
        )
    if stats.matches:
        lines += [
            "",
            f"{'gating: candidate':<34}{'reference':<28}{'W-L-D':>9}{'Elo (95% CI)':>24}  decision",
        ]
        for m in stats.matches:
            lines.append(
                f"{m.candidate_model:<34}{m.reference_model:<28}"
                f"{f'{m.wins}-{m.losses}-{m.draws}':>9}"
                f"{elo_interval(m.elo_diff, m.elo_low, m.elo_high):>24}  {m.decision}"
            )
    if evaluation:
        lines += ["", f"final evaluation of {evaluation['model']}:"]
        for key, label in (("vs_random", "random play"), ("vs_first", "the first model")):
            r = evaluation.get(key)
            if r:
                opp = r.get("opponent", label)
                lines.append(
                    f"  vs {opp:<32} won {r['wins']}/{r['games']} "
                    f"(lost {r['losses']}, drawn {r['draws']})"
                )
    if stats.ratings or ladder:
        from kgrpc.programs.eval.curve import records_from_stats, summary_lines

        lines += ["", *summary_lines(records_from_stats(stats), root / "ladder")]
    if final is not None:
        lines += ["", f"final ladder of {final.model}:", *final.results()]
        if not final.gnugo:
            lines.append("(GNU Go is not installed: no GNU Go reference)")
        lines.append(f"report    {final.report} (ladder.csv, ladder.png, games beside it)")
    lines += [
        "",
        f"data      {root / 'training_data'}",
        f"models    {root / 'models'}",
        f"logs      {logs}",
        f"summary   {root / SUMMARY_FILE}",
    ]
    return "\n".join(lines)


def write_summary_json(
    root: Path,
    cfg: ClusterConfig,
    stats: coordinator_pb2.Stats | None,
    evaluation: dict,
    final: FinalLadder | None = None,
) -> None:
    data = {
        "config": asdict(cfg),
        "stats": stats_dict(stats) if stats is not None else {},
        "evaluation": evaluation,
    }
    if final is not None:
        data["final_ladder"] = {
            "model": final.model,
            "report": str(final.report),
            "gnugo": final.gnugo,
        }
    atomic_write_bytes(root / SUMMARY_FILE, (json.dumps(data, indent=2) + "\n").encode())


def stats_dict(stats: coordinator_pb2.Stats) -> dict:
    from google.protobuf import json_format

    return json_format.MessageToDict(stats, preserving_proto_field_name=True)
