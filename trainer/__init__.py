"""kgrpc trainer: the network (PyTorch), ONNX export, training loop and gating maths.

Imports torch: never imported by the coordinator or by a worker using a remote
inference server.
"""
