"""``kgrpc-eval``: matches between GTP engines, scoring of finished games, a rating ladder.

Modules of ``kgrpc.programs.eval``:

- :mod:`.scoring`: dead stones (pass-alive, seki, random playouts) and the score.
- :mod:`.engine`: a GTP engine as an asyncio subprocess (timeouts, crashes, ``?``).
- :mod:`.referee`: who judges a finished game (GNU Go when installed, else scoring).
- :mod:`.match`: one game and a whole match, SGF files, W-L-D.
- :mod:`.rating`: win rate with its Wilson interval and Elo (``kgrpc.elo``).
- :mod:`.ladder`: every model of a directory against fixed references.
- :mod:`.report`: the ladder's CSV, Markdown report and plot.
- :mod:`.cli`: the ``kgrpc-eval`` command line.

Kept light: ``kgrpc-gtp`` imports :mod:`kgrpc.programs.eval.scoring`.
"""
