"""Game records: proto <-> in-memory game <-> training rows, and the coordinator's validation.

``GameRecord`` (protos/kgrpc/v1/records.proto) carries moves and search targets, never board
dumps. One module a job:

- :mod:`~kgrpc.records.errors`: how a record is rejected (:class:`~kgrpc.records.errors.ReplayError`
  and its reason codes) and how a rejection names moves and colours;
- :mod:`~kgrpc.records.terms`: what a game may be: its move cap, a task's terms and komi grid,
  and the check of a record against the task it names;
- :mod:`~kgrpc.records.build`: writing records (search targets, a finished game's record, the
  record format version);
- :mod:`~kgrpc.records.replay`: replaying a record through the rules engine (native C++ or the
  Python reference), every move and search target checked, the result recomputed;
- :mod:`~kgrpc.records.validate`: the coordinator's acceptance check (limits, the task, the
  replay, how the game ended);
- :mod:`~kgrpc.records.rows`: a replayed record's training rows (docs/formats.md section 4; the
  shard files themselves are written by ``kgrpc.shards``).

This package holds no code of its own: import each name from its module.
"""
