"""The records sent with a gating match report, checked before anything of it is counted
or kept (:func:`check_match_records`).

A gating game is kept when its worker sends the record with the result (``MatchGame.record``)
and the record replays. With ``match_records_required`` (the default) every gating game must
carry a record that replays, and the result counted is the replay's; without it, a record
that does not replay is logged and counted, not kept, and its result counts as one sent
without a record.

Split from :mod:`kgrpc.coordinator.archive`: this is part of validating a report (it answers
INVALID_ARGUMENT and sets the figures counted) and runs before the report is recorded; the
archive then only writes the records that passed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from kgrpc.coordinator.errors import invalid
from kgrpc.coordinator.outcome import GameOutcome
from kgrpc.records.terms import TaskTerms
from kgrpc.v1 import common_pb2, coordinator_pb2, records_pb2

log = logging.getLogger("kgrpc.coordinator")
# (serialized game, worker id) pairs and their move counts -> their outcomes, in order.
# (serialized record, worker id, its task's terms) of each game, their move counts.
Validate = Callable[
    [list[tuple[bytes, str, TaskTerms | None]], list[int]], Awaitable[list[GameOutcome]]
]


def _colour_name(value: int) -> str:
    """A Color as its enum name (``COLOR_BLACK``), the way a client's code spells it."""
    return common_pb2.Color.Name(value) if value in common_pb2.Color.values() else str(value)


async def check_match_records(
    req: coordinator_pb2.ReportMatchResultRequest,
    validate: Validate,
    task: TaskTerms | None = None,
    *,
    required: bool = False,
) -> tuple[list[records_pb2.GameRecord], int]:
    """The records sent with a match report that replay (``validate``, against ``task``:
    the stored terms of the report's match task, None when not stored), and how many did
    not. A record that contradicts its game's fields or the match's models, or the terms of
    its task (``task_mismatch``: another board size, rules, komi, task id), is
    INVALID_ARGUMENT.

    ``required`` (the coordinator's ``match_records_required``): every game must carry its
    record and every record must replay as a finished legal game of its task, else the whole
    report is INVALID_ARGUMENT with the game and the reason; each game's ``winner`` and
    ``score`` are then set in ``req`` to what the replay computed (the figures counted). Not
    required: a record that does not replay is logged and not kept, and the report counts as
    one without records. Games whose candidate colour is invalid are left to the report's own
    checks."""
    checked: list[records_pb2.GameRecord] = []
    games: list[coordinator_pb2.MatchGame] = []
    for g in req.games:
        if not g.HasField("record"):
            if required:
                raise invalid(
                    f"game {g.game_id!r} has no record: every gating game must carry its "
                    "record (MatchGame.record), which the coordinator replays and whose result "
                    "it counts; nothing of this report was recorded"
                )
            continue
        if g.candidate_color not in (common_pb2.COLOR_BLACK, common_pb2.COLOR_WHITE):
            continue
        r = g.record
        what = f"game {g.game_id!r}: its record"
        if r.game_id != g.game_id:
            raise invalid(f"{what} has game_id {r.game_id!r}")
        if g.candidate_color == common_pb2.COLOR_BLACK:
            want = (req.candidate_model, req.reference_model)
        else:
            want = (req.reference_model, req.candidate_model)
        if (r.black_model, r.white_model) != want:
            raise invalid(
                f"{what} names black {r.black_model!r} and white {r.white_model!r}; "
                f"the match and candidate_color say {want[0]!r} and {want[1]!r}"
            )
        if r.result.winner != g.winner:
            raise invalid(
                f"{what} has winner {_colour_name(r.result.winner)}, the report "
                f"{_colour_name(g.winner)}"
            )
        if len(r.moves) != g.moves:
            raise invalid(f"{what} has {len(r.moves)} moves, the report {g.moves}")
        checked.append(r)
        games.append(g)
    if not checked:
        return [], 0
    outcomes = await validate(
        [(r.SerializeToString(), req.worker_id, task) for r in checked],
        [len(r.moves) for r in checked],
    )
    good = []
    for g, r, o in zip(games, checked, outcomes, strict=True):
        if o.reason == "task_mismatch":
            raise invalid(f"game {r.game_id!r}: its record does not fit its task: {o.detail}")
        if required and not o.ok:
            raise invalid(
                f"game {r.game_id!r}: its record does not replay as a finished legal game of "
                f"task {req.task_id!r} ({o.reason}: {o.detail}); nothing of this report was "
                "recorded"
            )
        if o.ok:
            good.append(r)
            if required:  # the replay's figures are the ones counted
                g.winner = o.winner
                g.score = o.score
        else:
            log.warning(
                "gating game %r of task %s not kept as SGF: its record does not replay (%s: %s)",
                r.game_id,
                req.task_id,
                o.reason,
                o.detail,
            )
    return good, len(checked) - len(good)
