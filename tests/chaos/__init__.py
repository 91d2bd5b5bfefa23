"""Chaos tests: real service processes on loopback, killed with SIGKILL at chosen or seeded points.

``test_agent_sigkill.py``: the Agent Service is killed in the middle of 10 agent turns of a chat and
restarted; every turn completes, and "a seq is forever" and "a resume always reaches an end" hold on
SQLite and PostgreSQL. ``test_durable_runs.py``: one multi-step run killed at every kind of point (model
streaming, inside a tool, between steps, its terminal write) completes with its answer once for every
client and its non-idempotent tool call made once. Bounded: well under a minute per backend each.
"""
