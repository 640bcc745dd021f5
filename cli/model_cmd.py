"""``autarch model serve-scripted SCENARIO``: the scripted stand-in for the LLM, for tests and offline demos.

The arguments and the serving live with the service (:mod:`autarch.services.scripted_model.command`); its
server loads only when the command runs, so building the parser costs ``autarch --help`` nothing.
"""

from __future__ import annotations

import argparse

from autarch.services.scripted_model.command import add_serve_arguments, serve_from_args

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
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
    serve.set_defaults(handler=serve_from_args)
