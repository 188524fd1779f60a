"""Generated protobuf and gRPC code for package kgrpc.v1 (do not edit; `make proto`)."""
