"""kgrpc: distributed self-play training for Go over asyncio gRPC.

Sub-packages: ``kgrpc.go`` (rules, features, SGF), ``kgrpc.mcts`` (search),
``kgrpc.coordinator`` and ``kgrpc.worker`` (daemons), ``kgrpc.v1`` (generated
protobuf code, see ``make proto``).
"""

__version__ = "0.1.0"
