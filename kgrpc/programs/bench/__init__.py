"""Benchmarks behind ``kgrpc-bench``: each sub-module is one sub-command.

A benchmark module defines ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> dict`` (the JSON figures); the dispatcher prints the dict and
writes it to ``--json FILE`` when asked. Figures, never timed assertions.
"""
