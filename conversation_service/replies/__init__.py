"""How a reply ends: one owner for every path (agent, direct LLM, takeover, fallback, a fault of ours).

- ``endings``: what a reply can end as (``Completed``, ``Stopped``, ``Failed`` with a reason the user
  can act on, ``Interrupted``), and the reasons the service itself gives;
- ``policy``: which failures of the Agent Service fall back to the direct LLM, which end the reply with
  an error and a dead letter, and which are the agent's own answer;
- ``ender``: ``ReplyEnder``, the one writer of a reply's end: its stored row and its end frames,
  durable before the turn counts as done.
"""
