"""The Tiltfile: every image it builds is used, every resource names an object it applies, all of it valid.

The Tiltfile is evaluated with its Tilt built-ins recorded (``manifests.run_tiltfile``), so what is checked is
what ``tilt up`` would apply, after the Tiltfile's own adjustments for a one-machine cluster.
"""

from __future__ import annotations

import kubernetes_validate
import pytest

from .manifests import (
    PRODUCT,
    ROOT,
    WORKLOAD_KINDS,
    image_requirements,
    pod_spec,
    run_tiltfile,
    run_tiltfile_in_starlark,
    selector_matches,
    workload_name,
)
from .test_manifests import KUBERNETES_VERSION

RUN = run_tiltfile()
WORKLOADS = {obj["metadata"]["name"]: obj for obj in RUN.objects if obj["kind"] in WORKLOAD_KINDS}


def _images_used() -> set[str]:
    images = set()
    for workload in WORKLOADS.values():
        spec = pod_spec(workload)
        images |= {c["image"] for c in spec["containers"] + spec.get("initContainers", [])}
    return images


def test_the_tiltfile_is_starlark_and_does_there_what_it_does_here():
    # The checks below evaluate the Tiltfile as Python; Starlark refuses some Python (f-strings, while loops,
    # `is`, classes…), so it also runs in starlark-go and must make the very same calls.
    for environ in ({}, {"ANTHROPIC_API_KEY": "sk-test"}):
        in_starlark = run_tiltfile_in_starlark(environ)
        in_python = run_tiltfile(environ)
        assert in_starlark.builds == in_python.builds
        assert in_starlark.resources == in_python.resources
        assert in_starlark.objects == in_python.objects


def test_the_starlark_check_refuses_python_that_tilt_would_refuse(tmp_path, monkeypatch):
    from starlark_go.errors import StarlarkError

    from . import manifests

    tiltfile = tmp_path / "Tiltfile"
    tiltfile.write_text("name = f'autarch-{1}'\n")
    monkeypatch.setattr(manifests, "ROOT", tmp_path)
    with pytest.raises(StarlarkError):
        manifests.run_tiltfile_in_starlark()


def test_what_tilt_applies_is_valid_for_the_kubernetes_api():
    assert RUN.objects
    for obj in RUN.objects:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_every_service_has_an_image_built_from_the_one_dockerfile_with_real_extras():
    built = {build["ref"]: build for build in RUN.builds}
    assert set(built) == {workload_name(service) for service in PRODUCT}
    for service in PRODUCT:
        build = built[workload_name(service)]
        assert (ROOT / build["dockerfile"]).is_file()
        assert build["build_args"]["SERVICE"] == service
        assert image_requirements([e for e in build["build_args"]["EXTRAS"].split(",") if e])
        for path in build["only"]:
            assert (ROOT / build["context"] / path).exists(), path


def test_every_image_built_is_used_and_every_autarch_image_used_is_built():
    built = {build["ref"] for build in RUN.builds}
    used = {image for image in _images_used() if image.startswith("autarch-")}
    assert built == used


def test_every_resource_names_a_workload_or_objects_tilt_applies():
    names = set()
    for resource in RUN.resources:
        if resource["workload"]:
            assert resource["workload"] in WORKLOADS, f"no workload {resource['workload']}"
            names.add(resource["workload"])
        else:
            names.add(resource["new_name"])
        for selector in resource.get("objects", []):
            matches = [obj for obj in RUN.objects if selector_matches(selector, obj)]
            assert len(matches) == 1, f"{selector} matches {len(matches)} objects"
            assert matches[0]["kind"] not in WORKLOAD_KINDS
    for resource in RUN.resources:
        assert set(resource.get("resource_deps", [])) <= names, resource
    # Every workload of the manifests is a resource (the clone job is an example applied by hand).
    assert {r["workload"] for r in RUN.resources if r["workload"]} == set(WORKLOADS)


def test_the_secret_carries_what_the_manifests_read_and_the_key_only_when_given():
    (secret,) = [obj for obj in RUN.objects if obj["kind"] == "Secret"]
    assert set(secret["stringData"]) == {"token", "postgres-password", "postgres-url"}
    assert secret["stringData"]["postgres-password"] in secret["stringData"]["postgres-url"]
    with_key = run_tiltfile({"ANTHROPIC_API_KEY": "sk-test", "AUTARCH_DEV_TOKEN": "t0ken"})
    (secret,) = [obj for obj in with_key.objects if obj["kind"] == "Secret"]
    assert secret["stringData"]["anthropic-api-key"] == "sk-test"
    assert secret["stringData"]["token"] == "t0ken"


def test_on_one_machine_the_work_volume_is_read_write_once():
    (claim,) = [obj for obj in RUN.objects
                if obj["kind"] == "PersistentVolumeClaim" and obj["metadata"]["name"] == "autarch-work"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]


@pytest.mark.parametrize("service", PRODUCT)
def test_services_wait_for_nats_and_the_stores_for_postgres(service: str):
    (resource,) = [r for r in RUN.resources if r["workload"] == workload_name(service)]
    assert "autarch-nats" in resource["resource_deps"]
    uses_postgres = any(var["name"] == "AUTARCH_POSTGRES_URL"
                        for var in pod_spec(WORKLOADS[workload_name(service)])["containers"][0].get("env", []))
    assert ("autarch-postgres" in resource["resource_deps"]) == uses_postgres
