import sys
from pathlib import Path
import numpy as np, onnx
from trainer import parity
from trainer.positions import draw_sets
from trainer.quantize import to_int8
run=Path(sys.argv[1])
calib, held = draw_sets([9], 256, data_dir=run / "training_data")
for name in sys.argv[2:]:
    m = run/"models"/f"{name}.onnx"
    refs = parity.onnx_outputs(str(m), held)
    q = to_int8(onnx.load(str(m)), calib)
    outs = parity.onnx_outputs(q.SerializeToString(), held)
    rp = refs[0][0]; op = outs[0][0]
    p = np.exp(rp - rp.max(1, keepdims=True)); p /= p.sum(1, keepdims=True)
    a, b = rp.argmax(1), op.argmax(1)
    dis = np.nonzero(a != b)[0]
    gap = p[dis, a[dis]] - p[dis, b[dis]]
    rel = p[dis, b[dis]] / p[dis, a[dis]]
    print(name, len(dis), "abs gaps", np.round(np.sort(gap), 3), "ratio", np.round(np.sort(rel), 2), "ptop", np.round(p[dis,a[dis]],2))
