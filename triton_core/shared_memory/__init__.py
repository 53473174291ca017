"""Shared memory regions that clients register and name in tensors (Triton's extensions).

:mod:`.refs` holds the typed references the frontends decode tensors into, :mod:`.region`
the contract every region kind meets, :mod:`.system` POSIX shared memory, :mod:`.registry`
the one namespace of names with its limits, and :mod:`.tensors` the step that turns
references into numpy views and writes outputs into regions.
"""
