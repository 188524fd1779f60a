"""The ladder as lines of text for terminals: ``kgrpc-coordinator stats``, kgrpc-cluster's
live view (the newest model's line) and its final summary (the table and the plot's path).

Input: ladder rows (:class:`~kgrpc.programs.eval.ladder_record.LadderRecord`), from a
coordinator's ratings (:func:`records_from_stats`) or read from ``ladder.csv``. Each model gets
one line with its Elo against each reference, the 95% interval and W-L-D (and how many games
were distinct move sequences, when counted); when a pair appears more than once the last row
counts (the coordinator lists the latest last).
"""

from __future__ import annotations

from pathlib import Path

from kgrpc.programs.eval.ladder_record import LadderRecord
from kgrpc.rating import format_elo
from kgrpc.v1 import coordinator_pb2

TITLE = "ladder: Elo against fixed references [95% interval] W-L-D"


def records_from_stats(stats: coordinator_pb2.Stats) -> list[LadderRecord]:
    """The latest rating of each (model, opponent) a GetStats answer carries."""
    return [LadderRecord.from_proto(r) for r in stats.ratings]


def cell(r: LadderRecord) -> str:
    """``+120 [+35,+inf] 7-1-0 (8 distinct)``: the distinct move sequences when counted."""
    distinct = "" if r.distinct_games is None else f" ({r.distinct_games} distinct)"
    return (
        f"{format_elo(r.elo)} [{format_elo(r.elo_low)},{format_elo(r.elo_high)}] "
        f"{r.wins}-{r.losses}-{r.draws}{distinct}"
    )


def _table(records: list[LadderRecord]) -> tuple[list[str], dict[str, dict[str, LadderRecord]]]:
    """Opponents in first-seen order and {model: {opponent: row}} in first-seen model order."""
    opponents: list[str] = []
    by_model: dict[str, dict[str, LadderRecord]] = {}
    for r in records:
        if r.opponent not in opponents:
            opponents.append(r.opponent)
        by_model.setdefault(r.model, {})[r.opponent] = r
    return opponents, by_model


def _count(value: int | None) -> str:
    return "" if value is None else str(value)


def ladder_lines(records: list[LadderRecord]) -> list[str]:
    """A title, a header and one line per model (empty without records)."""
    if not records:
        return []
    opponents, by_model = _table(records)
    names = list(by_model)
    first_of = {m: next(iter(row.values())) for m, row in by_model.items()}
    name_w = max(len("model"), *(len(m) for m in names)) + 2
    widths = [
        max(len(o), *(len(cell(row[o])) for row in by_model.values() if o in row)) + 2
        for o in opponents
    ]
    lines = [
        TITLE,
        f"{'model':<{name_w}}{'steps':>9}{'games':>9}  "
        + "".join(f"{o:<{w}}" for o, w in zip(opponents, widths, strict=True)).rstrip(),
    ]
    for m in names:
        row = by_model[m]
        cells = "".join(
            f"{cell(row[o]) if o in row else '-':<{w}}"
            for o, w in zip(opponents, widths, strict=True)
        )
        lines.append(
            f"{m:<{name_w}}{_count(first_of[m].training_steps):>9}"
            f"{_count(first_of[m].selfplay_games):>9}  {cells}".rstrip()
        )
    return lines


def newest_line(records: list[LadderRecord]) -> str:
    """``ladder of MODEL (steps S): random +350 [+120,+inf] 8-0-0, first ...`` for the newest
    rated model (most training steps, then the last listed); "" without records."""
    if not records:
        return ""
    _, by_model = _table(records)
    order = {m: i for i, m in enumerate(by_model)}

    def steps(m: str) -> int:
        s = next(iter(by_model[m].values())).training_steps
        return -1 if s is None else s

    newest = max(by_model, key=lambda m: (steps(m), order[m]))
    cells = ", ".join(f"{o} {cell(r)}" for o, r in by_model[newest].items())
    return f"ladder of {newest} (steps {max(steps(newest), 0)}): {cells}"


def summary_lines(records: list[LadderRecord], ladder_dir: Path | None) -> list[str]:
    """The ladder table and where its report and plot are (when they exist)."""
    lines = ladder_lines(records) or ["ladder: no ratings reported"]
    if ladder_dir is not None:
        for label, name in (("plot", "ladder.png"), ("report", "ladder.md")):
            if (ladder_dir / name).is_file():
                lines.append(f"{label + ' ':<10}{ladder_dir / name}")
    return lines
