"""`kgrpc-train export` with ONNX Runtime's quantize_static arguments changed by MODE, to see
which int8 quantisation of a model passes the parity bounds (int8-variants.txt).

    python int8_variants.py MODE export --checkpoint DIR --out DIR --precision fp32,int8 ...

MODE: trunk (quantise only the stem and tower), lastfloat (leave the five output layers in
float), trunk8 (trunk, 8-bit weights), trunkpct (trunk, percentile calibration), full8 (all,
8-bit weights).
"""

import sys

import onnx
import onnxruntime.quantization as q

from trainer.cli import main

TRUNK = ("/tower", "/stem")
LAST_LAYERS = ("/policy_out", "/pass_fc", "/value_fc", "/value_out", "/ownership_out")
mode = sys.argv.pop(1)
original = q.quantize_static


def patched(model_input, model_output, reader, **kw):
    names = [n.name for n in onnx.load(str(model_input)).graph.node]
    if mode.startswith("trunk"):
        kw["nodes_to_quantize"] = [n for n in names if n.startswith(TRUNK)]
    if mode == "lastfloat":
        kw["nodes_to_exclude"] = [n for n in names if n.startswith(LAST_LAYERS)]
    if mode in ("trunk8", "full8"):
        kw["reduce_range"] = False
    if mode == "trunkpct":
        kw["calibrate_method"] = q.CalibrationMethod.Percentile
    return original(model_input, model_output, reader, **kw)


q.quantize_static = patched
sys.exit(main())
