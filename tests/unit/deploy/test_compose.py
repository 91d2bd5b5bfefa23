"""docker-compose.yml and the shipped nginx config, read as files: migrations run once per database in a
one-shot service the replicas wait for (replicas migrating on start raced each other on PostgreSQL),
every long-running service has a healthcheck and a restart policy, no secret has a default, and nginx
keeps the client's X-Request-ID, making one only when it is missing."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
COMPOSE_FILE = ROOT / "docker-compose.yml"
NGINX_CONF = ROOT / "deploy" / "nginx" / "nginx.conf"
ENV_EXAMPLE = ROOT / ".env.example"
SECRET_NAME = re.compile(r"KEY|SECRET|PASSWORD|TOKEN")
INTERPOLATION = re.compile(r"\$\{(\w+)(?:(:?[-?])([^}]*))?\}")
# Which database each service's migrate sub-command upgrades, by the variable that names it.
DATABASES = {"agent_service": "AGENT_SERVICE_DATABASE_URL", "conversation_service": "CONVERSATION_DATABASE_URL"}


def _services() -> dict[str, dict]:
    return yaml.safe_load(COMPOSE_FILE.read_text())["services"]


def _command(service: dict) -> str:
    command = service.get("command", "")
    return " ".join(command) if isinstance(command, list) else command


def _depends_on(service: dict) -> dict[str, dict]:
    """Both spellings: a list of names means each only has to have started."""
    depends = service.get("depends_on") or {}
    return {name: {"condition": "service_started"} for name in depends} if isinstance(depends, list) else depends


def _one_shots(services: dict[str, dict]) -> set[str]:
    """Services others wait to complete (not to be healthy)."""
    return {
        name for service in services.values() for name, dependency in _depends_on(service).items()
        if dependency.get("condition") == "service_completed_successfully"
    }


def test_each_database_is_migrated_once_by_a_one_shot_service_the_replicas_wait_for() -> None:
    services = _services()
    one_shots = _one_shots(services)
    for module, url_variable in DATABASES.items():
        migrators = [name for name, s in services.items() if _command(s).startswith(f"python -m {module} migrate")]
        assert len(migrators) == 1, (module, migrators)
        migrator = migrators[0]
        assert migrator in one_shots
        assert services[migrator]["restart"] == "no"
        assert _depends_on(services[migrator])["postgres"] == {"condition": "service_healthy"}
        replicas = [name for name, s in services.items()
                    if url_variable in (s.get("environment") or {}) and name != migrator]
        assert len(replicas) >= 2, (module, replicas)
        for name in replicas:
            service = services[name]
            assert "migrate" not in _command(service), name
            assert _depends_on(service)[migrator] == {"condition": "service_completed_successfully"}, name
            assert service["environment"][url_variable] == services[migrator]["environment"][url_variable], name
            on_start = {"agent_service": "AGENT_SERVICE_MIGRATE_ON_START"}.get(module, "MIGRATE_ON_START")
            assert service["environment"][on_start] == "false", name


def test_every_long_running_service_has_a_healthcheck_and_a_restart_policy() -> None:
    services = _services()
    one_shots = _one_shots(services)
    for name, service in services.items():
        if name in one_shots:
            continue
        check = service.get("healthcheck")
        assert check and check["test"][0] in ("CMD", "CMD-SHELL"), name
        assert {"interval", "timeout", "retries"} <= set(check), name
        assert service.get("restart") in ("unless-stopped", "always", "on-failure"), name
        # What a service waits for must be healthy, not merely started.
        for dependency, condition in _depends_on(service).items():
            expected = "service_completed_successfully" if dependency in one_shots else "service_healthy"
            assert condition == {"condition": expected}, (name, dependency)


def _secret_references(text: str) -> dict[str, set[tuple[str, str]]]:
    found: dict[str, set[tuple[str, str]]] = {}
    for name, operator, argument in INTERPOLATION.findall(text):
        if SECRET_NAME.search(name):
            found.setdefault(name, set()).add((operator, argument))
    return found


def test_no_secret_has_a_default_and_compose_refuses_to_start_without_one() -> None:
    text = COMPOSE_FILE.read_text()
    assert "change-me" not in text.lower()
    references = _secret_references(text)
    optional = {name for name, uses in references.items() if uses == {(":-", "")}}
    # Empty for the built-in model, and without an identity provider (its client secrets); never a made-up value.
    assert optional == {"LLM_API_KEY", "AUTH_OIDC_CLIENT_SECRET", "AGENT_SERVICE_CLIENT_SECRET"}
    required = set(references) - optional
    assert {"AGENT_SERVICE_API_KEYS", "AGENT_SERVICE_API_KEY", "AUTH_JWT_SECRET", "POSTGRES_PASSWORD"} <= required
    for name in required:
        for operator, message in references[name]:
            assert operator == ":?" and message.strip(), f"${{{name}}} must be ${{{name}:?<what to set>}}"
    # A secret is never written into the file, only referenced.
    for name, service in _services().items():
        for variable, value in (service.get("environment") or {}).items():
            if SECRET_NAME.search(variable):
                assert INTERPOLATION.fullmatch(str(value)), (name, variable)
        for value in (service.get("environment") or {}).values():
            if "postgresql" in str(value):
                assert "${POSTGRES_PASSWORD:?" in value, (name, value)
    # Every required secret is explained where the compose file points newcomers.
    example = ENV_EXAMPLE.read_text()
    for name in required:
        assert re.search(rf"^{name}=\s*$", example, re.MULTILINE), f"{name} is not in .env.example"
    assert ".env.example" in text and ".env.example" in (ROOT / "README.md").read_text()


def test_nginx_passes_the_clients_request_id_through_and_makes_one_only_when_missing() -> None:
    conf = NGINX_CONF.read_text()
    mapping = re.search(r"map \$http_x_request_id \$(\w+) \{([^}]*)\}", conf)
    assert mapping, "no map of $http_x_request_id"
    variable, body = mapping[1], mapping[2]
    entries = dict(line.split(None, 1) for line in body.replace(";", "\n").splitlines() if line.strip())
    assert entries == {"default": "$http_x_request_id", "''": "$request_id"}, entries
    proxied = re.findall(r"proxy_set_header\s+X-Request-ID\s+(\S+);", conf)
    assert len(proxied) == conf.count("proxy_pass") and set(proxied) == {f"${variable}"}, proxied


def test_both_services_send_their_traces_to_the_jaeger_the_operator_can_open() -> None:
    services = _services()
    assert "16686:16686" in services["jaeger"]["ports"]  # the UI
    assert services["jaeger"]["environment"]["COLLECTOR_OTLP_ENABLED"] == "true"  # OTLP over HTTP on 4318
    for name in ("agent-1", "agent-2", "chat-1", "chat-2"):
        # The default, unless the operator's environment points the traces elsewhere.
        assert services[name]["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == (
            "${OTEL_EXPORTER_OTLP_ENDPOINT:-http://jaeger:4318}"), name
