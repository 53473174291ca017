"""The flags of ``triton-core serve``, one declarative table (:mod:`.table`).

From it come the argparse parser and ``--help`` (:mod:`.build`), the options the parsed
flags fill (``ServerOptions``, ``FrontendOptions``; several flags that make one option go
through a converter of :mod:`.converters`), the flag rows of docs/compatibility.md and the
limit tables of docs/security.md (:mod:`.docs`, ``python -m triton_core.flags
--update-docs``). A flag that a plugin adds with
``triton_add_serve_arguments`` stays outside the table.

This package imports nothing itself: the table imports the modules whose options it fills.
"""
