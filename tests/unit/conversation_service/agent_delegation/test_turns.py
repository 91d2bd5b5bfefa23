"""Turn bookkeeping behind the claim read ahead."""

from __future__ import annotations

import gc

from conversation_service.agent_delegation.turns import PreparedTurn, TurnRegistry


def _read_ahead(turns) -> PreparedTurn:
    return PreparedTurn(turns=turns, registered_before=turns.registered, idle=turns.idle, claim=(None, []))  # type: ignore[arg-type]


def test_a_read_holds_when_only_its_own_turn_started_since() -> None:
    turns = TurnRegistry().get("c1")
    read = _read_ahead(turns)
    turns.registered += 1  # its own turn
    assert read.still_valid()


def test_a_read_is_stale_once_another_turn_started_in_between() -> None:
    turns = TurnRegistry().get("c1")
    read = _read_ahead(turns)
    turns.registered += 1  # another message's turn, registered during the read
    turns.registered += 1  # then this one
    assert not read.still_valid()


def test_the_registry_keeps_a_conversation_while_held_and_forgets_it_after() -> None:
    registry = TurnRegistry()
    turns = registry.get("c1")
    turns.registered = 3
    assert registry.get("c1") is turns and registry.get("c2") is not turns
    del turns
    gc.collect()
    assert registry.get("c1").registered == 0  # nobody held it: a fresh record, nothing in flight
