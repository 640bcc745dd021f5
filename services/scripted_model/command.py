"""The scripted model's command line: its arguments and serving from them.

Used by ``python -m autarch.services.scripted_model`` and by ``autarch model serve-scripted``. Cheap to import
(the package loads its server lazily), so ``autarch --help`` can build the command's parser from here; the
server (uvicorn) loads when :func:`serve_from_args` runs.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_serve_arguments", "serve_from_args"]

COMMAND = "autarch model serve-scripted"
"""The name errors are reported under (also when run as ``python -m``)."""


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments: the scenario, then where to listen."""
    parser.add_argument("scenario", metavar="SCENARIO", help="scenario file (.json or .toml) or a bundled name (demo)")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default 0: a free port)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")


def serve_from_args(args: argparse.Namespace) -> int:
    """Serve the scenario the arguments name in the foreground until SIGINT/SIGTERM; the exit status.

    2 when the scenario cannot be loaded, 1 when the address cannot be bound, 0 after a clean stop.
    """
    from .scenario import ScenarioError, load_scenario
    from .server import serve

    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as exc:
        print(f"{COMMAND}: {exc}", file=sys.stderr)
        return 2

    def announce(url: str) -> None:
        # The URL line is what scripts and tests wait for; keep its shape.
        print(f"scripted model: scenario {scenario.source} at {url}", flush=True)
        print(f"  use  ANTHROPIC_BASE_URL={url}  (any API key; role header x-autarch-role)", flush=True)

    try:
        serve(scenario, host=args.host, port=args.port, announce=announce)
    except OSError as exc:
        print(f"{COMMAND}: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0
