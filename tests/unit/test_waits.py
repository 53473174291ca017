"""The tests' waits: bounded, returning what satisfied them, failing with what they waited for."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tests.support import wait_until, wait_until_async


def test_wait_until_returns_the_value_once_another_thread_provides_it():
    box: list[str] = []
    threading.Timer(0.05, box.append, ("ready",)).start()
    assert wait_until(lambda: box, 10, what="the box") == ["ready"]


def test_wait_until_fails_naming_what_it_waited_for():
    with pytest.raises(AssertionError, match=r"after 0.05 s waiting for the moon"):
        wait_until(lambda: False, 0.05, what="the moon")
    with pytest.raises(AssertionError, match="waiting for late text"):
        wait_until(lambda: 0, 0.05, what=lambda: "late text")


async def test_wait_until_async_lets_the_loop_run_while_it_waits():
    done = asyncio.Event()
    asyncio.get_running_loop().call_later(0.05, done.set)
    assert await wait_until_async(done.is_set, 10) is True
    with pytest.raises(AssertionError, match="the condition"):
        await wait_until_async(lambda: None, 0.05)
