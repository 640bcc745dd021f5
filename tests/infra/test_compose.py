"""infra/compose.yaml: every service, real settings, names that resolve, one view of the repositories.

``docker compose config`` is not available on the build machines: the file is checked against the Compose
Specification by the ``compose_spec`` crate's parser (key names, value types and variants, secret references),
and its meaning for Autarch by the structural checks below (PyYAML resolves anchors and ``<<`` merges as compose
does).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from compose_spec import PyCompose

from autarch.runtime.settings import SECRET_SETTINGS, load_settings

from .manifests import (
    INFRA,
    PRODUCT,
    SDK_VARIABLES,
    hot_standby_services,
    image_requirements,
    module_exists,
    module_of,
    setting_of,
    workload_name,
)

TEXT = (INFRA / "compose.yaml").read_text()
COMPOSE = yaml.safe_load(TEXT)
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
INFRASTRUCTURE = {"autarch-nats-1", "autarch-nats-2", "autarch-nats-3", "postgres"}
REPOS = "/srv/autarch/repos"


def _environment(service: str) -> dict[str, str | None]:
    env = SERVICES[service].get("environment", {})
    assert isinstance(env, dict), f"{service}: environment as a mapping, so merges apply"
    return env


def _mounts(service: str) -> dict[str, str]:
    """Container path → source (a named volume or a path relative to infra/)."""
    found = {}
    for entry in SERVICES[service].get("volumes", []):
        source, target, *_ = entry.split(":")
        found[target] = source
    return found


def _parsed(text: str) -> PyCompose:
    # Through JSON: the parser takes no YAML merge keys (`<<`), which PyYAML resolves as compose does.
    compose = PyCompose.from_json(json.dumps(yaml.safe_load(text)))
    compose.validate()
    return compose


def test_the_file_follows_the_compose_specification():
    assert set(_parsed(TEXT).service_names()) == set(SERVICES)


@pytest.mark.parametrize(("original", "mistake"), [
    ("    environment:\n      <<: *env\n      AUTARCH_HOST", "    enviroment:\n      <<: *env\n      AUTARCH_HOST"),
    ("condition: service_healthy", "condition: service_healty"),
    ("{source: token,", "{source: tokn,"),
    ("restart: unless-stopped\n  security_opt", "restart: sometimes\n  security_opt"),
], ids=["misspelt key", "unknown condition", "undeclared secret", "unknown restart policy"])
def test_the_specification_check_catches_mistakes(original: str, mistake: str):
    assert original in TEXT
    with pytest.raises(ValueError):
        _parsed(TEXT.replace(original, mistake, 1))


def test_every_service_of_the_product_and_nothing_unknown():
    assert set(SERVICES) == set(PRODUCT) | INFRASTRUCTURE


@pytest.mark.parametrize("service", PRODUCT)
def test_every_service_builds_its_image_from_the_one_dockerfile_and_runs_its_module(service: str):
    spec = SERVICES[service]
    build = spec["build"]
    assert (INFRA / build["context"] / build["dockerfile"]).resolve() == INFRA / "docker" / "Dockerfile"
    assert build["args"]["SERVICE"] == service
    assert spec["image"] == workload_name(service)
    assert spec["command"] == ["python", "-m", module_of(service)]
    assert module_exists(module_of(service))


@pytest.mark.parametrize("service", PRODUCT)
def test_every_variable_names_a_setting_and_the_settings_load(service: str):
    env = _environment(service)
    unknown = [name for name in env if setting_of(name) is None and name not in SDK_VARIABLES]
    assert not unknown, f"{service}: no such setting: {unknown}"
    for name, value in env.items():
        if setting_of(name) in SECRET_SETTINGS and setting_of(name) != "postgres_url":
            assert value is None, f"{service}: the secret {name} written in the file (pass it from the shell)"
    given = {name: value for name, value in env.items() if value is not None}
    settings = load_settings(environ=given).for_service(service)
    assert settings.data_dir == "/var/lib/autarch"


@pytest.mark.parametrize("service", PRODUCT)
def test_readiness_is_the_probe_of_the_service_itself(service: str):
    test = SERVICES[service]["healthcheck"]["test"]
    if service == "gateway":
        assert "http://127.0.0.1:8765/healthz" in test[-1]
        assert set(_environment(service)["AUTARCH_EXPECTED_SERVICES"].split(",")) == set(PRODUCT) - {"gateway"}
    else:
        assert test == ["CMD", "python", "-m", "autarch.runtime.probe", service]


def test_dependencies_name_services_and_volumes_and_secrets_are_declared():
    volumes = set(COMPOSE["volumes"])
    secrets = set(COMPOSE["secrets"])
    used = set()
    for name, spec in SERVICES.items():
        depends = spec.get("depends_on", {})
        assert set(depends) <= set(SERVICES), f"{name} depends on an unknown service"
        for target, source in _mounts(name).items():
            if source.startswith((".", "/")):
                assert (INFRA / source).is_file(), f"{name}: {source} does not exist"
            else:
                assert source in volumes, f"{name}: volume {source} for {target} is not declared"
                used.add(source)
        for secret in spec.get("secrets", []):
            assert secret["source"] in secrets
    assert used == volumes, f"declared but unused: {volumes - used}"
    for secret in COMPOSE["secrets"].values():
        assert secret["file"].startswith("./secrets/")  # infra/secrets/, which git ignores


def test_the_stores_wait_for_postgres_and_the_token_is_where_the_gateway_reads_it():
    for service in ("orchestrator", "agent_runner"):
        assert SERVICES[service]["depends_on"]["postgres"] == {"condition": "service_healthy"}
        assert _environment(service)["AUTARCH_POSTGRES_URL"].endswith("@postgres:5432/autarch")
    (secret,) = SERVICES["gateway"]["secrets"]
    assert secret == {"source": "token", "target": "/var/lib/autarch/token"}
    assert (INFRA / ".gitignore").read_text().splitlines().count("secrets/") == 1


def test_repositories_and_worktrees_are_shared_at_the_same_paths():
    for service in ("gateway", "orchestrator", "tools", "git", "indexer", "agent_runner"):
        assert _mounts(service).get(REPOS, "").startswith("repos"), f"{service} sees no repository"
        if service != "gateway":
            assert _mounts(service)["/var/lib/autarch/worktrees"] == "worktrees", service
    assert _mounts("gateway")[REPOS] == "repos"
    assert SERVICES["gateway"]["volumes"] == ["repos:/srv/autarch/repos:ro"]
    assert _mounts("git")["/var/lib/autarch/git"] == "git-state"


@pytest.mark.parametrize("service", PRODUCT)
def test_the_image_extras_exist(service: str):
    extras = [e for e in SERVICES[service]["build"]["args"]["EXTRAS"].split(",") if e]
    assert image_requirements(extras)  # SystemExit on an unknown extra


@pytest.mark.parametrize("service", sorted(hot_standby_services()))
def test_a_stateful_service_runs_once_unnamed(service: str):
    # Compose gives every replica one environment, so replicas could not have instance names of their own, and
    # two with one name would both lead (a restarted slot takes its lease back at once). One instance, restarted
    # by the engine; several on one machine is `autarch up --cluster`.
    assert SERVICES[service].get("deploy", {}).get("replicas", 1) == 1
    assert "AUTARCH_INSTANCE" not in _environment(service)
