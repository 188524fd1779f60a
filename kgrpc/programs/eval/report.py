"""The ladder's outputs: ``ladder.csv``, ``ladder.md`` and ``ladder.png`` (all atomic writes).

``ladder.csv``: one row per (model, reference), the columns of
:class:`kgrpc.programs.eval.ladder_record.LadderRecord` in order; empty cells for unknown values; an
Elo end without a bound is ``inf`` / ``-inf``. A file without the later columns
(:data:`~kgrpc.programs.eval.ladder_record.LATER_COLUMNS`, e.g. ``distinct_games``) still reads.
``ladder.md`` says in each cell and each best-model line how many of the games were distinct
move sequences. The plot has three panels, Elo against training
steps, against self-play games (training rows when the game counts are unknown) and against
wall-clock hours, one line per reference with its 95% interval (open ends drawn to the edge of
the panel). matplotlib comes with the ``eval`` extra.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from kgrpc.durable import atomic_write_bytes
from kgrpc.programs.eval.ladder_record import LATER_COLUMNS, LadderRecord
from kgrpc.programs.eval.match import MatchSettings
from kgrpc.rating import format_elo


def ladder_csv(records: list[LadderRecord]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, LadderRecord.columns(), lineterminator="\n")
    writer.writeheader()
    for r in records:
        writer.writerow(r.to_row())
    return buf.getvalue()


def read_ladder_csv(path: Path) -> list[LadderRecord]:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        columns = LadderRecord.columns()
        older = [c for c in columns if c not in LATER_COLUMNS]
        if reader.fieldnames not in (columns, older):
            raise ValueError(f"{path}: columns {reader.fieldnames} are not a ladder CSV's")
        return [LadderRecord.from_row(row) for row in reader]


def _opponents(records: list[LadderRecord]) -> list[str]:
    seen: list[str] = []
    for r in records:
        if r.opponent not in seen:
            seen.append(r.opponent)
    return seen


def _models(records: list[LadderRecord]) -> list[LadderRecord]:
    """One record per model (the first), in ladder order."""
    out: dict[str, LadderRecord] = {}
    for r in records:
        out.setdefault(r.model, r)
    return list(out.values())


def _hours(seconds: float | None) -> str:
    if seconds is None:
        return ""
    minutes = int(round(seconds / 60))
    return f"{minutes // 60}:{minutes % 60:02d}"


def markdown(
    records: list[LadderRecord], settings: MatchSettings, score_utility_factor: float = 0.0
) -> str:
    opponents = _opponents(records)
    cell = {(r.model, r.opponent): r for r in records}
    visits = records[0].visits if records else 0
    utility = f" (score utility {score_utility_factor:g})" if score_utility_factor else ""
    lines = [
        "# Rating ladder",
        "",
        f"{len(_models(records))} models against {', '.join(opponents)}: "
        f"{settings.games} games per pairing (colours alternate), {settings.size}x"
        f"{settings.size}, komi {settings.komi:g}, {settings.rules.name or settings.rules} "
        f"rules, {visits} visits per move{utility}. Each cell: Elo of the model against the "
        "reference [95% interval] (wins-losses-draws, how many games were distinct move "
        "sequences); the win-rate interval is Wilson's.",
        "",
        "| model | steps | rows | self-play games | wall (h:mm) | " + " | ".join(opponents) + " |",
        "|---" * (5 + len(opponents)) + "|",
    ]
    for m in _models(records):
        row = [
            m.model,
            _blank(m.training_steps),
            _blank(m.training_rows),
            _blank(m.selfplay_games),
            _hours(m.wall_seconds),
        ]
        for opp in opponents:
            r = cell.get((m.model, opp))
            row.append(
                ""
                if r is None
                else f"{format_elo(r.elo)} [{format_elo(r.elo_low)}, {format_elo(r.elo_high)}]"
                f" ({r.wins}-{r.losses}-{r.draws}, {distinct_text(r)})"
            )
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Best model against each reference:", ""]
    for opp in opponents:
        rows = [r for r in records if r.opponent == opp]
        best = max(rows, key=lambda r: (r.win_rate, r.elo))
        lines.append(
            f"- {opp}: {best.model}, win rate {100 * best.win_rate:.1f}% "
            f"[{100 * best.win_low:.1f}%, {100 * best.win_high:.1f}%] over "
            f"{best.games} games ({distinct_text(best)}), Elo {format_elo(best.elo)}"
        )
    lines += [
        "",
        "![Elo against training](ladder.png)",
        "",
        "Data: `ladder.csv`; games: `matches/MODEL__vs__REFERENCE/games/*.sgf`.",
        "",
    ]
    return "\n".join(lines)


def distinct_text(r: LadderRecord) -> str:
    """``"20 distinct"``, or ``"distinct not counted"`` (a match stored before the count)."""
    return "distinct not counted" if r.distinct_games is None else f"{r.distinct_games} distinct"


def _blank(x: int | None) -> str:
    return "" if x is None else str(x)


def plot(records: list[LadderRecord], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    have_games = all(r.selfplay_games is not None for r in records)
    axes_spec = [
        ("training steps", lambda r: r.training_steps),
        (
            ("self-play games", lambda r: r.selfplay_games)
            if have_games
            else ("training rows", lambda r: r.training_rows)
        ),
        ("wall-clock hours", lambda r: None if r.wall_seconds is None else r.wall_seconds / 3600.0),
    ]
    finite = [abs(x) for r in records for x in (r.elo, r.elo_low, r.elo_high) if math.isfinite(x)]
    edge = (max(finite) if finite else 400.0) + 100.0
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), sharey=True)
    for ax, (label, xof) in zip(axes, axes_spec, strict=True):
        for opp in _opponents(records):
            pts = [(xof(r), r) for r in records if r.opponent == opp and xof(r) is not None]
            if not pts:
                continue
            pts.sort(key=lambda p: p[0])
            xs = [p[0] for p in pts]
            ys = [p[1].elo for p in pts]
            lo = [p[1].elo - max(p[1].elo_low, -edge) for p in pts]
            hi = [min(p[1].elo_high, edge) - p[1].elo for p in pts]
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=opp)
        ax.set_xlabel(label)
        ax.axhline(0.0, color="grey", linewidth=0.5)
        ax.set_ylim(-edge, edge)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("Elo against the reference (95% interval)")
    axes[-1].legend(loc="best", fontsize="small")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue(), mkdir=True)


def write_reports(
    records: list[LadderRecord],
    settings: MatchSettings,
    out_dir: Path,
    score_utility_factor: float = 0.0,
) -> list[Path]:
    """ladder.csv, ladder.md and ladder.png in ``out_dir``; returns their paths."""
    if not records:
        raise ValueError("no ladder results to report")
    csv_path, md_path, png_path = (out_dir / f"ladder.{ext}" for ext in ("csv", "md", "png"))
    atomic_write_bytes(csv_path, ladder_csv(records).encode(), mkdir=True)
    text = markdown(records, settings, score_utility_factor)
    atomic_write_bytes(md_path, text.encode(), mkdir=True)
    plot(records, png_path)
    return [csv_path, md_path, png_path]
