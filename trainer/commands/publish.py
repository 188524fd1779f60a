"""``kgrpc-train publish FILE.onnx --coordinator ADDR --token T``: send a model to gating.

Any ONNX model of ours (e.g. a run's first random model from ``kgrpc-train init``): the
name, architecture and counters come from the file's ``kgrpc.*`` metadata.
"""

from __future__ import annotations

import argparse
import sys

from trainer.config import TOKEN_ENV

HELP = "publish an ONNX model file to the coordinator (trainer token)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="the .onnx file")
    parser.add_argument("--coordinator", required=True, help="coordinator address host:port")
    parser.add_argument("--token", default="",
                        help=f"trainer token (default: none) [env: {TOKEN_ENV}]")
    parser.add_argument("--tls-ca", default="", help="CA certificate for a TLS coordinator "
                        "(default: none, plaintext)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds (default: 300)")


def run(args: argparse.Namespace) -> int:
    import os

    import grpc

    from trainer.publish import describe_response, publish_model_sync

    token = args.token or os.environ.get(TOKEN_ENV, "")
    try:
        resp = publish_model_sync(args.coordinator, token, args.model,
                                  tls_ca=args.tls_ca or None, timeout_s=args.timeout)
    except (ValueError, FileNotFoundError) as exc:
        print(f"kgrpc-train publish: {exc}", file=sys.stderr)
        return 2
    except grpc.aio.AioRpcError as exc:
        print(f"kgrpc-train publish: coordinator said {exc.code().name}: {exc.details()}",
              file=sys.stderr)
        return 1
    print(describe_response(resp))
    return 0
