"""``kgrpc-cluster``: the whole training loop on one machine (what ``make demo`` runs).

Starts, as separate processes on loopback ports, a coordinator (data dir = ``--data-dir``),
an inference server following its releases, ``--workers`` self-play workers and the trainer,
after publishing a randomly initialised first model. It shows a live view of games,
positions, models, Elo and throughput until the trainer has exported ``--generations``
candidates and the last gating match is decided (with ``--generations 0``: until
``--max-minutes``), then stops everything, plays a short evaluation (newest released model
against the first one, and against random play; with ``--final-ladder-games N`` a rating
ladder against random play and GNU Go level 1) and prints a summary with where the data,
models and logs are. ``--profile learn9`` is the tuned 2-core 9x9 recipe (:mod:`.profiles`).

Modules, one job each:

- :mod:`.main`: the entry point (options, data dir, run).
- :mod:`.options`: :class:`ClusterConfig` and the command line.
- :mod:`.profiles`: named settings (``--profile``), with the trainer and coordinator settings
  they pass on.
- :mod:`.datadir`: claims ``--data-dir`` and never deletes one that is not its own run.
- :mod:`.supervise`: child processes (start, run once, check, stop in order) and their logs.
- :mod:`.run`: one run: set up, start the daemons, watch until done, finish.
- :mod:`.display`: the live table and the plain status line.
- :mod:`.evaluate`: the final evaluation matches.
- :mod:`.final_ladder`: the final rating ladder (``--final-ladder-games``).
- :mod:`.summary`: the final summary, as text and as ``cluster-summary.json``.
- :mod:`.text`: small text forms the display and the summary share.

Layout of ``--data-dir`` (the coordinator's data dir, see docs/coordinator.md)::

    .kgrpc-cluster-run         marks a directory kgrpc-cluster created (see datadir)
    models/NAME.onnx           every published model (released, candidate or rejected)
    training_data/run_001/     shards (games_00001.npz, ...), current/latest_games.npz
    logs/*.log                 one log per process
    trainer/                   checkpoints and the loss CSV
    worker-<i>/                spool, model cache and log of each worker
    ladder/                    the in-run rating ladder (--ladder-games, on a budget with
                               --ladder-every-minutes): ladder.csv/.md/.png, games
    final-ladder/              the final ladder (--final-ladder-games): the same files
    cluster-summary.json       the final summary, machine-readable
    coordinator.http           the dashboard's URL (on by default, printed at start)

Ctrl-C stops every process cleanly (SIGTERM, then SIGKILL after a grace period).
"""
