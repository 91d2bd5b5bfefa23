"""The Dockerfile, read as a file (no container runtime runs here): it stays a thin wrapper over what
tests/integration/test_plain_install.py proves. It builds the wheel from the sources that test builds it
from, installs it with the runtime lock into a virtual environment without pip, and the image it runs
is that environment on the same base: non-root, no compiler, installer or build backend, a HEALTHCHECK
with the command the plain-install test runs, STOPSIGNAL SIGTERM, and the knowledge base's documents
where the setting it sets points. docker-compose.yml gives a replica the time its drain needs."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from agent_service.settings import AgentServiceSettings
from conversation_service.settings import ConversationSettings
from shared.workers import STOP_MARGIN_S
from tests.support.install import SOURCES

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "Dockerfile"
BUILD_TOOLS = re.compile(r"\b(gcc|g\+\+|cc|make|build-essential|python3-dev|libpq-dev|apt-get|apk|pip install|uv )\b")


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for word, args in self.instructions if word == keyword]


def stages() -> list[Stage]:
    """The Dockerfile's stages, each with its instructions (continued lines joined, comments dropped)."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    args: dict[str, str] = {}
    found: list[Stage] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "ARG" and not found:
            name, _, default = rest.partition("=")
            args[name] = default
        elif keyword == "FROM":
            words = rest.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m[1]], words[0])
            found.append(Stage(base, words[2] if len(words) == 3 and words[1].upper() == "AS" else None))
        else:
            found[-1].instructions.append((keyword, rest))
    return found


def test_two_stages_on_one_base_and_the_image_is_the_last() -> None:
    build, image = stages()
    assert build.name == "build" and image.name is None
    assert build.base == image.base and re.fullmatch(r"python:3\.11-slim(-\w+)?", image.base), image.base


def test_the_wheel_is_built_from_what_the_plain_install_test_builds_it_from() -> None:
    build, _ = stages()
    copied = {name for args in build.all("COPY") for name in shlex.split(args)[:-1]}
    assert set(SOURCES) <= copied, set(SOURCES) - copied
    assert any(run.startswith("pip wheel --no-deps") for run in build.all("RUN"))


def test_the_environment_is_the_runtime_lock_and_the_wheel_with_hashes_checked() -> None:
    build, _ = stages()
    (install,) = [run for run in build.all("RUN") if "venv" in run]
    steps = [step.strip() for step in install.split("&&")]
    assert steps[0] == "python -m venv --without-pip /opt/venv"
    assert "install --require-hashes --no-deps -r /src/requirements/runtime.txt" in steps[1]
    assert "install --no-deps /dist/*.whl" in steps[2]
    assert steps[3].endswith("check")
    assert all(step.startswith("pip --python /opt/venv/bin/python") for step in steps[1:])


def test_the_image_has_no_build_tools_and_runs_as_a_user() -> None:
    _, image = stages()
    for run in image.all("RUN"):
        assert not BUILD_TOOLS.search(run), run
    (uninstall,) = [run for run in image.all("RUN") if "uninstall" in run]
    assert {"pip", "setuptools", "wheel"} <= set(uninstall.split())
    assert image.all("COPY")[0] == "--from=build /opt/venv /opt/venv"
    assert all("--from=" not in args for args in image.all("COPY")[1:]), "only the environment comes from the build"
    (user,) = image.all("USER")
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) >= 10000, "a numeric uid: Kubernetes' runAsNonRoot can check it"


def test_healthcheck_stopsignal_and_command_are_the_services() -> None:
    _, image = stages()
    (healthcheck,) = image.all("HEALTHCHECK")
    assert healthcheck.endswith('CMD ["python", "-m", "shared.healthcheck"]')
    assert (ROOT / "shared" / "healthcheck.py").is_file()
    assert image.all("STOPSIGNAL") == ["SIGTERM"]
    (command,) = image.all("CMD")
    assert command.startswith('["python", "-m", "conversation_service"')
    assert "PATH=/opt/venv/bin:$PATH" in " ".join(image.all("ENV"))


def test_the_knowledge_base_ships_where_its_setting_points() -> None:
    _, image = stages()
    env = " ".join(image.all("ENV"))
    where = re.search(r"AGENT_SERVICE_KNOWLEDGE_DIR=(\S+)", env)[1]
    assert "knowledge_dir" in AgentServiceSettings.model_fields
    targets = [shlex.split(args)[-1] for args in image.all("COPY")]
    assert f"{where}/README.md" in targets and f"{where}/docs/" in targets


def test_compose_gives_a_replica_the_time_its_drain_takes() -> None:
    """SIGTERM's drain: the grace period, then a --workers parent's margin before it kills a worker."""
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    drains = {"agent_service": AgentServiceSettings().shutdown_grace_s,
              "conversation_service": ConversationSettings().shutdown_grace_s}
    replicas = 0
    for service in services.values():
        command = " ".join(service.get("command", []))
        for module, grace_s in drains.items():
            if command.startswith(f"python -m {module} --host"):
                replicas += 1
                assert service["stop_signal"] == "SIGTERM"
                period = service["stop_grace_period"]
                assert period.endswith("s") and float(period[:-1]) > grace_s + STOP_MARGIN_S, period
    assert replicas == 4
