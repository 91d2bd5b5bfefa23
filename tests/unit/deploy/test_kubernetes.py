"""deploy/kubernetes/, rendered as `kubectl apply -k` would (tests/support/kustomize.py) and read against the
code: every manifest validates against the Kubernetes API's schemas offline (kubernetes-validate), every
environment variable is a setting the service reads, every probe asks a route the service has on the port it
listens on, the grace period covers the SIGTERM drain, the pods run as the image's non-root user on a
read-only root filesystem with no capabilities, the migrations run as Jobs the replicas wait for, and the
selectors of Services, autoscalers, budgets, network policies and the ServiceMonitor find what they mean."""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from kubernetes_validate.utils import SchemaNotFoundError, latest_version

from agent_service.app import create_app as create_agent_app
from agent_service.settings import AgentServiceSettings
from conversation_service.app import create_app as create_chat_app
from conversation_service.settings import ConversationSettings
from shared.workers import STOP_MARGIN_S
from tests.support.kustomize import containers, pod_spec, render
from tests.support.settings_env import is_setting

ROOT = Path(__file__).resolve().parents[3]
KUBERNETES = ROOT / "deploy" / "kubernetes"
# The oldest Kubernetes the manifests are for (a preStop `sleep` action is on by default from 1.30), and the newest.
VERSIONS = ("1.30.0", latest_version())
SERVICES = {"agent_service": AgentServiceSettings, "conversation_service": ConversationSettings}
GRACE_VARIABLE = {"agent_service": "AGENT_SERVICE_SHUTDOWN_GRACE_S", "conversation_service": "SHUTDOWN_GRACE_S"}
IMAGE_UID = int(re.search(r"^USER (\d+)", (ROOT / "Dockerfile").read_text(), re.MULTILINE)[1])


def _with_component(tmp_path: Path) -> Path:
    """The production overlay with the runs-in-flight autoscaling component, as an operator would add it."""
    (tmp_path / "kustomization.yaml").write_text(
        f"resources: [{KUBERNETES / 'overlays' / 'production'}]\ncomponents: [{KUBERNETES / 'components' / 'runs-in-flight'}]\n")
    return tmp_path


@pytest.fixture(params=["base", "overlays/production", "with-component"])
def rendered(request: pytest.FixtureRequest, tmp_path: Path) -> list[dict[str, Any]]:
    folder = _with_component(tmp_path) if request.param == "with-component" else KUBERNETES / request.param
    return render(folder)


def _of(resources: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in resources if r["kind"] == kind]


def _one(resources: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [r for r in resources if r["kind"] == kind and r["metadata"]["name"] == name]
    return found


def _module(container: dict[str, Any]) -> str:
    command = container["command"]
    assert command[:2] == ["python", "-m"] and command[2] in SERVICES, command
    return command[2]


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if not all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        assert expression["operator"] == "In", expression
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


@functools.cache
def _routes() -> dict[str, set[str]]:
    """The GET routes each service documents (the probes are in its OpenAPI document)."""
    apps = {"agent_service": create_agent_app(AgentServiceSettings()),
            "conversation_service": create_chat_app(ConversationSettings())}
    return {module: {path for path, ops in app.openapi()["paths"].items() if "get" in ops} for module, app in apps.items()}


def test_every_manifest_validates_against_the_kubernetes_schemas(rendered: list[dict[str, Any]]) -> None:
    custom = []
    for resource in rendered:
        for version in VERSIONS:
            try:
                kubernetes_validate.validate(resource, version, strict=True)
            except SchemaNotFoundError:
                custom.append(resource["kind"])
                break
    # The Prometheus Operator's resource has no schema here; test_the_service_monitor_scrapes_both_services reads it.
    assert custom == ["ServiceMonitor"]
    kinds = {r["kind"] for r in rendered}
    assert kinds == {"ConfigMap", "Job", "Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget",
                     "NetworkPolicy", "ServiceMonitor"}


def test_the_validation_can_fail() -> None:
    deployment = copy.deepcopy(_one(render(KUBERNETES / "base"), "Deployment", "taskforce-agent"))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {"httpGet": {"path": "/ready"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSIONS[0], strict=True)


def test_every_variable_the_manifests_set_is_a_setting_of_the_service(rendered: list[dict[str, Any]]) -> None:
    config_maps = {r["metadata"]["name"]: r["data"] for r in _of(rendered, "ConfigMap")}
    checked = 0
    for container in containers(rendered, init=True):
        module = _module(container)
        names = [entry["name"] for entry in container.get("env", [])]
        for source in container.get("envFrom", []):
            names.extend(config_maps[source["configMapRef"]["name"]])
        wrong = [name for name in names if not is_setting(module, name)]
        assert wrong == [], f"{container['name']} ({module}) sets what the service does not read: {wrong}"
        checked += len(names)
    assert checked > 20
    assert not is_setting("agent_service", "AGENT_SERVICE_DATABASE") and not is_setting("conversation_service", "AGENT_SERVICE_API_KEYS")


def test_every_probe_asks_a_route_of_the_service_on_its_port(rendered: list[dict[str, Any]]) -> None:
    routes = _routes()
    for deployment in _of(rendered, "Deployment"):
        (container,) = pod_spec(deployment)["containers"]
        module = _module(container)
        port = int(container["command"][container["command"].index("--port") + 1])
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        probes = {kind: container[kind]["httpGet"] for kind in ("startupProbe", "readinessProbe", "livenessProbe")}
        assert probes["readinessProbe"]["path"] == "/ready" and probes["livenessProbe"]["path"] == "/health"
        for probe in probes.values():
            assert probe["path"] in routes[module], (module, probe)
            assert ports[probe["port"]] == port, (module, probe)


def test_the_grace_period_covers_the_drain(rendered: list[dict[str, Any]]) -> None:
    """SIGKILL comes terminationGracePeriodSeconds after the pod is told to stop: the preStop pause, the
    service's SHUTDOWN_GRACE_S for its streams and replies, then the margin it gets after them."""
    config_maps = {r["metadata"]["name"]: r["data"] for r in _of(rendered, "ConfigMap")}
    for deployment in _of(rendered, "Deployment"):
        spec = pod_spec(deployment)
        (container,) = spec["containers"]
        module = _module(container)
        config = {k: v for source in container["envFrom"] for k, v in config_maps[source["configMapRef"]["name"]].items()}
        grace_s = float(config.get(GRACE_VARIABLE[module], SERVICES[module]().shutdown_grace_s))
        pause_s = container["lifecycle"]["preStop"]["sleep"]["seconds"]
        assert pause_s >= 3  # long enough for the endpoints to drop the pod before it stops listening
        assert spec["terminationGracePeriodSeconds"] >= pause_s + grace_s + STOP_MARGIN_S, module


def test_pods_run_as_the_image_user_read_only_with_no_capabilities(rendered: list[dict[str, Any]]) -> None:
    for resource in rendered:
        spec = pod_spec(resource)
        if spec is None:
            continue
        assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == IMAGE_UID
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        assert spec["automountServiceAccountToken"] is False
        assert all("hostPath" not in volume for volume in spec.get("volumes", []))
        for container in spec["containers"] + spec.get("initContainers", []):
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True and context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            requests, limits = container["resources"]["requests"], container["resources"]["limits"]
            assert {"cpu", "memory"} <= set(requests) and "memory" in limits and "cpu" not in limits


def test_the_migrations_run_as_jobs_the_replicas_wait_for(rendered: list[dict[str, Any]]) -> None:
    jobs = {_module(pod_spec(job)["containers"][0]): pod_spec(job) for job in _of(rendered, "Job")}
    assert set(jobs) == set(SERVICES)
    for module, spec in jobs.items():
        (container,) = spec["containers"]
        assert container["command"] == ["python", "-m", module, "migrate"] and spec["restartPolicy"] == "Never"
    for deployment in _of(rendered, "Deployment"):
        spec = pod_spec(deployment)
        (container,), (wait,) = spec["containers"], spec["initContainers"]
        module = _module(container)
        assert wait["command"][:5] == ["python", "-m", module, "migrate", "--wait"]
        assert wait["image"] == container["image"] == jobs[module]["containers"][0]["image"]
        assert wait["env"] == jobs[module]["containers"][0]["env"]  # the same database
        assert wait["env"][0] in container["env"]


def test_selectors_find_what_they_mean(rendered: list[dict[str, Any]]) -> None:
    deployments = {d["metadata"]["name"]: d for d in _of(rendered, "Deployment")}
    labels = {name: d["spec"]["template"]["metadata"]["labels"] for name, d in deployments.items()}
    for name, deployment in deployments.items():
        assert _matches(deployment["spec"]["selector"], labels[name])
        service = _one(rendered, "Service", name)
        assert [n for n, pod in labels.items() if _matches({"matchLabels": service["spec"]["selector"]}, pod)] == [name]
        container_ports = {p["name"] for p in pod_spec(deployment)["containers"][0]["ports"]}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= container_ports
        assert _one(rendered, "HorizontalPodAutoscaler", name)["spec"]["scaleTargetRef"]["name"] == name
        assert _matches(_one(rendered, "PodDisruptionBudget", name)["spec"]["selector"], labels[name])
        policy = _one(rendered, "NetworkPolicy", name)
        assert [n for n, pod in labels.items() if _matches(policy["spec"]["podSelector"], pod)] == [name]


def test_the_agent_takes_traffic_from_the_chat_and_prometheus_only(rendered: list[dict[str, Any]]) -> None:
    chat_pods = _one(rendered, "Deployment", "taskforce-chat")["spec"]["template"]["metadata"]["labels"]
    ingress = _one(rendered, "NetworkPolicy", "taskforce-agent")["spec"]["ingress"]
    sources = [peer for rule in ingress for peer in rule["from"]]
    assert all(rule.get("from") for rule in ingress), "no rule lets everyone in"
    assert [p for p in sources if "podSelector" in p and _matches(p["podSelector"], chat_pods)]
    assert all("podSelector" in p or p["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "monitoring"}
               for p in sources)
    egress = _one(rendered, "NetworkPolicy", "taskforce-chat")["spec"]["egress"]
    assert any(peer.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/name") == "taskforce-agent"
               for rule in egress for peer in rule.get("to", []))


def test_the_service_monitor_scrapes_both_services(rendered: list[dict[str, Any]]) -> None:
    (monitor,) = _of(rendered, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    selected = [s for s in _of(rendered, "Service") if _matches(monitor["spec"]["selector"], s["metadata"]["labels"])]
    assert sorted(s["metadata"]["name"] for s in selected) == ["taskforce-agent", "taskforce-chat"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics" and all(endpoint["port"] in {p["name"] for p in s["spec"]["ports"]} for s in selected)


def test_production_runs_two_of_each_on_external_postgresql_and_redis() -> None:
    rendered = render(KUBERNETES / "overlays" / "production")
    for name in ("taskforce-agent", "taskforce-chat"):
        assert _one(rendered, "Deployment", name)["spec"]["replicas"] == 2
        assert _one(rendered, "HorizontalPodAutoscaler", name)["spec"]["minReplicas"] == 2
        for rule in _one(rendered, "NetworkPolicy", name)["spec"]["egress"]:
            if {p["port"] for p in rule["ports"]} & {5432, 6379}:
                assert rule["to"] and all("ipBlock" in peer for peer in rule["to"]), rule
    assert {r["metadata"]["namespace"] for r in rendered} == {"taskforce"}
    assert {c["image"] for c in containers(rendered, init=True)} == {"registry.example.com/taskforce-bridge:0.1.0"}


def test_the_component_scales_on_the_work_in_flight(tmp_path: Path) -> None:
    rendered = render(_with_component(tmp_path))
    metrics = {r["metadata"]["name"]: [m["pods"]["metric"]["name"] for m in r["spec"]["metrics"] if m["type"] == "Pods"]
               for r in _of(rendered, "HorizontalPodAutoscaler")}
    assert metrics == {"taskforce-agent": ["agent_runs_in_flight"], "taskforce-chat": ["conversation_turns_in_flight"]}
    source = "\n".join(p.read_text() for p in (ROOT / "agent_service").rglob("metrics.py"))
    source += "\n".join(p.read_text() for p in (ROOT / "conversation_service").rglob("metrics.py"))
    assert '"agent_runs_in_flight"' in source and '"conversation_turns_in_flight"' in source
