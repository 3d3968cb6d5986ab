"""``finish``: keeps a streamed answer's upstream connection in its pool once the answer is complete,
by reading the body's end in the background.

Only aiohttp's public client API belongs here (``ClientResponse.connection``, ``content.readany()``,
``close()``): no subclasses of its protocol or reader, no private attributes.
"""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp

# After a stream's last event, how long and how much more its body may take to end
FINISH_SECONDS = 1.0
FINISH_BYTES = 64 * 1024


class Finisher:
    """The body ends still being read for one upstream's streams: its own tasks, so they end with it
    (``close``), not with the process."""

    __slots__ = ("tasks",)

    def __init__(self) -> None:
        self.tasks: dict[asyncio.Task[None], aiohttp.ClientResponse] = {}

    def finish(self, resp: aiohttp.ClientResponse) -> None:
        """Returns the connection of ``resp``, a stream whose answer is complete, to its pool once its
        body has ended. A model server writes the body's end (HTTP's last chunk) after ``[DONE]``, in a
        write of its own: a connection given back before that is closed by aiohttp, unread, and the
        next request opens a new one (real vLLM: 16 connections for 20 streams in a row). The end
        usually follows at once; it is waited for in the background, the client's answer not held for
        it, and a body that does not end soon, or goes on, loses its connection."""
        if resp.connection is None:  # the body's end is in: aiohttp gave the connection back with it
            return
        task = asyncio.get_running_loop().create_task(_finish(resp))
        self.tasks[task] = resp
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.pop(task, None)

    async def close(self) -> None:
        """Stops what is still being read (its responses close, dropping their connections)."""
        pending = list(self.tasks.items())
        for task, _ in pending:
            task.cancel()
        await asyncio.gather(*(task for task, _ in pending), return_exceptions=True)
        for _, resp in pending:  # a task cancelled before it ran never reached its own close
            resp.close()


async def _finish(resp: aiohttp.ClientResponse) -> None:
    try:
        with contextlib.suppress(TimeoutError, aiohttp.ClientError):
            async with asyncio.timeout(FINISH_SECONDS):
                left = FINISH_BYTES
                while left > 0 and (data := await resp.content.readany()):
                    left -= len(data)
    finally:
        resp.close()  # nothing left to close once the end came
