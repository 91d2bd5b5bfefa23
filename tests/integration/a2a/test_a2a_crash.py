"""An A2A subscriber survives a crash of the Agent Service: SIGKILL mid-answer, restart, resume.

The Agent Service is a real process (built-in model, 40 ms per chunk, 1 s leases). A client streams a
task over JSON-RPC, the process is killed while the answer streams and started again on the same port;
the client resumes with ``SubscribeToTask`` and ``Last-Event-ID`` (the resume extension). It gets every
event of the task after the last seq it saw, once: the restarted service continues the run from its
last checkpoint, which replaces the answer artifact by the text that stands (``append`` false) and goes
on to ``COMPLETED``. The artifact the client folds is the task's answer, each passage once, and no seq it
saw before names another event now.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.test_agent_sigkill import AGENT_ENV
from tests.integration.a2a.conftest import API_KEY, A2AClient
from tests.integration.a2a.test_a2a_server import _log
from tests.support.servers import ServiceProcess, free_port

# The chaos test's Agent Service: 40 ms per chunk, 1 s leases, small seq reservations.
ENV = {**AGENT_ENV, "AGENT_SERVICE_API_KEYS": API_KEY, "AGENT_SERVICE_MEMORY_ENABLED": "false"}


def _seq(update: dict) -> int:
    return update[next(iter(update))]["metadata"]["seq"]


@pytest.mark.timeout(90)
async def test_a_subscriber_resumes_after_a_crash_with_every_later_event_once(database_url: str, tmp_path: Path) -> None:
    process = ServiceProcess("agent_service", {**ENV, "AGENT_SERVICE_DATABASE_URL": database_url}, port=free_port())
    await process.start(tmp_path)
    client = A2AClient(process.url)
    try:
        message = {"role": "ROLE_USER", "parts": [{"text": "hello there, who are you?"}], "messageId": "crash"}
        before = await client.stream("SendStreamingMessage", {"message": message}, stop_after=6)
        task_id = before[0][1]["task"]["id"]
        seen = {_seq(update): next(iter(update)) for _, update in before[1:]}
        last = max(seq for seq, _ in before if seq is not None)

        await process.stop(kill=True)
        await process.start(tmp_path)

        after = await client.stream("SubscribeToTask", {"id": task_id}, headers={"Last-Event-ID": str(last)})
        context_id = (await client.get(task_id))["contextId"]
        log = {e.seq: e for e in await _log(process.url, context_id)}
    finally:
        await client.aclose()
        await process.stop()

    updates = [update for _, update in after]
    seqs = [_seq(update) for update in updates]
    assert seqs == sorted(seqs) and min(seqs) > last
    assert sorted(set(seqs)) == [seq for seq in sorted(log) if seq > last]
    final = updates[-1]["statusUpdate"]
    assert final["status"]["state"] == "TASK_STATE_COMPLETED"
    kinds = [next(iter(update)) for update in updates]
    assert "statusUpdate" in kinds and any(not u["artifactUpdate"]["append"] for u in updates if "artifactUpdate" in u)
    # The client's artifact, folded from every update it got before and after the crash, is the answer.
    text = ""
    for _, update in [*before[1:], *after]:
        if "artifactUpdate" in update:
            part = "".join(p.get("text", "") for p in update["artifactUpdate"]["artifact"]["parts"])
            text = text + part if update["artifactUpdate"]["append"] else part
    complete = [e for e in log.values() if e.type.value == "COMPLETE"]
    assert len(complete) == 1 and text == complete[0].data["answer"] != ""
    # A seq is forever: what the client saw before the crash is, where the log has it, the same event.
    for seq, kind in seen.items():
        if seq in log:
            expected = "artifactUpdate" if log[seq].type.value == "ANSWER_CHUNK" else "statusUpdate"
            assert kind == expected
