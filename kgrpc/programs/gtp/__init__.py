"""``kgrpc-gtp``: a GTP version 2 engine for Go GUIs (Sabaki, Lizzie, KaTrain's GTP mode) and
match tools (``kgrpc-eval``, GoGui's twogtp).

Protocol (GTP 2): one command per line, optionally preceded by a numeric id; the answer is
``=id result`` or ``?id error`` followed by a blank line, flushed at once. Logs go to stderr.

Commands: ``list_commands`` names them all. Beyond GTP 2's own (board, moves, ``undo``,
``final_score``, ``final_status_list``, ``loadsgf``, ``time_settings``, ``time_left``,
``fixed_handicap``, ``place_free_handicap``, ``set_free_handicap``): KataGo's ``get_komi``,
``printsgf``, ``clear_cache``, ``kata-set-rules``/``kata-set-rule``/``kata-get-rules``,
kgsGtp's ``kgs-rules`` and ``kgs-genmove_cleanup``, and analysis: ``kata-analyze``,
``lz-analyze`` (alias ``analyze``), ``kata-genmove_analyze``, ``lz-genmove_analyze`` (alias
``genmove_analyze``), ``stop``.

Modules, one concern each:

- :mod:`.players`: ``--model none`` is :class:`RandomPlayer` (uniform legal moves, never
  filling its own single-point eyes); ``--model FILE.onnx`` is :class:`SearchPlayer`, the MCTS
  player (:class:`kgrpc.mcts.player.MctsPlayer`) at ``--visits`` per move.
- :mod:`.clock`: after ``time_settings`` (and ``time_left``) ``genmove`` gets a time budget;
  the search grows in small steps and stops at the budget or at ``--visits``.
- :mod:`.game`: the board and its history; :mod:`.position`: commands that set a position up
  (size, komi, rules, handicap, SGF); :mod:`.setup`: the rules names and handicap placements
  those commands use; :mod:`.engine`: every other command.
- :mod:`.analysis`: the analysis commands' arguments, their ``info`` lines, the streaming.
- :mod:`.protocol`: reading stdin (a thread doing raw ``os.read``, so any kind of stdin works)
  and answering; ``quit`` or end of input closes the player before the loop ends.
- :mod:`.release`: ``--coordinator ADDR[,ADDR]``: the run's newest release at start, downloaded
  as workers download (:class:`kgrpc.worker.models.ModelCache`) and then played as ``--model``.
- :mod:`.cli`: the flags and ``main``.

Dead stones: ``final_status_list`` and ``final_score`` judge the position with
:mod:`kgrpc.programs.eval.scoring`; ``kgs-genmove_cleanup`` plays like ``genmove`` but,
instead of passing, captures opponent stones that are dead. Out-of-turn moves (``play white
...`` with black to move) are accepted, as GTP requires; moves after two passes too (GUIs
continue games to settle dead stones).
"""

from kgrpc.programs.gtp.cli import build_parser, main
from kgrpc.programs.gtp.clock import Clock
from kgrpc.programs.gtp.engine import GtpEngine
from kgrpc.programs.gtp.game import GtpError
from kgrpc.programs.gtp.players import (
    PlayerUnavailable,
    RandomPlayer,
    SearchPlayer,
    load_model_player,
    make_player,
)
from kgrpc.programs.gtp.protocol import serve

__all__ = [
    "Clock",
    "GtpEngine",
    "GtpError",
    "PlayerUnavailable",
    "RandomPlayer",
    "SearchPlayer",
    "build_parser",
    "load_model_player",
    "main",
    "make_player",
    "serve",
]
