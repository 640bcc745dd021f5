"""``python -m autarch.services.scripted_model SCENARIO [--port N] [--host H]``.

The same as ``autarch model serve-scripted``, for images that run the service module directly.
"""

from __future__ import annotations

import argparse
import sys

from autarch.cli.model_cmd import add_serve_arguments, cmd_serve_scripted

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autarch.services.scripted_model", description=__doc__)
    add_serve_arguments(parser)
    try:
        return cmd_serve_scripted(parser.parse_args(argv))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
