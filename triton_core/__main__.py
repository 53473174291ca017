"""``python -m triton_core`` runs the ``triton-core`` command."""

from __future__ import annotations

import sys

from triton_core.cli import main

sys.exit(main())
