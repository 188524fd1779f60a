"""``kgrpc-eval``: matches between GTP engines, scoring of finished games, a rating ladder.

- :mod:`kgrpc.eval.scoring`: dead stones (pass-alive, seki, random playouts) and the score.
- :mod:`kgrpc.eval.engine`: a GTP engine as an asyncio subprocess (timeouts, crashes, ``?``).
- :mod:`kgrpc.eval.referee`: who judges a finished game (GNU Go when installed, else scoring).
- :mod:`kgrpc.eval.match`: one game and a whole match, SGF files, W-L-D.
- :mod:`kgrpc.eval.rating`: win rate with its Wilson interval and Elo (``kgrpc.elo``).
- :mod:`kgrpc.eval.ladder`: every model of a run against fixed references.
- :mod:`kgrpc.eval.remote`: a run on a coordinator: released models, reported ratings, releases.
- :mod:`kgrpc.eval.report`: the ladder's CSV, Markdown report and plot.
- :mod:`kgrpc.eval.curve`: the ladder as text (coordinator stats, kgrpc-cluster).
- :mod:`kgrpc.eval.cli`: the ``kgrpc-eval`` command line.

Kept light: ``kgrpc-gtp`` imports :mod:`kgrpc.eval.scoring`.
"""
