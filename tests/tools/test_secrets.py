"""A planted-secrets corpus: no secret byte comes out through read_file, grep, shell or get_diff's gate."""

from __future__ import annotations

import json

import pytest

from autarch.services.tools.sensitivity import Redactor, is_sensitive_path

# Built from pieces so this file itself does not look like it holds live credentials.
AWS_KEY_ID = "AKIA" + "QX7RZ2MEXAMPLEKY"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY42"
GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
GITLAB_TOKEN = "glpat-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm"
SLACK_TOKEN = "xoxb-" + "1234567890-0987654321-AbCdEfGhIjKlMnOp"
STRIPE_KEY = "sk_live_" + "51HqLyjWDarjtT1zdp7dcXYZ"
GOOGLE_KEY = "AIza" + "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"
ANTHROPIC_KEY = "sk-ant-" + "api03-Q1w2E3r4T5y6U7i8O9p0AsDfGhJkL"
JWT = "eyJhbGciOiJIUzI1NiJ9." + "eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
DB_PASSWORD = "Tr0ub4dor-and-3"
DOTENV_SECRET = "s3cr3t-dotenv-valu3-991"
YAML_PASSWORD = "hunter2-yaml-77"
PRIVATE_KEY_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7" + "VJTUt9Us8cKjMzEfYyjiWA4R4"
PRIVATE_KEY = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    f"{PRIVATE_KEY_BODY}\n"
    "4KHfp0xoEo8sFRNfVvXpW9Fz8yQ2jY7lN3bZk1mCdEaPqRsTuVwX\n"
    "-----END RSA PRIVATE KEY-----\n"
)

SECRETS = [
    AWS_KEY_ID,
    AWS_SECRET,
    GITHUB_TOKEN,
    GITLAB_TOKEN,
    SLACK_TOKEN,
    STRIPE_KEY,
    GOOGLE_KEY,
    ANTHROPIC_KEY,
    JWT,
    DB_PASSWORD,
    DOTENV_SECRET,
    YAML_PASSWORD,
    PRIVATE_KEY_BODY,
]

CORPUS = {
    "config/settings.py": (
        f'AWS_ACCESS_KEY_ID = "{AWS_KEY_ID}"\n'
        f'aws_secret_access_key = "{AWS_SECRET}"\n'
        f"GITHUB = '{GITHUB_TOKEN}'\n"
        "def token_for(user):\n"
        "    token = user.next_token()\n"
        "    return token\n"
    ),
    "config/app.yaml": (
        f"database:\n  url: postgres://app:{DB_PASSWORD}@db.internal:5432/app\n  password: {YAML_PASSWORD}\n"
    ),
    "src/clients.ts": (
        f'const slack = "{SLACK_TOKEN}";\nconst stripe = "{STRIPE_KEY}";\nconst maps = "{GOOGLE_KEY}";\n'
        f"const gitlab = '{GITLAB_TOKEN}';\n"
    ),
    "src/auth.md": f"Example bearer: {JWT}\nAnthropic: {ANTHROPIC_KEY}\n",
    "docs/embedded-key.txt": "The service key follows.\n" + PRIVATE_KEY + "End of key.\n",
    ".env": f"DATABASE_PASSWORD={DB_PASSWORD}\nAPP_SECRET={DOTENV_SECRET}\nAWS_SECRET_ACCESS_KEY={AWS_SECRET}\n",
    ".env.production": f"STRIPE_KEY={STRIPE_KEY}\n",
    "deploy/server.pem": PRIVATE_KEY,
    "home/.aws/credentials": f"[default]\naws_access_key_id={AWS_KEY_ID}\naws_secret_access_key={AWS_SECRET}\n",
    "id_ed25519": PRIVATE_KEY,
}


def leaks(text: str) -> list[str]:
    """Secrets (or any 10-character piece of one) found in ``text``."""
    found = []
    for secret in SECRETS:
        if any(secret[i : i + 10] in text for i in range(0, len(secret) - 9)):
            found.append(secret)
    return found


@pytest.fixture
def corpus(worktree):
    for rel, text in CORPUS.items():
        path = worktree / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return worktree


async def test_read_file_never_returns_a_secret(tools, corpus):
    for rel in CORPUS:
        result = await tools.result("read_file", {"path": rel})
        assert not leaks(result.content), rel
        if is_sensitive_path(rel):
            assert json.loads(result.content)["blocked"] is True
    code = await tools("read_file", {"path": "config/settings.py"})
    assert "token = user.next_token()" in code  # ordinary code is not mistaken for a secret
    key_file = await tools("read_file", {"path": "docs/embedded-key.txt"})
    assert key_file.splitlines()[-1].endswith("End of key.")  # line numbers survive redaction
    assert key_file.splitlines()[-1].lstrip().startswith("6\t")


async def test_grep_cannot_be_used_as_a_secret_oracle(tools, corpus):
    probes = [secret[:12] for secret in SECRETS] + [secret[-12:] for secret in SECRETS]
    probes += ["AKIA", "ghp_", "xoxb-", "sk_live", "BEGIN RSA PRIVATE", "eyJ", "Tr0ub", "hunter2"]
    probes += [f"{AWS_KEY_ID[:6]}[A-Z0-9]", r"(?<=AKIA)Q", r"sk-ant-\w+"]
    for probe in probes:
        value = await tools("grep", {"pattern": probe})
        assert value["results"] == [], probe
    # Lines are still found by what is not secret on them.
    found = {(r["file_path"], r["line_number"]) for r in (await tools("grep", {"pattern": "aws_secret"}))["results"]}
    assert found == {("config/settings.py", 2)}


async def test_shell_output_never_shows_a_secret(tools, corpus, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    commands = [
        "cat .env .env.production",
        "cat deploy/server.pem id_ed25519",
        "cat config/settings.py config/app.yaml src/clients.ts src/auth.md docs/embedded-key.txt",
        "cat home/.aws/credentials",
        "env",
        "grep -rh . --include=*.env* . ; cat .env | base64 -d 2>/dev/null; true",
        "sed -n 2p .env; awk -F= '{print $2}' .env",
    ]
    for command in commands:
        result = await tools.result("shell", {"command": command, "timeoutSeconds": 10})
        assert not leaks(result.content), command
    cut = await tools("shell", {"command": "cat .env"})
    assert "DATABASE_PASSWORD=[blocked]" in cut["stdout"]


def test_redactor_keeps_line_count_and_ordinary_text():
    text = "a\n" + PRIVATE_KEY + "b = 'short'\npassword = get_password()\n"
    redacted = Redactor().redact(text)
    assert redacted.count("\n") == text.count("\n")
    assert "b = 'short'" in redacted and "password = get_password()" in redacted
    assert not leaks(redacted)


async def test_diff_gate_withholds_sensitive_files_and_redacts_the_rest(tools, corpus):
    from autarch.services.tools.context import ToolContext
    from autarch.services.tools.forwarded import gate_diff

    diff = (
        "diff --git a/.env b/.env\n+APP_SECRET=" + DOTENV_SECRET + "\n"
        "diff --git a/app.py b/app.py\n+KEY = '" + STRIPE_KEY + "'\n+print('hello')\n"
    )
    ctx = ToolContext(
        call=None,  # not used by the redaction tested here
        variant="base",
        worktree=None,  # not used by the redaction tested here
        store=None,  # not used by the redaction tested here
        engine=None,  # not used by the redaction tested here
        forwarder=None,  # not used by the redaction tested here
        redactor=Redactor(),
        settings=None,  # not used by the redaction tested here
    )
    gated = gate_diff(ctx, diff)
    assert not leaks(gated)
    assert "+print('hello')" in gated and "diff --git a/.env b/.env" in gated


def test_platform_secret_values_are_the_secret_ones():
    from autarch.services.tools.sensitivity import platform_secret_values

    environ = {
        "AUTARCH_EXA_API_KEY": "exa-0123456789",
        "AUTARCH_DATA_DIR": "/root/.local/share/autarch",
        "AUTARCH_NATS_URL": "nats://127.0.0.1:4333",
        "GITHUB_TOKEN": "gh-token-value-1",
        "SHORT_KEY": "abc",
    }
    assert sorted(platform_secret_values(environ)) == ["exa-0123456789", "gh-token-value-1"]
