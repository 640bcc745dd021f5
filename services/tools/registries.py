"""The package registries this machine's user configured for pip and npm, so preflight keeps using them.

Read once, when the tools service starts, from the user's own configuration (never from a worktree):

- pip: the global files (``$XDG_CONFIG_DIRS/pip/pip.conf``, ``/etc/pip.conf``), the user's (``~/.pip/pip.conf``,
  ``$XDG_CONFIG_HOME/pip/pip.conf``), ``PIP_CONFIG_FILE``, and the ``PIP_*`` variables that say where packages
  come from (:data:`PIP_VARIABLES`);
- npm: ``~/.npmrc`` (or ``NPM_CONFIG_USERCONFIG``), the global ``npmrc`` files, ``npm_config_registry``.

What preflight gets from them (:class:`RegistryConfig`): the hosts of their http(s) indexes, added to the proxy's
allow-list; read access to the paths they name, since a confined command can read only what it is granted
(``file://`` indexes, and for ``<root>/simple`` all of ``<root>``, where such an index keeps its files;
``find-links`` directories, the CA file, a constraints file); the user-level files copied into the command's
private ``HOME`` (where pip and npm look for them), and the variables passed on. A password or token in them (a
URL's userinfo, npm's ``_authToken``) is added to the values redacted from command output.
"""

from __future__ import annotations

import configparser
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

__all__ = ["NPM_VARIABLES", "PIP_VARIABLES", "RegistryConfig", "machine_registries"]

PIP_VARIABLES = (
    "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_TRUSTED_HOST", "PIP_CERT", "PIP_CONSTRAINT",
    "PIP_NO_INDEX", "PIP_CONFIG_FILE",
)
"""pip's variables that say where packages come from: passed to preflight commands when set."""
NPM_VARIABLES = ("npm_config_registry", "NPM_CONFIG_REGISTRY", "npm_config_cafile", "NPM_CONFIG_CAFILE")
_URL_KEYS = ("index-url", "extra-index-url", "find-links")
"""pip settings holding index URLs or paths (several, whitespace-separated)."""
_PATH_KEYS = ("cert", "constraint")
_PIP_SECTIONS = ("global", "install", "download", "wheel", "index")
_NPM_SECRET_KEYS = ("_authtoken", "_auth", "_password")


@dataclass(frozen=True)
class RegistryConfig:
    """What preflight needs to reach the registries configured on this machine."""

    hosts: tuple[str, ...] = ()
    """``host:port`` of every http(s) index or registry named."""
    read_paths: tuple[str, ...] = ()
    """Local indexes, wheel directories, CA and constraints files (real paths that exist)."""
    home_files: tuple[tuple[str, bytes], ...] = ()
    """``(path relative to HOME, content)``: the user-level pip and npm files, for the command's private HOME."""
    env: tuple[tuple[str, str], ...] = ()
    """The registry variables set for the tools service, passed on."""
    secrets: tuple[str, ...] = field(default=(), repr=False)
    """Passwords and tokens found in them, redacted from command output."""
    problems: tuple[str, ...] = ()
    """Files that could not be read or parsed (logged when the service starts)."""


class _Collector:
    def __init__(self, exclude: tuple[str, ...], home: str) -> None:
        self.exclude = exclude
        self.home = home
        self.hosts: list[str] = []
        self.paths: list[str] = []
        self.secrets: list[str] = []
        self.problems: list[str] = []

    def location(self, value: str, base: Path | None = None) -> None:
        """A URL or path pip or npm reads packages from."""
        value = value.strip()
        if not value:
            return
        parts = urlsplit(value)
        if parts.scheme in ("http", "https"):
            try:
                port = parts.port or (443 if parts.scheme == "https" else 80)
            except ValueError:
                self.problems.append(f"not a URL: {value}")
                return
            host = parts.hostname or ""
            if host:
                self.hosts.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
            for secret in (parts.password, parts.username if parts.password is None else None):
                if secret:
                    self.secrets.append(unquote(secret))
        elif parts.scheme == "file":
            path = unquote(parts.path).rstrip("/")
            # A PEP 503 index <root>/simple/ links its files beside it (<root>/files, <root>/packages): grant <root>.
            root = os.path.dirname(path)
            if os.path.basename(path) == "simple" and root not in ("", "/", self.home):
                path = root
            self.path(path)
        elif not parts.scheme:
            self.path(value, base)

    def path(self, value: str, base: Path | None = None) -> None:
        path = Path(os.path.expanduser(value.strip()))
        if not path.is_absolute() and base is not None:
            path = base / path
        real = os.path.realpath(path)
        if os.path.exists(real) and not any(real == ex or real.startswith(ex.rstrip("/") + "/")
                                            or ex.startswith(real.rstrip("/") + "/") for ex in self.exclude):
            self.paths.append(real)


def _pip_file(path: Path, found: _Collector) -> None:
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    try:
        parser.read(path, encoding="utf-8")
    except (OSError, configparser.Error, UnicodeDecodeError) as exc:
        found.problems.append(f"{path}: {exc}")
        return
    for section in parser.sections():
        if section.lower() not in _PIP_SECTIONS:
            continue
        for key, value in parser.items(section):
            key = key.lower().replace("_", "-")
            if key in _URL_KEYS:
                for item in value.split():
                    found.location(item, path.parent)
            elif key in _PATH_KEYS:
                found.path(value, path.parent)


def _npm_file(path: Path, found: _Collector) -> None:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        found.problems.append(f"{path}: {exc}")
        return
    for line in lines:
        key, sep, value = line.strip().partition("=")
        if not sep or key.startswith((";", "#")):
            continue
        key, value = key.strip().lower(), value.strip().strip("\"'")
        if key == "registry" or key.endswith(":registry"):
            found.location(value)
        elif key == "cafile":
            found.path(value, path.parent)
        elif key.rsplit(":", 1)[-1] in _NPM_SECRET_KEYS and value and not value.startswith("${"):
            found.secrets.append(value)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes() if path.is_file() else None
    except OSError:
        return None


def machine_registries(environ: Mapping[str, str] | None = None, *, home: str | None = None,
                       exclude: Iterable[str] = ()) -> RegistryConfig:
    """The registries pip and npm are configured with here (see the module).

    Args:
        environ: the variables to read (default: this process's).
        home: the user's home directory (default: ``HOME``).
        exclude: paths never granted, nor anything beneath or above them (the data dir).
    """
    env = dict(os.environ if environ is None else environ)
    home_dir = Path(home or env.get("HOME") or os.path.expanduser("~"))
    found = _Collector(tuple(os.path.realpath(os.path.expanduser(p)) for p in exclude), str(home_dir))
    config_dirs = [d for d in env.get("XDG_CONFIG_DIRS", "/etc/xdg").split(os.pathsep) if d]
    config_home = Path(env.get("XDG_CONFIG_HOME") or home_dir / ".config")
    pip_user = {".pip/pip.conf": home_dir / ".pip" / "pip.conf",
                ".config/pip/pip.conf": config_home / "pip" / "pip.conf"}
    pip_files = [Path(d) / "pip" / "pip.conf" for d in config_dirs] + [Path("/etc/pip.conf")]
    pip_files += [Path(sys.prefix) / "pip.conf", *pip_user.values()]
    if env.get("PIP_CONFIG_FILE") and env["PIP_CONFIG_FILE"] != os.devnull:
        pip_files.append(Path(env["PIP_CONFIG_FILE"]))
        found.path(env["PIP_CONFIG_FILE"])
    for path in pip_files:
        if path.is_file():
            _pip_file(path, found)
    npm_user = Path(env.get("NPM_CONFIG_USERCONFIG") or env.get("npm_config_userconfig") or home_dir / ".npmrc")
    for path in (Path("/etc/npmrc"), Path("/usr/etc/npmrc"), Path("/usr/local/etc/npmrc"), npm_user):
        if path.is_file():
            _npm_file(path, found)
    passed = []
    for name in (*PIP_VARIABLES, *NPM_VARIABLES):
        value = env.get(name)
        if value is None:
            continue
        passed.append((name, value))
        if name.endswith(("INDEX_URL", "FIND_LINKS", "registry", "REGISTRY")):
            for item in value.split():
                found.location(item)
        elif name.endswith(("CERT", "CONSTRAINT", "cafile", "CAFILE")):
            found.path(value)
    home_files = [(rel, data) for rel, path in pip_user.items() if (data := _read(path)) is not None]
    if (data := _read(npm_user)) is not None:
        home_files.append((".npmrc", data))
    return RegistryConfig(
        hosts=tuple(dict.fromkeys(found.hosts)),
        read_paths=tuple(dict.fromkeys(found.paths)),
        home_files=tuple(home_files),
        env=tuple(passed),
        secrets=tuple(dict.fromkeys(found.secrets)),
        problems=tuple(found.problems),
    )
