"""kgrpc: distributed self-play training for Go over asyncio gRPC.

Library: ``kgrpc.go`` (rules, features, coordinates), ``kgrpc.mcts`` (search),
``kgrpc.net`` (channels, retries, the server scaffold), ``schema`` (every count and layout
of the network's input, shards and models), ``settings`` (the settings loader), modules
for the stored formats (``records``, ``shards``, ``sgf``, ``durable``), ``evaluator`` (the
network interface the search uses), ``elo``, ``randgame`` (random legal games), ``kgrpc.v1``
(generated protobuf code, ``make proto``). Daemons: ``kgrpc.coordinator`` and
``kgrpc.worker``. Other programs: ``kgrpc.programs`` (``kgrpc-gtp``, ``kgrpc-bench``,
``kgrpc-cluster``, ``kgrpc-eval``).
"""

# The one place of the version: pyproject.toml reads it, every program's --version prints it.
__version__ = "0.1.0"
