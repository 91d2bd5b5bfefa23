from __future__ import annotations

import asyncio

from shared.keyed_lock import KeyedLock


async def test_one_key_is_held_by_one_caller_at_a_time_and_other_keys_go_on() -> None:
    locks = KeyedLock()
    order: list[str] = []
    release = asyncio.Event()

    async def hold(key: str, name: str) -> None:
        async with locks(key):
            order.append(f"{name} in")
            if name == "first":
                await release.wait()
            order.append(f"{name} out")

    first = asyncio.create_task(hold("a", "first"))
    second = asyncio.create_task(hold("a", "second"))
    other = asyncio.create_task(hold("b", "other"))
    await other
    assert order == ["first in", "other in", "other out"]
    assert len(locks) == 1  # "a", held and waited for; "b" is released and forgotten
    release.set()
    await asyncio.gather(first, second)
    assert order[3:] == ["first out", "second in", "second out"]


async def test_a_key_nobody_holds_or_waits_for_is_forgotten_also_after_an_error() -> None:
    locks = KeyedLock()
    async with locks("a"):
        assert len(locks) == 1
    assert len(locks) == 0
    try:
        async with locks("b"):
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert len(locks) == 0


async def test_a_cancelled_waiter_is_forgotten() -> None:
    locks = KeyedLock()
    release = asyncio.Event()

    async def holder() -> None:
        async with locks("a"):
            await release.wait()

    async def waiter() -> None:
        async with locks("a"):
            raise AssertionError("a cancelled waiter must not get the lock")

    held = asyncio.create_task(holder())
    await asyncio.sleep(0)
    waiting = asyncio.create_task(waiter())
    await asyncio.sleep(0)
    waiting.cancel()
    release.set()
    await held
    assert waiting.cancelled()
    assert len(locks) == 0
