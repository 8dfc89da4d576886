"""Identical requests in flight: the second waits for the first's answer (request collapsing).

A lookup that misses becomes the *leader* of its exact key (the entry id): it is expected
to call the model and store the answer (``update``). An identical lookup arriving
meanwhile is a *follower*: it waits, bounded, for that update and then looks up again,
which now returns the leader's answer as a hit — five identical concurrent calls make one
model call and return one answer. The wait ends early, and the followers call the model
themselves, when the leader's model call fails (``release``; the adapters that own the
model call say so) or when the flight's deadline passes (:data:`DEFAULT_WAIT_S` after
the leader's lookup: a leader that never reports back — LangChain's ``BaseCache`` hears
nothing of a failed call — holds no one longer than that). A lookup by the flight's own
caller (same thread, or same asyncio task) never waits for itself. Different keys never
wait on each other.

Async callers never block the event loop: a lookup run in a worker thread from
:func:`coalesced_in_thread` that meets a flight raises :class:`InFlightWait` out of the
thread instead of waiting there; the coroutine waits for the flight on the event loop and
runs the lookup again (no worker thread is held by a waiting follower, so many identical
requests cannot starve the pool the leader's update needs).
"""

from __future__ import annotations

import asyncio
import threading
import time
from contextvars import ContextVar
from typing import Any, Callable, Optional, TypeVar

T = TypeVar("T")

# How long a follower waits at most for the leader's answer, counted from the end of the
# leader's lookup (its miss): an LLM call of up to this long is collapsed; a leader that never reports back
# costs its followers at most this long.
DEFAULT_WAIT_S = 30.0
_SWEEP_AT = 1024  # flights held before expired ones are swept

# Set by coalesced_in_thread for the worker thread it starts: meeting a flight raises
# InFlightWait instead of blocking the thread; also who the caller is (its asyncio task).
_NO_BLOCK: ContextVar[bool] = ContextVar("mlc_inflight_no_block", default=False)
_CALLER: ContextVar[Optional[tuple[str, int]]] = ContextVar("mlc_inflight_caller", default=None)
# The flight a coroutine already waited for (set between the two runs of coalesced_in_thread):
# the second run follows it without waiting again.
_AFTER_WAIT: ContextVar[Optional[tuple["Flight", bool]]] = ContextVar("mlc_inflight_after_wait", default=None)


def waited_for(key: Optional[str]) -> Optional[tuple["Flight", bool]]:
    """The flight for ``key`` this coroutine already waited for, and its outcome."""
    got = _AFTER_WAIT.get()
    return got if got is not None and key is not None and got[0].key == key else None


def _caller() -> tuple[str, int]:
    """Who is looking up: the asyncio task that started the worker thread, else the running
    task, else the thread."""
    c = _CALLER.get()
    if c is not None:
        return c
    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
    return ("task", id(task)) if task is not None else ("thread", threading.get_ident())


class Flight:
    """One key's leader at work: followers wait on it until it settles or its deadline."""

    __slots__ = ("key", "owner", "deadline", "ok", "_event", "_lock", "_futures")

    def __init__(self, key: str, owner: tuple[str, int], deadline: float) -> None:
        self.key = key
        self.owner = owner
        self.deadline = deadline  # time.monotonic()
        self.ok = False  # True once the leader's answer is stored
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._futures: list[tuple[asyncio.AbstractEventLoop, "asyncio.Future[bool]"]] = []

    @property
    def settled(self) -> bool:
        return self._event.is_set()

    def settle(self, ok: bool) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self.ok = ok
            self._event.set()
            futures, self._futures = self._futures, []
        for loop, fut in futures:
            try:
                loop.call_soon_threadsafe(_resolve, fut, ok)
            except RuntimeError:  # that loop is closed: nobody waits there any more
                pass

    def wait(self) -> bool:
        """Block until settled or the deadline (which the leader's miss moves on); True when
        the leader's answer is stored."""
        while not self._event.is_set():
            left = self.deadline - time.monotonic()
            if left <= 0:
                break
            self._event.wait(left)
        return self.ok

    async def wait_async(self) -> bool:
        """:meth:`wait` for a coroutine: the event loop keeps running meanwhile."""
        loop = asyncio.get_running_loop()
        fut: "asyncio.Future[bool]" = loop.create_future()
        with self._lock:
            if self._event.is_set():
                return self.ok
            self._futures.append((loop, fut))
        while True:
            left = self.deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                return await asyncio.wait_for(asyncio.shield(fut), left)
            except asyncio.TimeoutError:
                continue  # the deadline may have moved on: read it again


def _resolve(fut: "asyncio.Future[bool]", ok: bool) -> None:
    if not fut.done():
        fut.set_result(ok)


class InFlightWait(Exception):
    """Raised out of a worker thread started by :func:`coalesced_in_thread`: an identical
    request is in flight; the coroutine waits for ``flight`` and runs the lookup again."""

    def __init__(self, flight: Flight) -> None:
        super().__init__(f"an identical request ({flight.key[:12]}) is in flight")
        self.flight = flight


class Ticket:
    """One lookup's part in its key's flight: ``leader`` (None without coalescing)."""

    __slots__ = ("flight", "leader", "waited", "answered")

    def __init__(self, flight: Optional[Flight], leader: bool, waited: bool = False, answered: bool = False) -> None:
        self.flight = flight
        self.leader = leader
        self.waited = waited
        self.answered = answered


_NO_TICKET = Ticket(None, False)


class InFlight:
    """The keys of one engine whose leader is calling the model, and their waiting followers."""

    def __init__(self, wait_s: float = DEFAULT_WAIT_S) -> None:
        if wait_s < 0:
            raise ValueError("wait_s must be >= 0 seconds (0: never wait)")
        self.wait_s = float(wait_s)
        self._sweep_at = _SWEEP_AT
        self._lock = threading.Lock()
        self._flights: dict[str, Flight] = {}
        self._stats = {"led": 0, "waited": 0, "answered": 0, "released": 0, "timed_out": 0}

    def __len__(self) -> int:
        with self._lock:
            return len(self._flights)

    def stats(self) -> dict[str, int]:
        """``led``: lookups that missed first; ``waited``: followers; ``answered``: followers
        that then hit; ``released``: flights ended by a failure; ``timed_out``: followers
        whose wait reached the deadline."""
        with self._lock:
            return dict(self._stats)

    def _count(self, name: str) -> None:
        with self._lock:
            self._stats[name] += 1

    def enter(self, key: Optional[str]) -> Ticket:
        """Join ``key``'s flight, or start one. A follower waits here (bounded) — or, in a
        worker thread of :func:`coalesced_in_thread`, raises :class:`InFlightWait`."""
        if key is None or self.wait_s <= 0:
            return _NO_TICKET
        prior = waited_for(key)
        if prior is not None:  # the second run after waiting on the event loop: no second wait
            return self.follow(*prior)
        me = _caller()
        now = time.monotonic()
        with self._lock:
            if len(self._flights) >= self._sweep_at:
                self._sweep(now)
            flight = self._flights.get(key)
            expired = flight if flight is not None and flight.deadline <= now else None
            if flight is not None and flight.owner == me and expired is None:
                return Ticket(flight, leader=True)  # the leader asks again: still the leader
            if flight is None or expired is not None or flight.settled:
                flight = self._flights[key] = Flight(key, me, now + self.wait_s)
                leader = flight
            else:
                leader = None
        if expired is not None:
            expired.settle(False)  # a leader that never reported back: replaced (its followers are gone)
        if leader is not None:
            return Ticket(leader, leader=True)
        self._count("waited")
        if _NO_BLOCK.get():
            raise InFlightWait(flight)
        return self.follow(flight)

    def _sweep(self, now: float) -> None:
        """Forget flights past their deadline (leaders that missed and never stored: lookups
        without updates), so the table stays bounded. Called with the lock held."""
        for key in [k for k, f in self._flights.items() if f.deadline <= now]:
            self._flights.pop(key).settle(False)
        self._sweep_at = max(_SWEEP_AT, 2 * len(self._flights))

    def follow(self, flight: Flight, ok: Optional[bool] = None) -> Ticket:
        """A follower's ticket once ``flight`` settled (``ok``: it was waited for on the
        event loop) or after waiting for it here."""
        answered = flight.wait() if ok is None else ok
        if not answered and not flight.settled:
            self._count("timed_out")
        return Ticket(flight, leader=False, waited=True, answered=answered)

    def done(self, ticket: Ticket, hit: bool) -> None:
        """After the lookup: a leader that hit has nothing to call (its followers look up
        again and hit too); a leader that missed keeps the flight until the update."""
        if ticket.leader and ticket.flight is not None:
            if hit:
                self._settle(ticket.flight, True)
            else:  # the model call starts now: its followers wait up to wait_s from here
                ticket.flight.deadline = time.monotonic() + self.wait_s
                self._count("led")
        elif ticket.answered and hit:
            self._count("answered")

    def failed(self, ticket: Ticket) -> None:
        """The lookup itself raised: followers go on without this leader."""
        if ticket.leader and ticket.flight is not None:
            self._settle(ticket.flight, False)

    def stored(self, key: str) -> None:
        """An answer for ``key`` is stored (visible to lookups): its followers look up again."""
        with self._lock:
            flight = self._flights.get(key)
        if flight is not None:
            self._settle(flight, True)

    def release(self, key: str) -> None:
        """The model call for ``key`` failed: its followers call the model themselves."""
        with self._lock:
            flight = self._flights.get(key)
        if flight is not None:
            self._count("released")
            self._settle(flight, False)

    def run(self, key: Optional[str], lookup: Callable[[Any], Any], request: Any) -> Any:
        """``lookup(request)`` (returning a value with ``.hit``) as ``key``'s leader or follower."""
        ticket = self.enter(key)
        try:
            trace = lookup(request)
        except BaseException:
            self.failed(ticket)
            raise
        self.done(ticket, trace.hit is not None)
        return trace

    def _settle(self, flight: Flight, ok: bool) -> None:
        with self._lock:
            if self._flights.get(flight.key) is flight:
                del self._flights[flight.key]
        flight.settle(ok)


async def coalesced_in_thread(fn: Callable[..., T], *args: Any) -> T:
    """``await asyncio.to_thread(fn, *args)`` for a function that looks up: when an identical
    request is in flight, the wait happens on the event loop (no worker thread held), then
    ``fn`` runs again in a thread and finds the leader's answer."""
    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
    who = _CALLER.set(("task", id(task))) if task is not None else None
    blocking = _NO_BLOCK.set(True)
    try:
        try:
            return await asyncio.to_thread(fn, *args)
        except InFlightWait as w:
            ok = await w.flight.wait_async()
            after = _AFTER_WAIT.set((w.flight, ok))
            try:
                return await asyncio.to_thread(fn, *args)
            finally:
                _AFTER_WAIT.reset(after)
    finally:
        _NO_BLOCK.reset(blocking)
        if who is not None:
            _CALLER.reset(who)
