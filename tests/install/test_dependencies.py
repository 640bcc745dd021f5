"""What an install holds is what its processes import: a plain install runs every service, an image its own.

Each test runs a real Python in an environment holding only the distributions that install would bring
(:mod:`.envs`), so a dependency left out of ``pyproject.toml`` fails here as it would for a user, without a
download. ``.ci/run`` does the same for real: it builds the wheel, installs it in a fresh venv and runs
``autarch demo``.
"""

from __future__ import annotations

import fcntl
import json
import socket
import subprocess
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from autarch.cli.local.natsserver import free_port
from autarch.cli.local.supervisor import SERVICE_ORDER
from autarch.cli.local_system import scrubbed_env
from autarch.runtime.startup import CANNOT_START
from tests.infra.manifests import INFRA, image_requirements

from .envs import PYPROJECT, restricted_env

PLAIN = PYPROJECT["project"]["dependencies"]
"""What ``pip install autarch`` (no extra) asks for."""

IMPORT_ALL = """
import importlib, json, pkgutil, sys
names = []
for package in sys.argv[1:]:
    module = importlib.import_module(package)
    names.append(package)
    if hasattr(module, "__path__"):
        names += [info.name for info in pkgutil.walk_packages(module.__path__, package + ".")]
failed = {}
for name in names:
    try:
        importlib.import_module(name)
    except BaseException as exc:
        failed[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps({"imported": len(names) - len(failed), "failed": failed}))
"""
"""Import every module of the packages named as arguments; print what failed, and why."""

MISSING_RUSTWORKX = (
    "orchestrator: cannot start: a dependency is not installed: rustworkx>=0.15. The 'orchestrator' extra brings "
    "it: pip install 'autarch[orchestrator]' (a plain `pip install autarch` has every service's).")

LEFT_OUT = {"orchestrator": "rustworkx>=0.15", "gateway": "litestar>=2.12", "tools": "pathspec>=1.1,<2",
            "git": "dulwich>=0.22", "agent_runner": "anthropic>=2.12", "indexer": "onnxruntime>=1.17",
            "scripted_model": "uvicorn>=0.30"}
"""For each process with an extra, one requirement of it to leave out of an install."""


def import_all(python: Path, *packages: str) -> dict:
    done = subprocess.run([str(python), "-c", IMPORT_ALL, *packages], capture_output=True, text=True, timeout=240,
                          env=scrubbed_env(), cwd=python.parents[1])
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.slow
def test_a_plain_install_imports_every_module_of_every_service_the_gateway_and_the_cli(tmp_path: Path):
    python = restricted_env(tmp_path / "plain", PLAIN)
    found = import_all(python, *(f"autarch.{p}" for p in ("contracts", "runtime", "cli", "services", "gateway")))
    assert found["failed"] == {}
    assert found["imported"] > 250


def _images() -> dict[str, list[str]]:
    """Each compose service built from the Dockerfile, with the extras its image installs."""
    compose = yaml.safe_load((INFRA / "compose.yaml").read_text())
    images = {}
    for spec in compose["services"].values():
        args = (spec.get("build") or {}).get("args") or {}
        if "SERVICE" in args:
            images[args["SERVICE"]] = [e for e in args.get("EXTRAS", "").split(",") if e]
    return images


IMAGES = _images()


@pytest.mark.slow
@pytest.mark.parametrize("service", sorted(IMAGES))
def test_an_image_imports_every_module_of_its_own_service(service: str, tmp_path: Path):
    python = restricted_env(tmp_path / service, image_requirements(IMAGES[service]))
    package = "autarch.gateway" if service == "gateway" else f"autarch.services.{service}"
    found = import_all(python, package)  # with whatever of runtime and contracts its modules import
    assert found["failed"] == {}, f"the {service} image (extras {IMAGES[service]}) cannot import these"
    check = subprocess.run([str(python), "-c", f"from autarch.runtime.startup import require_extra; "
                            f"require_extra({service!r})"], capture_output=True, text=True, env=scrubbed_env(),
                           cwd=tmp_path)
    assert (check.returncode, check.stderr) == (0, "")


def test_every_service_extra_is_in_a_plain_install():
    optional = PYPROJECT["project"]["optional-dependencies"]
    for extra in (*SERVICE_ORDER, "gateway", "scripted_model"):
        assert set(optional.get(extra, [])) <= set(PLAIN), extra


@pytest.mark.parametrize("service", sorted(LEFT_OUT))
def test_a_process_without_a_package_of_its_extra_names_it_and_the_extra_once_and_exits_78(
        service: str, tmp_path: Path):
    requirement = LEFT_OUT[service]
    assert requirement in PYPROJECT["project"]["optional-dependencies"][service]
    name = Requirement(requirement).name
    python = restricted_env(tmp_path / "env", PLAIN, without=frozenset({name}))
    module = "autarch.gateway" if service == "gateway" else f"autarch.services.{service}"
    done = subprocess.run([str(python), "-m", module], capture_output=True, text=True, timeout=60,
                          env=scrubbed_env(), cwd=tmp_path)
    assert (done.returncode, done.stdout) == (CANNOT_START, "")
    assert done.stderr == (
        f"{service}: cannot start: a dependency is not installed: {requirement}. The '{service}' extra brings it: "
        f"pip install 'autarch[{service}]' (a plain `pip install autarch` has every service's).\n")


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_autarch_up_stops_when_a_service_cannot_start_instead_of_restarting_it(tmp_path: Path):
    # Every service and the gateway as processes, from an install that lacks the orchestrator's rustworkx.
    python = restricted_env(tmp_path / "env", PLAIN, without=frozenset({"rustworkx"}))
    data, port, nats_port = tmp_path / "data", free_port(), free_port()
    env = {**scrubbed_env(), "AUTARCH_DATA_DIR": str(data), "AUTARCH_PORT": str(port),
           "AUTARCH_NATS_PORT": str(nats_port)}
    # Restarted forever, it would never exit: the timeout fails the test.
    done = subprocess.run([str(python), "-m", "autarch.cli.main", "up"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120, env=env, cwd=tmp_path)

    log = done.stdout
    assert done.returncode == 1, log
    assert f"orchestrator | {MISSING_RUSTWORKX}\n" in log and log.count(MISSING_RUSTWORKX) == 1, log
    assert "exited with" not in log and "; restarting in" not in log, log
    assert "ERROR supervisor: orchestrator cannot start (it said why above); stopping the system" in log
    assert log.endswith("autarch up: stopped: orchestrator cannot start (its reason is in the log above)\n"), log
    assert not _listening(port) and not _listening(nats_port)
    assert not (data / "run.json").exists()
    with open(data / "system.lock") as lock:  # released: the next `autarch up` may have the data dir
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
