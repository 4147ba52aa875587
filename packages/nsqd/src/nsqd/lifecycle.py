r"""A message's life in a channel: its states, what moves it, and the verdict on a message
taken for delivery. The one place that says what happens to a message; ``Channel`` acts.

    publish ---------> WAITING ---- take: DELIVER ------> IN_FLIGHT ---- FIN -----> DONE
                        ^  ^  ^ \                          |  |  |  \
                        |  |  |  +- take: DEFER -> DEFERRED |  |  |   +- TOUCH (stays)
                        |  |  |                      |  ^  |  |  +- REQ with a delay -> DEFERRED
                        |  |  +------------ DUE -----+  |  |  +- REQ, TIMEOUT, GONE -> WAITING
                        |  +--- RESPAWN (from DEAD)     |  +- TIMEOUT, no try left -> DEAD
                        |                               |
      take: EXPIRE -> EXPIRED (dropped) or DEAD      take: DEAD (tries used up) -> DEAD
      DELETE (lmstfy), EMPTY, REWIND past it, GIVE_UP (a puller's dead letter): see the table

A message is WAITING in the log (or requeued), DEFERRED until a due time (a DPUB, a REQ with a
delay, a delayed job), IN_FLIGHT to one consumer until FIN, REQ or its deadline. DONE,
EXPIRED and DEAD are ends: the channel's cursor acknowledges the message's offset (a dead
letter once it is stored in the channel's dead-letter queue).
"""

from __future__ import annotations

import enum

from .message import QueuedMessage


class State(enum.Enum):
    WAITING = "waiting"
    DEFERRED = "deferred"
    IN_FLIGHT = "in flight"
    DONE = "done"
    EXPIRED = "expired"
    DEAD = "dead"


class Event(enum.Enum):
    DELIVER = "deliver"  # a verdict: hand it to a consumer
    DEFER = "defer"  # a verdict: not due yet
    EXPIRE = "expire"  # a verdict: past its expiry
    EXHAUST = "exhaust"  # a verdict: delivered as often as it may be
    FIN = "fin"
    REQ = "req"
    REQ_DELAYED = "req with a delay"
    TOUCH = "touch"
    TIMEOUT = "timeout"
    TIMEOUT_EXHAUSTED = "timeout, no try left"
    GONE = "consumer gone"
    GIVE_UP = "consumer gave up"  # an HTTP puller's /message/deadletter
    DUE = "due"
    DELETE = "delete"  # lmstfy's DELETE of a job, wherever it is
    EMPTY = "empty"  # /channel/empty, /channel/rewind past it
    RESPAWN = "respawn"


#: (state, event) -> the state after. Anything not here cannot happen.
TRANSITIONS: dict[tuple[State, Event], State] = {
    (State.WAITING, Event.DELIVER): State.IN_FLIGHT,
    (State.WAITING, Event.DEFER): State.DEFERRED,
    (State.WAITING, Event.EXPIRE): State.EXPIRED,
    (State.WAITING, Event.EXHAUST): State.DEAD,
    (State.WAITING, Event.DELETE): State.DONE,
    (State.WAITING, Event.EMPTY): State.DONE,
    (State.DEFERRED, Event.DUE): State.WAITING,
    (State.DEFERRED, Event.DELETE): State.DONE,
    (State.DEFERRED, Event.EMPTY): State.DONE,
    (State.IN_FLIGHT, Event.FIN): State.DONE,
    (State.IN_FLIGHT, Event.REQ): State.WAITING,
    (State.IN_FLIGHT, Event.REQ_DELAYED): State.DEFERRED,
    (State.IN_FLIGHT, Event.TOUCH): State.IN_FLIGHT,
    (State.IN_FLIGHT, Event.TIMEOUT): State.WAITING,
    (State.IN_FLIGHT, Event.TIMEOUT_EXHAUSTED): State.DEAD,
    (State.IN_FLIGHT, Event.GONE): State.WAITING,
    (State.IN_FLIGHT, Event.GIVE_UP): State.DEAD,
    (State.IN_FLIGHT, Event.DELETE): State.DONE,
    (State.IN_FLIGHT, Event.EMPTY): State.DONE,
    (State.DEAD, Event.RESPAWN): State.WAITING,
    (State.DEAD, Event.DELETE): State.DONE,
}


def after(state: State, event: Event) -> State:
    """The state ``event`` moves a message in ``state`` to.

    Raises:
        ValueError: the event cannot happen in that state.
    """
    try:
        return TRANSITIONS[state, event]
    except KeyError:
        raise ValueError(f"{event.value} cannot happen to a message {state.value}") from None


def most_attempts(msg: QueuedMessage, limit: int) -> int:
    """How many deliveries ``msg`` may have (0: no limit): a job's own tries, else the
    channel's limit."""
    return msg.tries if msg.is_job else limit  # type: ignore[attr-defined]


def verdict(msg: QueuedMessage, wall_ns: int, limit: int) -> Event:
    """What becomes of ``msg``, taken from WAITING to be delivered at ``wall_ns``: DELIVER,
    DEFER (not due), EXPIRE (past its expiry) or EXHAUST (delivered as often as it may be:
    a job's tries, else the channel's attempt ``limit``; 0: none). Expiry first: a message
    past its TTL is never delivered, not even as a dead letter's last try."""
    if msg.expires and msg.expires <= wall_ns:
        return Event.EXPIRE
    if msg.due > wall_ns:
        return Event.DEFER
    most = most_attempts(msg, limit)
    if most and msg.attempts >= most:
        return Event.EXHAUST
    return Event.DELIVER


def timeout_event(msg: QueuedMessage, limit: int) -> Event:
    """A message whose deadline passed: back to WAITING, or DEAD with no delivery left."""
    most = most_attempts(msg, limit)
    return Event.TIMEOUT_EXHAUSTED if most and msg.attempts >= most else Event.TIMEOUT
