"""``kgrpc-train publish FILE.onnx --coordinator ADDR --token T``: send a model to gating.

Any ONNX model of ours (e.g. a run's first random model from ``kgrpc-train init``): the
name, architecture, counters and precision come from the file's ``kgrpc.*`` metadata. Given
the fp32 file ``NAME.onnx``, the release is published: that file, then ``NAME.fp16.onnx`` and
``NAME.int8.onnx`` where the export wrote them (a refused one is reported, exit status 1).
Given an fp16 or int8 file, that file alone is added to its published model.
"""

from __future__ import annotations

import argparse
import sys

from trainer.config import SETTINGS, TOKEN_ENV

TLS_CA_ENV = SETTINGS.env_var("tls_ca")  # KGRPC_TRAINER_TLS_CA, as `kgrpc-train run` reads

HELP = "publish an ONNX model file to the coordinator (trainer token)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model", help="the .onnx file (NAME.onnx: with its fp16/int8 files beside it)"
    )
    parser.add_argument("--coordinator", required=True, help="coordinator address host:port")
    parser.add_argument(
        "--token", default="", help=f"trainer token (default: none) [env: {TOKEN_ENV}]"
    )
    parser.add_argument(
        "--tls-ca",
        default=None,
        metavar="FILE",
        help="CA certificate (PEM) of a TLS coordinator (default: none, "
        f"plaintext) [env: {TLS_CA_ENV}]",
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds (default: 300)")


def run(args: argparse.Namespace) -> int:
    import os

    import grpc

    from kgrpc.net import describe
    from kgrpc.precision import FP32, precision_of_path
    from kgrpc.settings import secret_flag_warning
    from trainer.publish import (
        describe_release,
        describe_response,
        publish_model_sync,
        publish_release_sync,
    )

    if args.token:
        print(f"kgrpc-train publish: {secret_flag_warning('--token', TOKEN_ENV)}", file=sys.stderr)
    token = args.token or os.environ.get(TOKEN_ENV, "")
    tls_ca = args.tls_ca if args.tls_ca is not None else os.environ.get(TLS_CA_ENV, "")
    kw = {"tls_ca": tls_ca or None, "timeout_s": args.timeout}
    try:
        if precision_of_path(args.model) == FP32:
            outcome = publish_release_sync(args.coordinator, token, args.model, **kw)
            print(describe_release(outcome))
            return 1 if outcome.refused else 0
        resp = publish_model_sync(args.coordinator, token, args.model, **kw)
    except (ValueError, FileNotFoundError) as exc:
        print(f"kgrpc-train publish: {exc}", file=sys.stderr)
        return 2
    except grpc.aio.AioRpcError as exc:
        print(
            f"kgrpc-train publish: coordinator {args.coordinator}: {describe(exc)}", file=sys.stderr
        )
        return 1
    print(describe_response(resp))
    return 0
