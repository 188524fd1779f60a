"""The shared batching inference service (docs/inference.md).

Importing this package, or ``inference.client``/``inference.wire``, must not import
onnxruntime: a worker using a remote server does not have it. The engine, batcher and server
modules import it where they need it.
"""
