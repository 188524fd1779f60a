"""Whole programs built on the kgrpc library: each one's ``main()`` is a console script.

- :mod:`kgrpc.programs.gtp`: ``kgrpc-gtp``, a GTP 2 engine for Go GUIs and match tools.
- :mod:`kgrpc.programs.bench`: ``kgrpc-bench``, throughput benchmarks.
- :mod:`kgrpc.programs.cluster`: ``kgrpc-cluster``, the whole loop on one machine.
- :mod:`kgrpc.programs.eval`: ``kgrpc-eval``, matches between GTP engines and a rating ladder.

The two daemons keep their programs in their own packages (``kgrpc.coordinator.cli``,
``kgrpc.worker.cli``). Nothing in the library imports from here.
"""
