"""Typed tensor data: datatypes, device buffers, ragged batches."""
