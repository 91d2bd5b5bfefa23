"""Long-term memory on a real service, SQLite and PostgreSQL: recall across sessions for the same
(organisation, user) only, listing and deleting it, and a failing store degrading, then going DOWN,
while every run still completes."""

from __future__ import annotations

from sqlalchemy import text

REMEMBER = "remember that my favourite colour is green"
ASK = "what is my favourite colour?"
ALICE = {"user_id": "alice", "org_id": "acme"}


async def _ask(agent, user: dict, message: str = ASK):
    result = await agent.execute(message, body={"user_context": user})
    assert result.last.type.value == "COMPLETE", result.last.data
    # The turn is remembered after COMPLETE, in the background: the next question comes once it is.
    await agent.app.state.agent.memory.written()
    return result.last.data["answer"]


async def test_a_new_session_recalls_what_the_same_user_said_and_no_one_else(agent) -> None:
    assert "green" in await _ask(agent, ALICE, REMEMBER)
    assert await _ask(agent, ALICE) == "Your favourite colour is green."
    for other in ({"user_id": "bob", "org_id": "acme"}, {"user_id": "alice", "org_id": "globex"},
                  {"user_id": "alice"}):
        assert "green" not in await _ask(agent, other), other


async def test_memories_are_listed_and_deleted_for_their_owner_only(agent) -> None:
    await _ask(agent, ALICE, REMEMBER)
    await _ask(agent, {"user_id": "bob", "org_id": "acme"}, "remember that my favourite colour is blue")
    listed = await agent.http.get("/api/v1/agent/memory", params={"user_id": "alice", "org_id": "acme"},
                                  headers=agent.headers())
    assert listed.status_code == 200
    [item] = listed.json()["items"]
    assert item["content"].startswith(f"User: {REMEMBER}\nAssistant: ") and item["session_id"]

    as_bob = {"user_id": "bob", "org_id": "acme"}
    refused = await agent.http.delete(f"/api/v1/agent/memory/{item['id']}", params=as_bob, headers=agent.headers())
    assert refused.status_code == 404 and refused.json()["error"] == "memory_not_found"
    deleted = await agent.http.delete(f"/api/v1/agent/memory/{item['id']}", params={"user_id": "alice", "org_id": "acme"},
                                      headers=agent.headers())
    assert deleted.json() == {"deleted": 1}
    assert "green" not in await _ask(agent, ALICE)
    assert await _ask(agent, as_bob) == "Your favourite colour is blue."

    everything = await agent.http.delete("/api/v1/agent/memory", params=as_bob, headers=agent.headers())
    assert everything.status_code == 200 and everything.json()["deleted"] == 2  # the fact and the question's turn
    assert "blue" not in await _ask(agent, as_bob)
    no_key = await agent.http.get("/api/v1/agent/memory", params=as_bob)
    assert no_key.status_code == 401


async def test_a_failing_store_degrades_then_goes_down_and_runs_still_complete(agent_factory, db) -> None:
    async with agent_factory(memory_fail_max=3, memory_reset_timeout_seconds=300) as agent:
        assert (await agent.http.get("/health")).json() == {"status": "ok", "memory": "NORMAL"}
        await _ask(agent, ALICE, REMEMBER)
        async with db.engine.begin() as conn:
            await conn.execute(text("DROP TABLE agent_memories"))

        assert "green" not in await _ask(agent, ALICE), "history only: the memory is unreachable"
        assert (await agent.http.get("/health")).json()["memory"] == "DEGRADED"
        metrics = (await agent.http.get("/metrics")).text
        assert "agent_memory_health 1.0" in metrics
        assert 'agent_memory_failures_total{operation="recall"} 1.0' in metrics

        await _ask(agent, ALICE)  # the third failure in a row (recall, remember, recall) opens the breaker
        assert (await agent.http.get("/health")).json()["memory"] == "DOWN"
        assert "391" in await _ask(agent, ALICE, "what is 17*23"), "DOWN: runs go on with their history only"
        metrics = (await agent.http.get("/metrics")).text
    assert "agent_memory_health 2.0" in metrics
    assert 'agent_memory_failures_total{operation="recall"} 2.0' in metrics, "DOWN: the store is not asked"
