"""The sensitivity gate: sensitive paths are blocked, secrets in content are replaced by ``[blocked]``.

Two layers. Paths that name secret material (``.env*``, private keys, credential files, git
internals) are never read, written, edited or searched. Content that is read anyway (source
files, shell output, diffs, search snippets) has every recognised secret replaced by
``[blocked]``: cloud keys, provider tokens, private key blocks, passwords in URLs, quoted or
``.env``-style secret assignments, and any literal secret value the gate was told about (the
platform's own keys, values found in the worktree's sensitive files). Redaction keeps line
breaks, so line numbers stay true.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

__all__ = [
    "BLOCKED",
    "SENSITIVE_PATH_REASON",
    "Redactor",
    "is_sensitive_path",
    "platform_secret_values",
    "worktree_secret_values",
]

BLOCKED = "[blocked]"
SENSITIVE_PATH_REASON = "File matches a sensitive path pattern (environment files, keys, credentials)"

_SENSITIVE_NAME = re.compile(
    r"""^(?:
        \.env(?:\..*)?|.*\.env|\.envrc|
        .*\.(?:pem|key|p12|pfx|jks|keystore|ppk|kdbx|tfstate|tfstate\.backup|tfvars)|
        id_(?:rsa|dsa|ecdsa|ed25519)(?!.*\.pub$).*|
        \.netrc|_netrc|\.npmrc|\.pypirc|\.pgpass|\.git-credentials|\.htpasswd|\.dockercfg|
        credentials(?:\.(?:json|ya?ml|xml|ini|toml|csv))?|
        secrets?(?:\.(?:json|ya?ml|toml|ini|env|txt))?|
        client_secrets?.*\.json|.*service[-_]?account.*\.json
    )$""",
    re.IGNORECASE | re.VERBOSE,
)
_SENSITIVE_DIRS = frozenset({".git", ".ssh", ".gnupg", ".aws", ".azure", ".gcloud", ".kube", ".docker"})


def is_sensitive_path(rel: str) -> bool:
    """True when a worktree-relative path names secret material (or git internals)."""
    parts = rel.split("/")
    if any(part in _SENSITIVE_DIRS for part in parts[:-1]) or parts[-1] == ".git":
        return True
    return bool(_SENSITIVE_NAME.match(parts[-1]))


# Every pattern starts with a literal, so ``re`` finds candidates at memchr speed (a leading ``\b``
# or character class would make it try every position, ~50x slower).
_TOKEN_PATTERNS: list[tuple[re.Pattern[str], int]] = [
    # (pattern, group to blank; 0 = the whole match)
    (
        re.compile(
            r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----"
            r"(?:[\s\S]*?-----END[A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----|[A-Za-z0-9+/=\s:,.\-]*)"
        ),
        0,
    ),
    (re.compile(r"AKIA[A-Z0-9]{16}"), 0),
    (re.compile(r"ASIA[A-Z0-9]{16}"), 0),
    (re.compile(r"gh[pousr]_[A-Za-z0-9]{30,255}"), 0),
    (re.compile(r"github_pat_[A-Za-z0-9_]{22,255}"), 0),
    (re.compile(r"glpat-[A-Za-z0-9_\-]{20,}"), 0),
    (re.compile(r"xox[abposr]-[A-Za-z0-9\-]{10,}"), 0),
    (re.compile(r"hooks\.slack\.com/services/[A-Za-z0-9/_\-]+"), 0),
    (re.compile(r"sk_live_[A-Za-z0-9]{16,}"), 0),
    (re.compile(r"sk_test_[A-Za-z0-9]{16,}"), 0),
    (re.compile(r"rk_live_[A-Za-z0-9]{16,}"), 0),
    (re.compile(r"AIza[0-9A-Za-z_\-]{35}"), 0),
    (re.compile(r"sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{20,}"), 0),
    (re.compile(r"npm_[A-Za-z0-9]{36}"), 0),
    (re.compile(r"pypi-[A-Za-z0-9_\-]{50,}"), 0),
    (re.compile(r"SG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}"), 0),
    (re.compile(r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"), 0),
    # user:password@host in URLs (database URLs, git remotes with tokens)
    (re.compile(r"://[^\s:/@'\"]+:([^\s@/'\"]+)@"), 1),
    # Azure connection strings and SAS tokens
    (re.compile(r"AccountKey=([A-Za-z0-9+/%=]{16,})"), 1),
    (re.compile(r"SharedAccessKey=([A-Za-z0-9+/%=]{16,})"), 1),
    (re.compile(r"sig=([A-Za-z0-9+/%=]{16,})"), 1),
]

_KEYWORDS = (
    "password", "passwd", "passphrase", "secret", "token", "api_key", "apikey", "api-key",
    "access_key", "accesskey", "private_key", "credential", "auth",
)  # fmt: skip
# Matched against ASCII-lower-cased text; group 1 = a quoted value, group 2 = an unquoted one.
_ASSIGNMENTS = [
    re.compile(
        re.escape(keyword) + r"[a-z0-9_.\-]*[\"']?[ \t]*(?:[:=]|=>)[ \t]*(?:[\"']([^\"'\s]{6,})[\"']|([^\s\"'#,;]{6,}))"
    )
    for keyword in _KEYWORDS
]
_ENV_NAME_PREFIX = re.compile(r"[ \t]*(?:export[ \t]+)?[A-Z0-9_]*\Z")
_YAML_NAME_PREFIX = re.compile(r"[ \t]*(?:-[ \t]+)?[A-Za-z0-9_.\-]*\Z")
_HAS_DIGIT = re.compile(r"[0-9]")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _assignment_spans(text: str) -> list[tuple[int, int]]:
    """Values of secret-looking assignments: quoted ones anywhere, unquoted ones only in config shapes.

    Unquoted values are taken from ``.env`` lines (``DB_PASSWORD=…``, upper-case name first on the
    line) and YAML-like lines (``password: …``, containing a digit), never from code such as
    ``token = self.next_token()``.
    """
    lowered = text.lower()
    if len(lowered) != len(text):  # a few characters (İ) lower to two: keep offsets true
        lowered = text.translate(_ASCII_LOWER)
    spans = []
    for pattern in _ASSIGNMENTS:
        for match in pattern.finditer(lowered):
            if match.start(1) >= 0:
                spans.append(match.span(1))
                continue
            line_start = text.rfind("\n", 0, match.start()) + 1
            prefix = text[line_start : match.start()]
            name_end = match.start() + len(match.group(0)) - len(match.group(2))
            name = text[match.start() : name_end]
            value = match.group(2)
            if "=" in name and _ENV_NAME_PREFIX.match(prefix) and name.split("=")[0].strip().isupper():
                spans.append(match.span(2))
            elif ":" in name and _YAML_NAME_PREFIX.match(prefix) and _HAS_DIGIT.search(value):
                spans.append(match.span(2))
    return spans


def _blank(text: str) -> str:
    """``[blocked]`` that keeps as many line breaks as the text it replaces."""
    return BLOCKED + "\n" * text.count("\n")


class Redactor:
    """Replaces every recognised secret in text with ``[blocked]``."""

    def __init__(self, literals: Iterable[str] = ()) -> None:
        self._values = sorted({v for v in literals if len(v) >= 6}, key=len, reverse=True)
        self._literals = re.compile("|".join(map(re.escape, self._values))) if self._values else None

    @property
    def literals(self) -> tuple[str, ...]:
        """The literal values this redactor blanks."""
        return tuple(self._values)

    def with_literals(self, literals: Iterable[str]) -> Redactor:
        """A redactor that also blanks these literal values."""
        return Redactor([*self._values, *literals])

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Sorted, merged character spans of every secret in ``text``."""
        found: list[tuple[int, int]] = _assignment_spans(text)
        for pattern, group in _TOKEN_PATTERNS:
            for match in pattern.finditer(text):
                start, end = match.span(group)
                if end > start:
                    found.append((start, end))
        if self._literals is not None:
            found.extend(match.span() for match in self._literals.finditer(text))
        found.sort()
        merged: list[tuple[int, int]] = []
        for start, end in found:
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
            else:
                merged.append((start, end))
        return merged

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced by ``[blocked]`` (line breaks kept)."""
        spans = self.spans(text)
        if not spans:
            return text
        out, last = [], 0
        for start, end in spans:
            out.append(text[last:start])
            out.append(_blank(text[start:end]))
            last = end
        out.append(text[last:])
        return "".join(out)


_SECRET_VALUE_NAME = re.compile(
    r"(?i)(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|_DSN$|DATABASE_URL$|POSTGRES_URL$)"
)


def platform_secret_values(environ: dict[str, str] | None = None) -> list[str]:
    """Values of this process's secret variables (API keys, tokens, passwords), to blank wherever they appear.

    Agent commands inherit none of them (their environment is an allow-list, :mod:`.sandbox`); this is for
    output that quotes them anyway (a config file, a log).
    """
    environ = dict(os.environ if environ is None else environ)
    return [
        value
        for name, value in environ.items()
        if _SECRET_VALUE_NAME.search(name) and len(value) >= 8 and not value.startswith("/")
    ]


_DOTENV_LINE = re.compile(r"(?m)^[ \t]*(?:export[ \t]+)?[A-Za-z_][A-Za-z0-9_.\-]*[ \t]*[=:][ \t]*([^\r\n]*)$")
_HEAVY_DIRS = frozenset({".git", "node_modules", ".venv", "venv", "__pycache__", "target", "dist", "build", ".tox"})


def worktree_secret_values(root: str, *, max_depth: int = 4, max_entries: int = 5000) -> list[str]:
    """Literal values found in the worktree's sensitive files (``.env`` values, key material).

    Shell commands are not confined to tools' path checks (``cat .env`` works), so their
    output is also scrubbed of these exact values. The walk ignores ``.gitignore`` (that is
    where ``.env`` files hide) but is bounded in depth and entries.
    """
    values: list[str] = []
    seen = 0
    stack = [(root, 0)]
    while stack:
        directory, depth = stack.pop()
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    seen += 1
                    if seen > max_entries:
                        return values
                    if entry.is_dir(follow_symlinks=False):
                        if depth + 1 < max_depth and entry.name not in _HEAVY_DIRS:
                            stack.append((entry.path, depth + 1))
                    elif entry.is_file(follow_symlinks=False) and _SENSITIVE_NAME.match(entry.name):
                        values.extend(_values_of(entry.path))
        except OSError:
            continue
    return values


def _values_of(path: str) -> list[str]:
    try:
        with open(path, "rb") as handle:
            text = handle.read(256 * 1024).decode("utf-8", "replace")
    except OSError:
        return []
    values = []
    for line in text.splitlines():
        match = _DOTENV_LINE.match(line)
        if match:
            value = match.group(1).strip().strip("\"'")
            if len(value) >= 6:
                values.append(value)
        elif not line.startswith("-----"):
            # Key files and other non-dotenv material: every long token of it.
            values.extend(re.findall(r"[A-Za-z0-9+/=_\-]{16,}", line))
    return values
