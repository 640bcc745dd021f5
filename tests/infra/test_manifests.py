"""The Kubernetes manifests: valid for the API, and a deployment in which a workflow can run.

Validated offline against the JSON schemas of Kubernetes that ``kubernetes-validate`` ships, in strict mode
(an unknown field, a typo in ``readinessProbe``, is an error as the API server's strict field validation
makes it).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from autarch.cli.local.natsserver import find_nats_server
from autarch.runtime.settings import SECRET_SETTINGS, load_settings

from .manifests import (
    K8S,
    PRODUCT,
    SDK_VARIABLES,
    WORKLOAD_KINDS,
    hot_standby_services,
    k8s_documents,
    module_of,
    pod_spec,
    setting_of,
    workload_name,
)

KUBERNETES_VERSION = "1.30"
"""The oldest Kubernetes the manifests promise to work on (PodDisruptionBudget policy/v1, …)."""

SECRET = "autarch"
WORK_CLAIM = "autarch-work"
TOUCHES_REPOSITORIES = ("gateway", "orchestrator", "tools", "git", "indexer", "agent_runner")
"""The services that open a workflow's repository or its worktrees, so must see them at the same paths."""

DOCS = k8s_documents()
OBJECTS = {(doc["kind"], doc["metadata"]["name"]): doc for _, doc in DOCS}
CONFIG = OBJECTS[("ConfigMap", "autarch")]["data"]
DATA_DIR = CONFIG["AUTARCH_DATA_DIR"]


def _workload(service: str) -> dict[str, Any]:
    return OBJECTS[("Deployment", workload_name(service))]


def _container(service: str) -> dict[str, Any]:
    (container,) = pod_spec(_workload(service))["containers"]
    return container


def _mounts(service: str) -> dict[str, dict[str, Any]]:
    """The container's mounts by path."""
    return {m["mountPath"]: m for m in _container(service).get("volumeMounts", [])}


def _volumes(service: str) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in pod_spec(_workload(service)).get("volumes", [])}


def _environment(service: str) -> dict[str, str]:
    """The container's environment as the process sees it; a secret's value replaced by a stand-in."""
    container = _container(service)
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(OBJECTS[("ConfigMap", source["configMapRef"]["name"])]["data"])
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        elif "secretKeyRef" in var.get("valueFrom", {}):
            key = var["valueFrom"]["secretKeyRef"]["key"]
            env[var["name"]] = "postgresql://autarch:pw@db:5432/autarch" if key == "postgres-url" else "stand-in"
        elif "fieldRef" in var.get("valueFrom", {}):
            env[var["name"]] = f"{workload_name(service)}-5d8f9c-x2k4q"  # what metadata.name gives a pod
    return env


@pytest.mark.parametrize(("path", "doc"), DOCS, ids=[f"{p.name}:{d['kind']}/{d['metadata']['name']}" for p, d in DOCS])
def test_every_object_is_valid_for_the_kubernetes_api(path: Path, doc: dict[str, Any]):
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        where = ".".join(str(part) for part in exc.path)
        pytest.fail(f"{path.name}: {doc['kind']}/{doc['metadata']['name']} at {where}: {exc.message}")


def test_strict_validation_catches_a_misspelt_field():
    # The check above can fail: a probe under a wrong name is refused, not ignored.
    doc = yaml.safe_load(yaml.safe_dump(_workload("git")))
    container = pod_spec(doc)["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError, match="readinesProbe"):
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("service", PRODUCT)
def test_every_service_runs_its_own_module_as_the_image_user(service: str):
    workload = _workload(service)
    container = _container(service)
    assert container["image"] == workload_name(service)
    assert container["command"] == ["python", "-m", module_of(service)]
    security = pod_spec(workload)["securityContext"]
    # The uid the image makes (infra/docker/Dockerfile): files on the shared volume have one owner.
    assert (security["runAsNonRoot"], security["runAsUser"], security["fsGroup"]) == (True, 10001, 10001)
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


@pytest.mark.parametrize("service", [s for s in PRODUCT if s != "gateway"])
def test_a_nats_service_is_ready_when_its_own_instance_answers_ping(service: str):
    probe = _container(service)["readinessProbe"]
    assert probe["exec"]["command"] == ["python", "-m", "autarch.runtime.probe", service]


def test_the_gateway_is_ready_by_healthz_which_waits_for_every_service():
    container = _container("gateway")
    env = _environment("gateway")
    port = int(env["AUTARCH_PORT"])
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": port}
    assert env["AUTARCH_HOST"] == "0.0.0.0"
    assert {"containerPort": port, "name": "http"} in container["ports"]
    service = OBJECTS[("Service", "autarch-gateway")]
    assert service["spec"]["selector"] == _workload("gateway")["spec"]["selector"]["matchLabels"]
    assert set(env["AUTARCH_EXPECTED_SERVICES"].split(",")) == set(PRODUCT) - {"gateway"}


@pytest.mark.parametrize("service", PRODUCT)
def test_every_variable_names_a_setting_and_the_settings_load(service: str):
    env = _environment(service)
    unknown = [name for name in env if setting_of(name) is None and name not in SDK_VARIABLES]
    assert not unknown, f"{service}: no such setting: {unknown}"
    settings = load_settings(environ=env).for_service(service)  # raises SettingsError on a bad value
    assert settings.data_dir == DATA_DIR


@pytest.mark.parametrize("service", PRODUCT)
def test_secrets_come_from_the_secret_never_from_the_manifest(service: str):
    container = _container(service)
    for var in container.get("env", []):
        if setting_of(var["name"]) in SECRET_SETTINGS:
            assert "value" not in var, f"{service}: {var['name']} written in the manifest"
            assert var["valueFrom"]["secretKeyRef"]["name"] == SECRET
    for key in CONFIG:
        assert setting_of(key) not in SECRET_SETTINGS, f"the ConfigMap holds the secret setting {key}"


def test_the_token_is_the_secret_file_where_the_gateway_reads_it():
    mount = _mounts("gateway")[f"{DATA_DIR}/token"]
    volume = _volumes("gateway")[mount["name"]]
    assert volume["secret"]["secretName"] == SECRET
    assert volume["secret"]["items"] == [{"key": "token", "path": "token"}]
    assert mount["subPath"] == "token"
    assert mount["readOnly"] is True
    # The gateway runs as 10001 in group 10001: the file must be readable by that group.
    assert volume["secret"]["defaultMode"] & 0o040


def test_the_model_key_and_the_stores_come_from_the_secret():
    def refs(service: str) -> dict[str, tuple[str, str, bool]]:
        found = {}
        for var in _container(service).get("env", []):
            ref = var.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                found[var["name"]] = (ref["name"], ref["key"], ref.get("optional", False))
        return found

    # Without a key the runner still starts (the scripted model needs none); the stores cannot do without.
    assert refs("agent_runner")["AUTARCH_ANTHROPIC_API_KEY"] == (SECRET, "anthropic-api-key", True)
    assert refs("tools")["AUTARCH_ANTHROPIC_API_KEY"] == (SECRET, "anthropic-api-key", True)  # to redact it
    for service in ("orchestrator", "agent_runner"):
        assert refs(service)["AUTARCH_POSTGRES_URL"] == (SECRET, "postgres-url", False)
    postgres = pod_spec(OBJECTS[("StatefulSet", "autarch-postgres")])["containers"][0]
    password = next(v for v in postgres["env"] if v["name"] == "POSTGRES_PASSWORD")
    assert password["valueFrom"]["secretKeyRef"] == {"name": SECRET, "key": "postgres-password"}


def test_repositories_and_worktrees_are_one_shared_volume_at_the_same_paths_everywhere():
    claim = OBJECTS[("PersistentVolumeClaim", WORK_CLAIM)]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]  # pods on several machines
    seen: dict[str, set[str]] = {}
    for service in TOUCHES_REPOSITORIES:
        volumes = _volumes(service)
        for path, mount in _mounts(service).items():
            if volumes[mount["name"]].get("persistentVolumeClaim", {}).get("claimName") == WORK_CLAIM:
                seen.setdefault(mount["subPath"], set()).add(path)
        assert "repos" in {m.get("subPath") for m in _mounts(service).values()}, f"{service} sees no repository"
    assert seen["repos"] == {"/srv/autarch/repos"}
    # The git service makes worktrees under <data dir>/worktrees; every other reader must find them there.
    assert seen["worktrees"] == {f"{DATA_DIR}/worktrees"}
    for service in set(TOUCHES_REPOSITORIES) - {"gateway"}:
        assert _mounts(service)[f"{DATA_DIR}/worktrees"]["subPath"] == "worktrees", service
    # Every git instance shares the records and the per-repository flocks.
    assert _mounts("git")[f"{DATA_DIR}/git"]["subPath"] == "git"
    # A repository inside the data dir is refused at the gateway's door.
    assert not "/srv/autarch/repos".startswith(DATA_DIR + "/")


@pytest.mark.parametrize("service", PRODUCT)
def test_the_shared_directories_are_made_before_they_are_mounted(service: str):
    spec = pod_spec(_workload(service))
    sub_paths = {m["subPath"] for m in _mounts(service).values() if m["name"] == "work"}
    if not sub_paths:
        assert "initContainers" not in spec
        return
    (init,) = spec["initContainers"]
    (mount,) = init["volumeMounts"]
    assert mount["name"] == "work" and "subPath" not in mount
    made = {Path(arg).relative_to(mount["mountPath"]).as_posix() for arg in init["command"][2:]}
    assert init["command"][:2] == ["mkdir", "-p"]
    assert sub_paths <= made


@pytest.mark.parametrize("service", PRODUCT)
def test_a_service_with_a_volume_of_its_own_runs_once_and_is_replaced_not_doubled(service: str):
    workload = _workload(service)
    own = [v for v in _volumes(service).values()
           if v.get("persistentVolumeClaim", {}).get("claimName", WORK_CLAIM) != WORK_CLAIM]
    if own:
        claim = OBJECTS[("PersistentVolumeClaim", own[0]["persistentVolumeClaim"]["claimName"])]
        assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    if own or workload["spec"]["replicas"] == 1:
        # A rolling update would start the new pod beside the old one: two owners, or a volume held twice.
        assert workload["spec"]["replicas"] == 1
        assert workload["spec"]["strategy"] == {"type": "Recreate"}


@pytest.mark.parametrize("service", sorted(hot_standby_services()))
def test_a_stateful_service_runs_a_leader_and_a_hot_standby_named_by_their_pods(service: str):
    workload = _workload(service)
    assert workload["spec"]["replicas"] >= 2
    (instance,) = [v for v in _container(service)["env"] if v["name"] == "AUTARCH_INSTANCE"]
    # Unique per pod, and the same after a container restart: the restarted leader takes its lease back at once.
    assert instance["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # Whatever state it keeps in files is on the shared volume, where the standby finds it on another machine.
    for path, mount in _mounts(service).items():
        if path.startswith(DATA_DIR + "/") and mount["name"] != "tmp":
            assert mount["name"] == "work", f"{service}: {path} is not on the shared volume"
    assert all(v.get("persistentVolumeClaim", {}).get("claimName", WORK_CLAIM) == WORK_CLAIM
               for v in _volumes(service).values())


@pytest.mark.parametrize("service", ["indexer", "notifier"])
def test_the_index_and_the_outbox_live_on_the_shared_volume(service: str):
    assert _mounts(service)[f"{DATA_DIR}/{service}"]["subPath"] == service


def test_nats_is_a_three_node_jetstream_cluster_every_service_can_reach():
    nats = OBJECTS[("StatefulSet", "autarch-nats")]
    replicas = nats["spec"]["replicas"]
    headless = nats["spec"]["serviceName"]
    nodes = [f"autarch-nats-{i}.{headless}" for i in range(replicas)]
    conf = OBJECTS[("ConfigMap", "autarch-nats")]["data"]["nats.conf"]
    assert [f"nats-route://{node}:6222" in conf for node in nodes] == [True] * replicas
    assert "sync_interval: always" in conf
    assert CONFIG["AUTARCH_NATS_URL"].split(",") == [f"nats://{node}:4222" for node in nodes]
    assert int(CONFIG["AUTARCH_STREAM_REPLICAS"]) == replicas
    # Peers find each other by name before any of them is ready.
    assert OBJECTS[("Service", headless)]["spec"]["publishNotReadyAddresses"] is True
    budget = OBJECTS[("PodDisruptionBudget", "autarch-nats")]["spec"]
    assert budget["minAvailable"] == replicas // 2 + 1


def test_the_nats_config_is_valid_for_nats_server(tmp_path: Path):
    conf = tmp_path / "nats.conf"
    conf.write_text(OBJECTS[("ConfigMap", "autarch-nats")]["data"]["nats.conf"])
    result = subprocess.run([find_nats_server(), "-t", "-c", str(conf)], capture_output=True, text=True,
                            timeout=30, env={**os.environ, "POD_NAME": "autarch-nats-0"})
    assert result.returncode == 0, result.stderr


def test_every_workload_is_in_the_product_or_its_infrastructure():
    workloads = {doc["metadata"]["name"] for _, doc in DOCS if doc["kind"] in WORKLOAD_KINDS}
    expected = {workload_name(s) for s in PRODUCT} | {"autarch-nats", "autarch-postgres", "autarch-clone-example"}
    assert workloads == expected


def test_the_clone_job_clones_into_the_directory_every_service_reads():
    job = OBJECTS[("Job", "autarch-clone-example")]
    (container,) = pod_spec(job)["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "work"]
    volumes = {v["name"]: v for v in pod_spec(job)["volumes"]}
    assert volumes["work"]["persistentVolumeClaim"]["claimName"] == WORK_CLAIM
    script = container["command"][-1]
    # The job sees the volume's root; its repos directory is what the services mount at /srv/autarch/repos.
    assert f'target="{mount["mountPath"]}/repos/$REPO_NAME"' in script
    assert pod_spec(job)["securityContext"]["runAsUser"] == 10001
    # The shell script parses (sh -n), as a typo would otherwise surface only on the cluster.
    result = subprocess.run(["sh", "-n", "-c", script], capture_output=True, text=True, timeout=10)
    assert result.returncode == 0, result.stderr


def test_kustomize_sets_every_autarch_image_and_names_only_existing_files():
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    for resource in kustomization["resources"]:
        assert (K8S / resource).is_file(), resource
    images = set()
    for _, doc in DOCS:
        if doc["kind"] in WORKLOAD_KINDS and doc["metadata"]["name"] != "autarch-clone-example":
            spec = pod_spec(doc)
            images |= {c["image"] for c in spec["containers"] + spec.get("initContainers", [])}
    assert {entry["name"] for entry in kustomization["images"]} == {i for i in images if i.startswith("autarch-")}
