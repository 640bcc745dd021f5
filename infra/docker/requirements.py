"""Print the requirements of autarch's core plus the given extras, one per line, from pyproject.toml.

A plain ``pip install autarch`` brings every service's requirements, so that one machine runs them all; an
image keeps to what its service imports: the core (``dependencies`` less every requirement some extra names)
and the extras it is built with. The image installs these first, in a layer of their own, and the code
afterwards with ``--no-deps``: an edit to the code then rebuilds in seconds instead of downloading every
dependency again (the Tilt loop).
Self-references such as ``autarch[indexer]`` in an extra are followed.

    python requirements.py pyproject.toml orchestrator,postgres
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

__all__ = ["requirements"]

_SELF = re.compile(r"^autarch\[(?P<extras>[^\]]+)\]\s*$")


def requirements(pyproject: Path, extras: list[str]) -> list[str]:
    """The core dependencies and those of ``extras``, self-references expanded, in first-seen order."""
    project = tomllib.loads(pyproject.read_text())["project"]
    optional: dict[str, list[str]] = project.get("optional-dependencies", {})
    named_by_extras = {requirement for listed in optional.values() for requirement in listed}
    found: dict[str, None] = dict.fromkeys(r for r in project.get("dependencies", []) if r not in named_by_extras)
    seen: set[str] = set()
    pending = list(extras)
    while pending:
        extra = pending.pop(0).strip()
        if not extra or extra in seen:
            continue
        if extra not in optional:
            raise SystemExit(f"requirements: no extra {extra!r} in {pyproject} (known: {', '.join(sorted(optional))})")
        seen.add(extra)
        for requirement in optional[extra]:
            match = _SELF.match(requirement)
            if match:
                pending.extend(match["extras"].split(","))
            else:
                found.setdefault(requirement)
    return list(found)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python requirements.py PYPROJECT EXTRA[,EXTRA...]")
    print("\n".join(requirements(Path(sys.argv[1]), sys.argv[2].split(","))))
