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

from kgrpc.cli_help import env_flag

# --token and --tls-ca read KGRPC_TRAINER_TOKEN and KGRPC_TRAINER_TLS_CA, as `kgrpc-train run`.

HELP = "publish an ONNX model file to the coordinator (trainer token)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model", help="the .onnx file (NAME.onnx: with its fp16/int8 files beside it)"
    )
    env_flag(parser, "--coordinator", required=True, help="coordinator address host:port")
    env_flag(
        parser,
        "--token",
        default="",
        secret=True,
        help="trainer token (best given in the environment: a flag shows in ps)",
    )
    env_flag(
        parser,
        "--tls-ca",
        default=None,
        metavar="FILE",
        show="none, plaintext",
        help="CA certificate (PEM) of a TLS coordinator",
    )
    env_flag(parser, "--timeout", type=float, default=300.0, help="seconds")


def run(args: argparse.Namespace) -> int:
    import grpc

    from kgrpc.net import describe
    from kgrpc.precision import FP32, precision_of_path
    from trainer.publish import (
        describe_release,
        describe_response,
        publish_model_sync,
        publish_release_sync,
    )

    token = args.token or ""
    tls_ca = args.tls_ca or ""
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
