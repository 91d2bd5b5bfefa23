"""The monitoring config (Prometheus scrape config and alert rules, Grafana provisioning and dashboard)
checked for structure, and against the metrics both services really export.

The live part starts both apps on loopback, sends a direct message, an /agent message and an ASK_USER
question with its answer, scrapes both /metrics, and requires every metric named in an alert or a
dashboard query to be among the series the services expose, with the label names it filters or
groups on. A panel that queries a metric nobody exports fails here.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import websockets
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conversation_service.support import auth, connect
from tests.integration.delegation.stack import agent_service, chat_service, recv_until
from tests.support.databases import fresh_database
from tests.unit.deploy.promql import Parsed, PromQLError, parse, parse_grafana_query

ROOT = Path(__file__).resolve().parents[3]
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
GRAFANA_DIR = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA_DIR / "dashboards" / "taskforce-bridge.json"
OPERATIONS_DOC = ROOT / "docs" / "operations.md"

CHAT_JOB = "conversation-service"
AGENT_JOB = "agent-service"
# Series Prometheus makes itself for every target; the services cannot export them.
SYNTHETIC = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
# Labels Prometheus attaches to every scraped series (scrape config), plus the histogram bucket label.
TARGET_LABELS = {"job", "instance", "service", "le"}
SEVERITIES = {"critical", "warning", "info"}
DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")
# Label values a query matches that one exercise cannot produce (failures, expiry). Each must still be
# a value the code writes; the names are kept here so that a typo anywhere else fails the test.
UNSEEN_VALUES = {
    ("conversation_agent_turns_total", "outcome"): {"failed", "interrupted", "agent_error"},
    ("conversation_direct_replies_total", "outcome"): {"error"},
    ("conversation_ask_user_total", "outcome"): {"expired"},
}


# -- loading ----------------------------------------------------------------------------------------

def _yaml(path: Path):
    return yaml.safe_load(path.read_text())


def _rules() -> list[dict]:
    return [rule for group in _yaml(PROMETHEUS_DIR / "alerts.yml")["groups"] for rule in group["rules"]]


def _dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def _panels(panels: list[dict]) -> Iterator[dict]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def _dashboard_queries(dashboard: dict) -> list[tuple[str, str]]:
    """(where, query) for every panel target and every query-type template variable."""
    out = []
    for panel in _panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            out.append((f"panel {panel['title']!r} target {target.get('refId')}", target["expr"]))
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]
            out.append((f"variable {variable['name']}", query["query"] if isinstance(query, dict) else query))
    return out


def _slug(heading: str) -> str:
    """The anchor a Markdown renderer gives a heading (lower case, punctuation dropped, spaces to -)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _doc_anchors() -> set[str]:
    return {_slug(m[1]) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", OPERATIONS_DOC.read_text(), re.MULTILINE)}


# -- the PromQL scanner itself -----------------------------------------------------------------------

def test_scanner_reads_selectors_matchers_and_grouping():
    parsed = parse(
        'histogram_quantile(0.95, sum by (job, le) (rate(http_request_duration_seconds_bucket'
        '{route!~"/metrics|/health", job="x"}[$__rate_interval]))) > 5 '
        'and on (job) up offset 10m or vector(0) unless absent(foo_total{a=~"b|c"})'
    )
    assert parsed.metrics == {"http_request_duration_seconds_bucket", "up", "foo_total"}
    assert parsed.grouping_labels == {"job", "le"}
    by_name = {s.metric: s.matchers for s in parsed.selectors}
    assert by_name["http_request_duration_seconds_bucket"] == [
        ("route", "!~", "/metrics|/health"), ("job", "=", "x"),
    ]
    assert by_name["foo_total"] == [("a", "=~", "b|c")]
    # Strings (label_replace arguments, Grafana variables) never read as metric names.
    assert parse('label_replace(x{i=~"$chat"}, "path", "agent", "", "")').metrics == {"x"}


@pytest.mark.parametrize("bad", [
    "rate(foo[5m]", "foo)", "sum(rat(foo[5m]))", '{__name__="foo"}', "sum by foo (bar)",
])
def test_scanner_refuses_what_it_cannot_read(bad):
    with pytest.raises(PromQLError):
        parse(bad)


def test_scanner_reads_grafana_label_values():
    parsed = parse_grafana_query('label_values(up{job="agent-service"}, instance)')
    assert parsed.metrics == {"up"} and parsed.grouping_labels == {"instance"}


# -- Prometheus config -------------------------------------------------------------------------------

def _compose() -> dict:
    return _yaml(ROOT / "docker-compose.yml")


def _scrape_jobs() -> dict[str, list[str]]:
    config = _yaml(PROMETHEUS_DIR / "prometheus.yml")
    return {
        job["job_name"]: [t for static in job["static_configs"] for t in static["targets"]]
        for job in config["scrape_configs"]
    }


def test_prometheus_scrapes_every_replica_named_in_compose():
    compose = _compose()
    jobs = _scrape_jobs()
    assert sorted(jobs[CHAT_JOB]) == ["chat-1:8000", "chat-2:8000"]
    assert sorted(jobs[AGENT_JOB]) == ["agent-1:8001", "agent-2:8001"]
    for target in jobs[CHAT_JOB] + jobs[AGENT_JOB]:
        host, port = target.split(":")
        assert host in compose["services"], host
        command = " ".join(compose["services"][host]["command"])
        assert f"--port {port}" in command, (target, command)
    config = _yaml(PROMETHEUS_DIR / "prometheus.yml")
    for job in config["scrape_configs"]:
        assert job.get("metrics_path", "/metrics") == "/metrics"


def test_prometheus_config_is_mounted_and_loads_the_rules():
    prometheus = _compose()["services"]["prometheus"]
    assert "./deploy/prometheus:/etc/prometheus:ro" in prometheus["volumes"]
    config = _yaml(PROMETHEUS_DIR / "prometheus.yml")
    assert config["rule_files"], "no rule files"
    for rule_file in config["rule_files"]:
        # Relative paths are resolved against the config file's folder, which compose mounts whole.
        assert (PROMETHEUS_DIR / rule_file).is_file(), rule_file
    for key in ("scrape_interval", "evaluation_interval"):
        assert DURATION.match(config["global"][key]), key


def test_every_alert_is_complete_and_has_a_runbook_section():
    rules = _rules()
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names)), "duplicate alert names"
    anchors = _doc_anchors()
    for rule in rules:
        where = rule["alert"]
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations", "keep_firing_for"}, where
        assert isinstance(rule["expr"], str) and rule["expr"].strip(), where
        parse(rule["expr"])  # readable PromQL with balanced brackets and known functions
        assert DURATION.match(str(rule["for"])), where
        assert rule["labels"]["severity"] in SEVERITIES, where
        annotations = rule["annotations"]
        assert annotations["summary"].strip() and annotations["description"].strip(), where
        url = annotations["runbook_url"]
        assert url.startswith("docs/operations.md#"), where
        assert url.split("#", 1)[1] in anchors, f"{where}: no section {url} in docs/operations.md"


def test_the_spec_alerts_exist_with_their_thresholds():
    rules = {r["alert"]: r for r in _rules()}
    unavailable = rules["AgentServiceUnavailable"]
    assert unavailable["for"] == "1m" and f'up{{job="{AGENT_JOB}"}}' in unavailable["expr"]
    assert unavailable["labels"]["severity"] == "critical"
    for name in ("HighHttpErrorRate", "HighReplyErrorRate"):
        assert "> 0.05" in rules[name]["expr"], name
    assert "> 5" in rules["HighHttpLatency"]["expr"] and "0.95" in rules["HighHttpLatency"]["expr"]
    assert ">= 5" in rules["HighFirstChunkLatency"]["expr"]
    assert "conversation_agent_breaker_state" in rules["AgentCircuitBreakerOpen"]["expr"]
    assert "conversation_agent_dead_letters_total" in rules["DeadLettersIncreasing"]["expr"]
    assert 'outcome="expired"' in rules["AskUserExpiryRateHigh"]["expr"]
    assert "conversation_ws_slow_consumers_total" in rules["WebSocketSlowConsumers"]["expr"]
    assert "conversation_history_near_limit_total" in rules["HistoryTokenBudgetNearCapacity"]["expr"]


def test_alert_job_matchers_name_scrape_jobs():
    jobs = set(_scrape_jobs())
    for rule in _rules():
        for selector in parse(rule["expr"]).selectors:
            for label, op, value in selector.matchers:
                if label == "job" and op == "=":
                    assert value in jobs, (rule["alert"], value)


# -- Grafana -------------------------------------------------------------------------------------------

def test_grafana_provisioning_points_at_prometheus_and_the_dashboards_folder():
    grafana = _compose()["services"]["grafana"]
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in grafana["volumes"])
    assert mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
    dashboards_mount = mounts["./deploy/grafana/dashboards"]

    datasources = _yaml(GRAFANA_DIR / "provisioning" / "datasources" / "prometheus.yml")["datasources"]
    assert len(datasources) == 1
    source = datasources[0]
    assert source["type"] == "prometheus" and source["uid"] == "prometheus"
    assert source["url"] == "http://prometheus:9090" and "prometheus" in _compose()["services"]
    # Exemplars open their trace in the Jaeger data source, which reads the compose file's Jaeger.
    assert source["jsonData"]["exemplarTraceIdDestinations"] == [{"name": "trace_id", "datasourceUid": "jaeger"}]
    (jaeger,) = _yaml(GRAFANA_DIR / "provisioning" / "datasources" / "jaeger.yml")["datasources"]
    assert jaeger["uid"] == "jaeger" and jaeger["url"] == "http://jaeger:16686" and "jaeger" in _compose()["services"]
    assert "--enable-feature=exemplar-storage" in _compose()["services"]["prometheus"]["command"]

    providers = _yaml(GRAFANA_DIR / "provisioning" / "dashboards" / "dashboards.yml")["providers"]
    assert [p["options"]["path"] for p in providers] == [dashboards_mount]


def test_every_panel_has_a_datasource_and_queries():
    dashboard = _dashboard()
    source_uid = _yaml(GRAFANA_DIR / "provisioning" / "datasources" / "prometheus.yml")["datasources"][0]["uid"]
    ids = [p["id"] for p in _panels(dashboard["panels"])]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    panels = [p for p in _panels(dashboard["panels"]) if p["type"] != "row"]
    assert len(panels) >= 30
    for panel in panels:
        where = panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": source_uid}, where
        assert panel["targets"], where
        pos = panel["gridPos"]
        assert 0 < pos["w"] and pos["x"] + pos["w"] <= 24 and pos["h"] > 0, where
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), where
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == source_uid, where
            assert target["expr"].strip(), where
            for name in re.findall(r"\$\{?(\w+)", target["expr"]):
                assert name.startswith("__") or name in variables, f"{where}: ${name} is not a variable"


def test_dashboard_has_the_rows_of_the_conversation_to_agent_flow():
    rows = [p["title"] for p in _dashboard()["panels"] if p["type"] == "row"]
    for required in ("Traffic", "Latency", "Errors", "Circuit breaker", "ASK_USER", "Agent Service", "Realtime"):
        assert required in rows, required
    titles = " | ".join(p["title"] for p in _panels(_dashboard()["panels"]))
    for required in ("delegation rate", "p50/p95/p99", "by outcome", "Dead letters", "Breaker state",
                     "LLM time to first token", "Tool latency", "WebSocket connections", "Slow consumers",
                     "Frame flush"):
        assert required in titles, required


def test_every_query_parses():
    for where, query in _dashboard_queries(_dashboard()):
        try:
            parse_grafana_query(query)
        except PromQLError as exc:
            raise AssertionError(f"{where}: {exc}") from None


# -- against the real /metrics ---------------------------------------------------------------------------

@dataclass
class Exposed:
    """What one scrape of both services shows: series names, and label names/values per series."""

    series: set[str]
    labels: dict[str, set[str]]
    values: dict[tuple[str, str], set[str]]
    families: dict[str, str]  # series name -> family type


_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("_sum", "_count", "_created", ""),
    "gauge": ("",),
    "info": ("_info",),
    "unknown": ("",),
}


def _exposed(texts: list[str]) -> Exposed:
    series: set[str] = set()
    labels: dict[str, set[str]] = {}
    values: dict[tuple[str, str], set[str]] = {}
    families: dict[str, str] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            # A family without samples (a labelled metric never incremented) still names its series.
            for suffix in _SUFFIXES.get(family.type, ("",)):
                series.add(family.name + suffix)
                families[family.name + suffix] = family.type
            if family.samples:
                for suffix in _SUFFIXES.get(family.type, ("",)):
                    labels.setdefault(family.name + suffix, set())  # an unlabelled metric: known, empty
            for sample in family.samples:
                series.add(sample.name)
                for label, value in sample.labels.items():
                    # Histogram buckets carry `le`; their _sum/_count share the family's other labels.
                    for suffix in _SUFFIXES.get(family.type, ("",)):
                        labels.setdefault(family.name + suffix, set()).add(label)
                        values.setdefault((family.name + suffix, label), set()).add(value)
    return Exposed(series, labels, values, families)


def _check_against(parsed: Parsed, exposed: Exposed, where: str) -> list[str]:
    problems = []
    for selector in parsed.selectors:
        name = selector.metric
        if name in SYNTHETIC:
            continue
        if name not in exposed.series:
            problems.append(f"{where}: metric {name} is not exported by either service")
            continue
        known = exposed.labels.get(name)
        if known is None:
            continue  # no samples yet (a labelled metric nobody has incremented): labels unknown
        for label, op, value in selector.matchers:
            if label in TARGET_LABELS:
                continue
            if label not in known:
                problems.append(f"{where}: {name} has no label {label!r} (it has {sorted(known)})")
                continue
            if op in ("=", "=~") and re.fullmatch(r"[\w|]+", value):
                seen = exposed.values.get((name, label), set())
                unseen = set(value.split("|")) - seen - UNSEEN_VALUES.get((name, label), set())
                if unseen:
                    problems.append(f"{where}: {name}{{{label}}} never has {sorted(unseen)} (seen {sorted(seen)})")
    all_labels = set().union(*(exposed.labels.get(s.metric, set()) for s in parsed.selectors))
    for label in parsed.grouping_labels - TARGET_LABELS - {"path"}:
        if not any(s.metric in exposed.labels for s in parsed.selectors):
            continue
        if label not in all_labels:
            problems.append(f"{where}: grouping label {label!r} is on none of its metrics")
    return problems


@pytest.fixture(scope="module")
async def scraped(tmp_path_factory) -> Exposed:
    tmp_path = tmp_path_factory.mktemp("monitoring")
    # Metric names do not depend on the database, so SQLite alone is enough here.
    async with (
        fresh_database("sqlite", tmp_path, "agent") as agent_db,
        fresh_database("sqlite", tmp_path, "chat") as chat_db,
        agent_service(agent_db, tmp_path) as agent_url,
        chat_service(chat_db, agent_url) as stack,
    ):
        cid = await stack.conversation()
        ws = await connect(stack.chat_url, cid, "alice")
        r = await stack.send(cid, "hello there")
        assert r.json()["route"]["target"] == "direct_llm"
        await recv_until(ws, lambda f: f["type"] == "message.completed")
        r = await stack.send(cid, "/agent what is 17*23")
        assert r.json()["route"]["target"] == "agent"
        await recv_until(ws, lambda f: f["type"] == "agent.complete")
        await ws.close()

        asking = await stack.conversation()
        ws = await connect(stack.chat_url, asking, "alice")
        await stack.send(asking, "/agent plan a trip")
        question = (await recv_until(ws, lambda f: f["type"] == "agent.ask_user"))[-1]["data"]
        r = await stack.answer(asking, question["question_id"], "Lisbon for 3 days")
        assert r.status_code == 202, r.text
        await recv_until(ws, lambda f: f["type"] == "agent.complete")
        await ws.close()

        # A WebSocket refused (someone else's conversation) gives the labelled refusal counter a series.
        intruder = await connect(stack.chat_url, cid, "bob")
        with pytest.raises(websockets.ConnectionClosed):
            await asyncio.wait_for(intruder.recv(), 10)

        assert (await stack.http.get(f"{stack.chat_url}/health")).status_code == 200
        r = await stack.http.get(f"{stack.chat_url}/conversations/{cid}/messages", headers=auth("alice"))
        assert r.status_code == 200, r.text
        chat_metrics = (await stack.http.get(f"{stack.chat_url}/metrics")).text
        agent_metrics = (await stack.http.get(f"{agent_url}/metrics")).text
    return _exposed([chat_metrics, agent_metrics])


async def test_the_exercise_produced_the_flow_metrics(scraped: Exposed):
    assert scraped.values[("conversation_messages_posted_total", "target")] >= {"agent", "direct_llm"}
    assert scraped.values[("conversation_ask_user_total", "outcome")] >= {"asked", "answered"}
    assert scraped.values[("agent_events_total", "type")] >= {"THOUGHT", "TOOL_START", "ASK_USER", "COMPLETE"}
    # HTTP metrics use route templates, on both services.
    routes = scraped.values[("http_requests_total", "route")]
    assert "/conversations/{conversation_id}/messages" in routes
    assert "/api/v1/agent/execute" in routes
    assert not any(re.search(r"/[0-9a-f]{8}-", route) for route in routes), routes
    assert scraped.values[("conversation_ws_rejected_total", "reason")] == {"not_owner"}


async def test_alerts_query_only_exported_metrics(scraped: Exposed):
    problems = []
    for rule in _rules():
        problems += _check_against(parse(rule["expr"]), scraped, f"alert {rule['alert']}")
    assert not problems, "\n".join(problems)


async def test_dashboard_queries_only_exported_metrics(scraped: Exposed):
    problems = []
    for where, query in _dashboard_queries(_dashboard()):
        problems += _check_against(parse_grafana_query(query), scraped, where)
    assert not problems, "\n".join(problems)


async def test_a_query_of_a_metric_nobody_exports_is_caught(scraped: Exposed):
    dashboard = _dashboard()
    panel = next(p for p in _panels(dashboard["panels"]) if p["type"] == "timeseries")
    panel["targets"][0]["expr"] = 'sum(rate(conversation_messages_sent_total{target="agent"}[5m]))'
    problems = [p for where, q in _dashboard_queries(dashboard) for p in _check_against(parse_grafana_query(q),
                                                                                        scraped, where)]
    assert problems == [
        f"panel {panel['title']!r} target A: metric conversation_messages_sent_total is not exported by either service"
    ]
    # A wrong suffix, label or label value is caught too.
    for expr, expected in [
        ("rate(conversation_routing_decisions[5m])", "metric conversation_routing_decisions is not exported"),
        ('rate(conversation_agent_turns_total{result="complete"}[5m])', "has no label 'result'"),
        ('rate(conversation_messages_posted_total{target="AGENT"}[5m])', "never has ['AGENT']"),
        ("sum by (tool) (rate(conversation_agent_turns_total[5m]))", "grouping label 'tool'"),
        ('agent_active_runs{code="x"}', "agent_active_runs has no label 'code'"),
    ]:
        found = _check_against(parse(expr), scraped, "probe")
        assert len(found) == 1 and expected in found[0], (expr, found)
