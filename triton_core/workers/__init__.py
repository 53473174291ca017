"""``triton-core serve --workers N``: N server processes on the same ports, under gunicorn."""

from __future__ import annotations
