"""``autarch model serve-scripted SCENARIO``: the scripted stand-in for the LLM, for tests and offline demos."""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_serve_arguments", "cmd_serve_scripted", "register"]


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``serve-scripted`` (shared with ``python -m autarch.services.scripted_model``)."""
    parser.add_argument("scenario", metavar="SCENARIO", help="scenario file (.json or .toml) or a bundled name (demo)")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default 0: a free port)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")


def cmd_serve_scripted(args: argparse.Namespace) -> int:
    from autarch.services.scripted_model import ScenarioError, load_scenario, serve

    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as exc:
        print(f"autarch model serve-scripted: {exc}", file=sys.stderr)
        return 2

    def announce(url: str) -> None:
        # The URL line is what scripts and tests wait for; keep its shape.
        print(f"scripted model: scenario {scenario.source} at {url}", flush=True)
        print(f"  use  ANTHROPIC_BASE_URL={url}  (any API key; role header x-autarch-role)", flush=True)

    try:
        serve(scenario, host=args.host, port=args.port, announce=announce)
    except OSError as exc:
        print(f"autarch model serve-scripted: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    model = sub.add_parser("model", help="model stand-ins for tests and offline demos")
    verbs = model.add_subparsers(dest="model_command", metavar="VERB")
    verbs.required = True
    serve = verbs.add_parser(
        "serve-scripted",
        help="serve the Anthropic Messages API from a scenario file",
        description="Serve the Anthropic Messages API (streaming and not) from a scenario file; "
        "see docs/scripted-model.md for the format.",
    )
    add_serve_arguments(serve)
    serve.set_defaults(handler=cmd_serve_scripted)
