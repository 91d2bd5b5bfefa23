"""The Agent Service as an A2A 1.0 server (Agent2Agent protocol), on top of its runs and sessions.

- ``card``: the Agent Card at ``/.well-known/agent-card.json``
- ``jsonrpc``, ``router``: the JSON-RPC and HTTP+JSON bindings; ``transport``: what both check
  (API key, ``A2A-Version``) and how they frame SSE; ``errors``: the A2A error vocabulary
- ``service``: the operations (send, get, list, cancel); ``streams``: streaming and subscriptions
- ``projection``: a task folded from the event log (the mapping of events to A2A); ``reader``,
  ``repository``: reading tasks back from the runs' tables; ``inbound``: what a message asks
- ``context``: the A2A message a run serves, for the run's hooks and model

session = ``contextId``, the run a message started = ``taskId``; the task keeps no state of its
own (docs/a2a.md).
"""
