"""Schedulers: how a model's requests become executions on its instances."""
