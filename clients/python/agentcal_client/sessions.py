"""`with client.hold(...) as session:` — a hold that stays alive while the agent thinks, and never
lingers or vanishes unnoticed.

The session heartbeats every third of the TTL. An eviction, expiry or release the heartbeat learns is
kept and raised by `commit()`, `check()` or leaving the `with` block (as a note when the block is
already raising). Leaving without committing releases the hold. A hold an approval gates is left to
the approval: no heartbeat, no release.

Why: docs/agents.md, "What the client does for you, and why".
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from types import TracebackType

from agentcal_client import _calls
from agentcal_client._transport import AsyncTransport, SyncTransport
from agentcal_client.errors import AgentCalError, HoldAwaitingApproval, HoldNotLive
from agentcal_client.models import Booking, Hold

# Wait after a failed beat before the next try, as a fraction of the beat interval (at least MIN).
RETRY_FRACTION = 0.25
MIN_RETRY_SECONDS = 0.1

HoldFactory = Callable[[], Hold]


def _ttl_seconds(hold: Hold, requested: int | None) -> float:
    """The hold's TTL: as asked, else as the server set it (its expiry minus its creation, both read on
    the server's clock)."""
    if requested is not None:
        return float(requested)
    if hold.expires_at is None:
        raise ValueError(f"hold {hold.id} has no expiry to keep alive")
    return max(1.0, (hold.expires_at - hold.created_at).total_seconds())


class _SessionState:
    """What the sync and async sessions share: the latest hold, and how the heartbeat's errors count."""

    def __init__(self, ttl_seconds: int | None) -> None:
        self._requested_ttl = ttl_seconds
        self._hold: Hold | None = None
        self._failure: AgentCalError | None = None
        self._reported = False  # the failure was already raised to the agent (not again at exit)
        self._settled = False  # committed, released, or handed to an approval: no release on exit
        self._ttl = 0.0

    @property
    def hold(self) -> Hold:
        """The hold as last seen (after creation, and after each heartbeat)."""
        if self._hold is None:
            raise RuntimeError("the hold is created on entering the `with` block")
        return self._hold

    @property
    def id(self) -> str:
        return self.hold.id

    @property
    def interval(self) -> float:
        return self._ttl / 3

    def _started(self, hold: Hold) -> None:
        self._hold = hold
        self._ttl = _ttl_seconds(hold, self._requested_ttl)

    def check(self) -> None:
        """Raise what the heartbeat found (HoldEvicted, HoldExpired, …), if anything."""
        if self._failure is not None:
            self._reported = True
            raise self._failure

    def _beat_failed(self, error: AgentCalError) -> bool:
        """Record a failed beat; True when the heartbeat should stop."""
        if isinstance(error, HoldAwaitingApproval):
            self._settled = True  # the approval keeps it alive and decides its fate
            return True
        if error.retryable:
            return False  # the network or the server hiccuped: beat again soon
        self._failure = error
        return True

    def _exit_error(self, exc: BaseException | None) -> AgentCalError | None:
        """The error leaving the block must raise (None if none), or attach to `exc`."""
        if self._failure is None or self._reported:
            return None
        if exc is not None:
            exc.add_note(f"agentcal_client: meanwhile hold {self.id} was lost: {self._failure}")
            return None
        return self._failure

    def _release_failed(self, error: AgentCalError) -> None:
        if isinstance(error, HoldAwaitingApproval):
            return  # the approval decides; the server releases it on a no
        if isinstance(error, HoldNotLive) and self._failure is None:
            self._failure = error  # it was lost before the heartbeat noticed: say so all the same
        elif not isinstance(error, HoldNotLive):
            raise error


class HoldSession(_SessionState):
    """A hold kept alive by a background thread; see the module docstring."""

    def __init__(
        self, transport: SyncTransport, create: HoldFactory, *, ttl_seconds: int | None = None
    ) -> None:
        super().__init__(ttl_seconds)
        self._transport = transport
        self._create = create
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> HoldSession:
        self._started(self._create())
        self._start_heartbeat()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop_heartbeat()
        if not self._settled and self._failure is None:
            self._settled = True
            try:
                self._transport.run(_calls.hold_release(self.id, self._token()))
            except AgentCalError as error:
                if exc is None:
                    self._release_failed(error)
        lost = self._exit_error(exc)
        if lost is not None:
            raise lost

    def commit(self, *, fencing_token: int | None = None) -> Booking:
        """Promote the hold to a booking with its fencing token; stops the heartbeat."""
        self._stop_heartbeat()
        self.check()
        try:
            booking = self._transport.run(_calls.hold_commit(self.hold, fencing_token=fencing_token))
        except HoldNotLive as error:
            self._settled = True
            self._failure, self._reported = error, True
            raise
        except AgentCalError:
            self._start_heartbeat()  # the hold may still be live: keep it so while the agent decides
            raise
        self._settled = True
        return booking

    def release(self) -> None:
        """Give the slot back now (leaving the block without committing does this too)."""
        self._stop_heartbeat()
        self.check()
        self._settled = True
        self._transport.run(_calls.hold_release(self.id, self._token()))

    def _token(self) -> str:
        assert self.hold.hold_token is not None  # the creating answer always carries it
        return self.hold.hold_token

    def _start_heartbeat(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._heartbeat, name=f"agentcal-heartbeat-{self.id}", daemon=True
        )
        self._thread.start()

    def _stop_heartbeat(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._thread = None

    def _heartbeat(self) -> None:
        interval = self.interval
        next_beat = time.monotonic() + interval
        while not self._stop.wait(max(0.0, next_beat - time.monotonic())):
            sent_at = time.monotonic()
            try:
                hold = self._transport.run(
                    _calls.hold_extend(self.id, self._token(), ttl_seconds=self._requested_ttl),
                    timeout=min(interval, self._transport.settings.timeout),
                    max_retries=0,  # this loop retries, on its own schedule
                )
            except AgentCalError as error:
                if self._beat_failed(error):
                    return
                next_beat = time.monotonic() + max(MIN_RETRY_SECONDS, interval * RETRY_FRACTION)
                continue
            # One assignment, so the agent's thread sees the old hold or the new, never a mix.
            self._hold = _with_token(hold, self._token())
            next_beat = sent_at + interval


class AsyncHoldSession(_SessionState):
    """The asyncio twin of HoldSession: the heartbeat is a task on the running loop."""

    def __init__(
        self,
        transport: AsyncTransport,
        create: Callable[[], Awaitable[Hold]],
        *,
        ttl_seconds: int | None = None,
    ) -> None:
        super().__init__(ttl_seconds)
        self._transport = transport
        self._create = create
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> AsyncHoldSession:
        self._started(await self._create())
        self._start_heartbeat()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._stop_heartbeat()
        if not self._settled and self._failure is None:
            self._settled = True
            try:
                await self._transport.run(_calls.hold_release(self.id, self._token()))
            except AgentCalError as error:
                if exc is None:
                    self._release_failed(error)
        lost = self._exit_error(exc)
        if lost is not None:
            raise lost

    async def commit(self, *, fencing_token: int | None = None) -> Booking:
        """Promote the hold to a booking with its fencing token; stops the heartbeat."""
        await self._stop_heartbeat()
        self.check()
        try:
            booking = await self._transport.run(_calls.hold_commit(self.hold, fencing_token=fencing_token))
        except HoldNotLive as error:
            self._settled = True
            self._failure, self._reported = error, True
            raise
        except AgentCalError:
            self._start_heartbeat()
            raise
        self._settled = True
        return booking

    async def release(self) -> None:
        """Give the slot back now (leaving the block without committing does this too)."""
        await self._stop_heartbeat()
        self.check()
        self._settled = True
        await self._transport.run(_calls.hold_release(self.id, self._token()))

    def _token(self) -> str:
        assert self.hold.hold_token is not None
        return self.hold.hold_token

    def _start_heartbeat(self) -> None:
        self._stop.clear()
        self._task = asyncio.get_running_loop().create_task(self._heartbeat())

    async def _stop_heartbeat(self) -> None:
        self._stop.set()
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            await task

    async def _heartbeat(self) -> None:
        interval = self.interval
        next_beat = time.monotonic() + interval
        while True:
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=max(0.0, next_beat - time.monotonic()))
                return  # stopped
            except TimeoutError:
                pass
            sent_at = time.monotonic()
            try:
                hold = await self._transport.run(
                    _calls.hold_extend(self.id, self._token(), ttl_seconds=self._requested_ttl),
                    timeout=min(interval, self._transport.settings.timeout),
                    max_retries=0,
                )
            except AgentCalError as error:
                if self._beat_failed(error):
                    return
                next_beat = time.monotonic() + max(MIN_RETRY_SECONDS, interval * RETRY_FRACTION)
                continue
            self._hold = _with_token(hold, self._token())
            next_beat = sent_at + interval


def _with_token(hold: Hold, token: str) -> Hold:
    """The hold as the heartbeat's answer describes it, with the token kept (only creation reveals it)."""
    return hold if hold.hold_token else replace(hold, hold_token=token)
