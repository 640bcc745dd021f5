"""Reading the deployment files the way their tools do, for the tests beside this module.

Kubernetes documents come from ``infra/k8s/*.yaml``; the compose file from ``infra/compose.yaml`` (PyYAML
resolves its anchors and ``<<`` merges as compose does); the Tiltfile is run with the few Tilt built-ins it
calls recorded instead of performed (Starlark is a subset of Python's syntax, and the Tiltfile keeps to it).
"""

from __future__ import annotations

import importlib.util
import re
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import yaml

from autarch.contracts.subjects import SERVICES
from autarch.runtime.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
K8S = INFRA / "k8s"

PRODUCT = (*SERVICES, "gateway")
"""Every process a deployment runs: the NATS services and the gateway."""

SETTING_NAMES = frozenset(f.name for f in msgspec.structs.fields(Settings))

SDK_VARIABLES = frozenset({"ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"})
"""Variables the settings read besides ``AUTARCH_*`` (the anthropic SDK's own names)."""

WORKLOAD_KINDS = ("Deployment", "StatefulSet", "Job")


def workload_name(service: str) -> str:
    """The Kubernetes name (and image) of a service: ``agent_runner`` → ``autarch-agent-runner``."""
    return "autarch-" + service.replace("_", "-")


def module_of(service: str) -> str:
    return "autarch.gateway" if service == "gateway" else f"autarch.services.{service}"


def module_exists(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def k8s_documents() -> list[tuple[Path, dict[str, Any]]]:
    """Every Kubernetes object of ``infra/k8s`` with its file (kustomize's own config excluded)."""
    found: list[tuple[Path, dict[str, Any]]] = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        found.extend((path, doc) for doc in yaml.safe_load_all(path.read_text()) if doc)
    return found


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


def image_requirements(extras: list[str]) -> list[str]:
    """What ``infra/docker/requirements.py`` gives the image for ``extras`` (SystemExit on an unknown one)."""
    spec = importlib.util.spec_from_file_location("image_requirements", INFRA / "docker" / "requirements.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.requirements(ROOT / "pyproject.toml", extras)


def hot_standby_services() -> frozenset[str]:
    """The services that run as one leader and hot standbys when named (their ``__main__`` wraps ``exclusive``)."""
    return frozenset(
        service for service in SERVICES
        if "exclusive(" in (ROOT / "services" / service / "__main__.py").read_text()
    )


def setting_of(variable: str) -> str | None:
    """The setting an environment variable sets, or None when it sets none."""
    if variable.startswith("AUTARCH_") and variable[len("AUTARCH_"):].lower() in SETTING_NAMES:
        return variable[len("AUTARCH_"):].lower()
    return None


# --- the Tiltfile ---------------------------------------------------------------------------------------


class Blob:
    """What Tilt's ``encode_yaml``/``encode_yaml_stream`` return: here, the objects themselves."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = objects


@dataclass
class TiltRun:
    """The calls one evaluation of the Tiltfile made."""

    builds: list[dict[str, Any]] = field(default_factory=list)
    objects: list[dict[str, Any]] = field(default_factory=list)
    resources: list[dict[str, Any]] = field(default_factory=list)


def run_tiltfile(environ: dict[str, str] | None = None) -> TiltRun:
    """Evaluate the Tiltfile with Tilt's built-ins recorded; ``environ`` is what its ``os.getenv`` sees."""
    run = TiltRun()
    environ = environ or {}

    def docker_build(ref: str, context: str, **kwargs: Any) -> None:
        run.builds.append({"ref": ref, "context": context, **kwargs})

    def k8s_yaml(source: Any) -> None:
        if isinstance(source, Blob):
            run.objects.extend(source.objects)
        else:  # a path, as Tilt takes it, relative to the Tiltfile
            for path in [source] if isinstance(source, str) else source:
                run.objects.extend(doc for doc in yaml.safe_load_all((ROOT / path).read_text()) if doc)

    def k8s_resource(workload: str = "", **kwargs: Any) -> None:
        run.resources.append({"workload": workload, **kwargs})

    def read_yaml_stream(path: str) -> list[dict[str, Any]]:
        return [doc for doc in yaml.safe_load_all((ROOT / path).read_text()) if doc]

    namespace = {
        "docker_build": docker_build,
        "k8s_yaml": k8s_yaml,
        "k8s_resource": k8s_resource,
        "read_yaml_stream": read_yaml_stream,
        "encode_yaml": lambda obj: Blob([obj]),
        "encode_yaml_stream": lambda objs: Blob(list(objs)),
        "os": types.SimpleNamespace(getenv=lambda key, default="": environ.get(key, default)),
    }
    source = (ROOT / "Tiltfile").read_text()
    exec(compile(source, str(ROOT / "Tiltfile"), "exec"), namespace)
    return run


_STARLARK_PRELUDE = """
CALLS = []
def _thaw(value):
    if type(value) == "dict":
        return {k: _thaw(v) for k, v in value.items()}
    if type(value) == "list":
        return [_thaw(v) for v in value]
    return value
def docker_build(ref, context, **kwargs):
    CALLS.append(["docker_build", ref, context, kwargs])
def k8s_yaml(source):
    CALLS.append(["k8s_yaml", source])
def k8s_resource(workload = "", **kwargs):
    CALLS.append(["k8s_resource", workload, kwargs])
def read_yaml_stream(path):
    return _thaw(YAML_FILES[path])
def encode_yaml(obj):
    return [obj]
def encode_yaml_stream(objs):
    return objs
def os_getenv(key, default = ""):
    return ENVIRON.get(key, default)
"""
"""Tilt's built-ins as Starlark functions recording their calls (values read in are thawed: Tilt hands out
mutable ones, and the Tiltfile edits them)."""


def run_tiltfile_in_starlark(environ: dict[str, str] | None = None) -> TiltRun:
    """Evaluate the Tiltfile with starlark-go, the interpreter Tilt embeds, in Tilt's dialect (reassigned
    globals and top-level loops allowed); the same recording as :func:`run_tiltfile`."""
    from starlark_go import Starlark, configure_starlark

    configure_starlark(allow_global_reassign=True, allow_recursion=True, allow_set=True)
    source = (ROOT / "Tiltfile").read_text()
    paths = sorted(set(re.findall(r"read_yaml_stream\('([^']+)'\)", source)))
    interpreter = Starlark()
    interpreter.set(
        ENVIRON=environ or {},
        YAML_FILES={p: [doc for doc in yaml.safe_load_all((ROOT / p).read_text()) if doc] for p in paths},
    )
    # `os` is a module in Tilt, which plain Starlark lacks: its one function used here becomes a global.
    interpreter.exec(_STARLARK_PRELUDE + source.replace("os.getenv(", "os_getenv("), filename="Tiltfile")
    run = TiltRun()
    for call in interpreter.eval("CALLS"):
        if call[0] == "docker_build":
            run.builds.append({"ref": call[1], "context": call[2], **call[3]})
        elif call[0] == "k8s_yaml":
            run.objects.extend(call[1])
        else:
            run.resources.append({"workload": call[1], **call[2]})
    return run


def selector_matches(selector: str, obj: dict[str, Any]) -> bool:
    """Tilt's object selector ``name[:kind[:namespace]]`` against one object (default namespace)."""
    parts = selector.lower().split(":")
    full = [obj["metadata"]["name"].lower(), obj["kind"].lower(), obj["metadata"].get("namespace", "default")]
    return parts == full[: len(parts)]
