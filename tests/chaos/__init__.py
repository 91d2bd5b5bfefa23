"""Chaos tests: real service processes on loopback, killed with SIGKILL at random (seeded) points.

``test_agent_sigkill.py``: the Agent Service is killed in the middle of 10 agent turns of a chat and
restarted; the invariants "a seq is forever" and "a resume always reaches an end" must hold on
SQLite and PostgreSQL. Bounded: about 30 s per backend, each test capped at 150 s.
"""
