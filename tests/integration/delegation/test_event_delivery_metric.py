"""``conversation_agent_event_delivery_seconds``: every agent-made frame sent live on a WebSocket is
measured from its SSE event's arrival to the send, and frames of the direct path are not."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conversation_service.support import connect
from tests.integration.delegation.stack import agent_service, chat_service, recv_until


def _count(text: str, name: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"{name}_count":
                return sample.value
    raise AssertionError(f"{name} is not exposed")


def _sample(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    raise AssertionError(f"{name} {labels} is not exposed")


async def test_delivery_observed_per_agent_frame_sent(database_factory, tmp_path):
    agent_db, chat_db = await database_factory("agent"), await database_factory("chat")
    async with agent_service(agent_db, tmp_path) as agent_url, chat_service(chat_db, agent_url) as stack:
        cid = await stack.conversation()
        # Connected before the message: every frame of the turn goes out live, none by replay.
        ws = await connect(stack.chat_url, cid, "alice")
        r = await stack.send(cid, "hello there")
        assert r.json()["route"]["target"] == "direct_llm"
        await recv_until(ws, lambda f: f["type"] == "message.completed")
        after_direct = _count((await stack.http.get(f"{stack.chat_url}/metrics")).text,
                              "conversation_agent_event_delivery_seconds")
        r = await stack.send(cid, "/agent what is 17*23")
        assert r.json()["route"]["target"] == "agent"
        frames = await recv_until(ws, lambda f: f["type"] == "agent.complete")
        await ws.close()
        metrics = (await stack.http.get(f"{stack.chat_url}/metrics")).text
        agent_metrics = (await stack.http.get(f"{agent_url}/metrics")).text
    assert after_direct == 0
    from_agent_events = [
        f for f in frames
        if f["type"] in ("message.delta", "agent.thinking", "agent.tool_start", "agent.tool_end")
    ]
    deltas = [f for f in from_agent_events if f["type"] == "message.delta"]
    assert deltas
    # One observation per agent event: a delta frame may carry several answer chunks that queued
    # together, so the count is the frames that are not deltas plus the ANSWER_CHUNKs the Agent
    # Service sent (each the model's deltas that arrived together: as many as it counted).
    answer = "".join(f["data"]["text"] for f in deltas)
    assert answer == "17*23 = 391."
    chunks = _sample(agent_metrics, "agent_events_total", type="ANSWER_CHUNK")
    assert 1 <= chunks <= 3  # the built-in model streams "17*23 ", "= ", "391."
    assert _count(metrics, "conversation_agent_event_delivery_seconds") == len(from_agent_events) - len(deltas) + chunks
