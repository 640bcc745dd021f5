"""``python -m autarch.services.scripted_model SCENARIO [--port N] [--host H]``.

The same as ``autarch model serve-scripted``, for images that run the service module directly.
"""

from __future__ import annotations

import argparse
import sys

from autarch.runtime.startup import require_extra

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    require_extra("scripted_model")  # before its server's imports: a missing dependency is named with its extra
    from .command import add_serve_arguments, serve_from_args

    parser = argparse.ArgumentParser(prog="python -m autarch.services.scripted_model", description=__doc__)
    add_serve_arguments(parser)
    try:
        return serve_from_args(parser.parse_args(argv))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
