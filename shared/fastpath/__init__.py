"""The fast path: every scheduling and latency trick of both services, and nothing else.

Domain code reads as if none of this existed: it emits, publishes, writes and iterates. What makes
a token reach a screen quickly lives here, one module per trick, each kept only because a
benchmark showed it pays (figures in docs/benchmarks.md and docs/benchmarks-history.md):

| module | the trick | used by |
|---|---|---|
| ``eager`` | ``start_eagerly``/``run_now``: a coroutine runs in the caller's step until it first waits (3.12 eager tasks; a faithful 3.11 stand-in) | ``handoff`` |
| ``handoff`` | ``Handoff``: one consumer run inline while it is idle; a bounded queue only while it is suspended | the Agent Service's live SSE readers; the ConversationService's agent event reader and WebSocket clients |
| ``coalesce`` | ``coalesce(stream, STREAM_COALESCE_MS, DELTA_TYPES)``: a model's deltas that arrive within the budget go on as one (the first at once; anything else, the end or an error flush them first), read by one task per stream so the budget holds while the model is silent | the run engine's model stream (one ANSWER_CHUNK, one seq, one write, one SSE message); the direct reply's model stream (one frame, one fan-out message, one WebSocket write) |
| ``fair_share`` | ``fair_share(stream)``: a producer working through a burst lets the loop go round every millisecond, after the item in hand is out | the run engine's model stream; the direct reply's model stream; the agent event reader |
| ``sqlite_gate`` | SQLite writers wait their turn on the event loop instead of in SQLite's polling busy handler | ``shared.db.create_engine`` (SQLite only) |
| ``direct_body`` | a streamed response's body messages go to the outermost middleware's ``send``, past the wrappers that act on the start message only (off when any middleware does not declare ``START_ONLY = True`` on its class) | the Agent Service's SSE response |
| ``prevalidated`` | a pydantic model built from values already of its fields' types, without a second validation | the Agent Service's live event envelopes |
| ``aiohttp_transport`` | ``AiohttpTransport``: httpx's API on aiohttp's pool and C parser (a token per chunk costs a third of the CPU of httpx's own transport) | the OpenAI-compatible provider's client; the ConversationService's Agent Service client |
| ``process`` | ``tune_process``: shorter GIL turns for database driver threads, the start-up heap frozen out of GC | each service's ``__main__`` |
| ``deferred`` | ``DeferredWrite``: a write a reply needs, started once the reply's first frame is out; every later write of the reply waits for it | the ConversationService's record of an agent turn's start (its message row, the session's correlation) |

The services' own overlaps of set-up with the model's time to first token (the Agent Service's early
model start, the ConversationService's claim read ahead) are business decisions about what may be
read or started early, and live with the code they speed up, each in one object that owns its states.
"""
