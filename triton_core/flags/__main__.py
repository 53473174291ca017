"""``python -m triton_core.flags --compatibility-rows``: print the flag rows of
docs/compatibility.md; ``--update-docs``: write them there, between the markers."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from triton_core.flags.docs import COMPATIBILITY, compatibility_rows, with_rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m triton_core.flags")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--compatibility-rows", action="store_true", help="print the rows")
    action.add_argument("--update-docs", action="store_true", help=f"write {COMPATIBILITY}")
    args = parser.parse_args(argv)
    if args.compatibility_rows:
        print("\n".join(compatibility_rows()))
    else:
        COMPATIBILITY.write_text(with_rows(COMPATIBILITY.read_text()))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
