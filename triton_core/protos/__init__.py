"""Triton's protobuf schemas, generated into a private descriptor pool.

The ``*_pb2`` / ``*_pb2_grpc`` modules are produced by
``scripts/generate_protos.py`` and are imported on demand, not here.
"""
