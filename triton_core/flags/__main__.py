"""``python -m triton_core.flags --compatibility-rows``: print the flag rows of
docs/compatibility.md; ``--update-docs``: write every table the flag table makes (those rows,
the limit tables of docs/security.md) into its doc, between the markers."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from triton_core.flags.docs import compatibility_rows, update_docs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m triton_core.flags")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--compatibility-rows", action="store_true", help="print the rows")
    action.add_argument("--update-docs", action="store_true", help="write the docs' tables")
    args = parser.parse_args(argv)
    if args.compatibility_rows:
        print("\n".join(compatibility_rows()))
        return 0
    for doc in update_docs():
        print(f"updated {doc}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
