"""The frame log (``conversation_frames``, what a replay reads): a group commit's frames are stored
whole, whatever one of them holds."""

from __future__ import annotations

import httpx

from conversation_service.realtime.frames import FrameType, MessageDelta
from conversation_service.realtime.repository import FrameRepository
from shared.transactions import transaction
from tests.integration.conversation_service.support import make_settings, new_conversation, running


async def test_a_nul_in_one_frame_does_not_cost_the_batch_its_other_frames(database_url: str) -> None:
    async with running(make_settings(database_url)) as (base, app), httpx.AsyncClient() as client:
        first, second = [(await new_conversation(client, base, "alice"))["id"] for _ in range(2)]
        publisher = app.state.realtime.publisher
        # Two conversations' frames, published together: one group commit, one statement on PostgreSQL.
        await publisher.emit(first, MessageDelta("m-1", "a tool said \x00 here"))
        await publisher.emit(second, MessageDelta("m-2", "plain"))
        await app.state.realtime.writer.flush()

        async with transaction(app.state.storage.sessionmaker) as session:
            stored = {cid: [f.data["text"] for f in await FrameRepository(session).list_after(cid, 0, limit=10)
                            if f.type == FrameType.MESSAGE_DELTA]
                      for cid in (first, second)}
    # PostgreSQL's jsonb cannot hold a NUL: the stored frame has U+FFFD in its place; SQLite keeps it.
    nul = "\ufffd" if database_url.startswith("postgresql") else "\x00"
    assert stored == {first: [f"a tool said {nul} here"], second: ["plain"]}
