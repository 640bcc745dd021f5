"""``autarch contracts export DIR``: one JSON Schema per contract."""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import pkgutil
from pathlib import Path

import msgspec

import autarch.contracts as contracts_pkg

__all__ = ["SCHEMA_BASE", "all_contracts", "export_schemas", "published_schema", "register", "schema_version"]


def all_contracts() -> dict[str, type[msgspec.Struct]]:
    """Every Struct defined in ``autarch.contracts``, keyed ``<module>.<Name>``."""
    found: dict[str, type[msgspec.Struct]] = {}
    for info in pkgutil.iter_modules(contracts_pkg.__path__):
        module = importlib.import_module(f"{contracts_pkg.__name__}.{info.name}")
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, msgspec.Struct) and obj.__module__ == module.__name__:
                found[f"{info.name}.{name}"] = obj
    return dict(sorted(found.items()))


def export_schemas(out: Path) -> list[Path]:
    """Write ``<out>/<module>.<Name>.json`` for every contract and ``events.AnyEvent.json`` for the union."""
    from autarch.contracts.events import AnyEvent

    out.mkdir(parents=True, exist_ok=True)
    written = []
    targets: dict[str, object] = dict(all_contracts())
    targets["events.AnyEvent"] = AnyEvent
    for key, kind in targets.items():
        path = out / f"{key}.json"
        path.write_text(json.dumps(published_schema(key, kind), indent=2, sort_keys=True) + "\n")
        written.append(path)
    return written


SCHEMA_BASE = "https://autarch.dev/contracts/"
"""Where a schema's ``$id`` points: ``<base><module>.<Name>/v<version>.json``."""


def schema_version(kind: object) -> int:
    """The version of a contract's schema: an event's ``schema_version`` default, else 1."""
    fields = getattr(kind, "__struct_fields__", ())
    if "schema_version" in fields:
        # Ignored below: kind is any contract class; the field's default is an int for every event
        return int(msgspec.structs.fields(kind)[fields.index("schema_version")].default)  # type: ignore[arg-type]
    return 1


def _strict(node: object) -> object:
    # ``discriminator`` is OpenAPI's keyword, not JSON Schema's: a strict 2020-12 validator refuses unknown
    # keywords in strict mode. ``oneOf`` over tagged variants already selects exactly one.
    if isinstance(node, dict):
        return {k: _strict(v) for k, v in node.items() if k != "discriminator"}
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


def published_schema(key: str, kind: object) -> dict[str, object]:
    """The JSON Schema (Draft 2020-12) published for ``kind``, with its ``$id`` carrying its version."""
    schema = _strict(msgspec.json.schema(kind))
    assert isinstance(schema, dict)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"{SCHEMA_BASE}{key}/v{schema_version(kind)}.json", **schema}


def cmd_export(args: argparse.Namespace) -> int:
    written = export_schemas(Path(args.dir))
    print(f"wrote {len(written)} schemas to {args.dir}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    contracts = sub.add_parser("contracts", help="the wire contracts")
    verbs = contracts.add_subparsers(dest="contracts_command", metavar="VERB")
    verbs.required = True
    export = verbs.add_parser("export", help="write a JSON Schema per contract into DIR")
    export.add_argument("dir")
    export.set_defaults(handler=cmd_export)
