r"""A message's life in a channel: its states, what moves it, and the verdict on a message
taken for delivery. The one place that says what may happen to a message: the channel's
``MessageStates`` (``channel_state``) applies ``after`` to every change it makes, and an event
the table does not allow in a state raises ``IllegalTransition`` (a bug, as h11's state
machine raises on a protocol event out of turn).

    publish ---------> WAITING ---- take: DELIVER ------> IN_FLIGHT ---- FIN -----> DONE
                        ^  ^  ^ \                          |  |  |  \
                        |  |  |  +- take: DEFER -> DEFERRED |  |  |   +- TOUCH (stays)
                        |  |  |                      |  ^  |  |  +- REQ with a delay -> DEFERRED
                        |  |  +------------ DUE -----+  |  |  +- REQ, TIMEOUT, GONE -> WAITING
                        |  +--- RESPAWN (from DEAD)     |  +- TIMEOUT, no try left -> DEAD
                        |                               |
      take: EXPIRE -> EXPIRED (dropped), or EXPIRE_KEPT -> DEAD (``dead_letter_expired``)
      take: EXHAUST (tries used up) -> DEAD;   take: SAMPLED_OUT (a client's sample rate) -> DONE
      (and EXPIRE instead of TIMEOUT or DUE when the expiry came first)
      DELETE (lmstfy), EMPTY, REWIND, GIVE_UP (a puller's dead letter): see the table

A message is WAITING in the log (or requeued, or in the channel's own queue), DEFERRED until
a due time (a DPUB, a REQ with a delay, a delayed job), IN_FLIGHT to one consumer until FIN,
REQ or its deadline. DONE and EXPIRED are ends: the channel's cursor acknowledges the
message's offset. DEAD is a dead letter: the original is acknowledged once the dead letter is
stored; RESPAWN brings it back to WAITING (through the own queue), DELETE or EMPTY ends it.

The cursor moves over ranges of the log without looking at each message (a channel emptied
or rewound, a topic emptied while paused, an ephemeral channel past its memory): those are
whole ranges of WAITING messages becoming DONE (or, rewound, WAITING again), and only the
messages the channel holds (requeued, deferred, in flight) go through the table one by one.
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
    EXPIRE_KEPT = "expire, kept as a dead letter"  # EXPIRE on a dead_letter_expired channel
    EXHAUST = "exhaust"  # a verdict: delivered as often as it may be
    SAMPLED_OUT = "sampled out"  # not drawn by its consumer's sample rate: done with
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
    EMPTY = "empty"  # /channel/empty, lmstfy's destroy (what waits), the dead letters emptied
    REWIND = "rewind"  # /channel/rewind: held apart no more, read again from the log
    RESPAWN = "respawn"


#: (state, event) -> the state after. Anything not here cannot happen.
TRANSITIONS: dict[tuple[State, Event], State] = {
    (State.WAITING, Event.DELIVER): State.IN_FLIGHT,
    (State.WAITING, Event.DEFER): State.DEFERRED,
    (State.WAITING, Event.EXPIRE): State.EXPIRED,
    (State.WAITING, Event.EXPIRE_KEPT): State.DEAD,
    (State.WAITING, Event.EXHAUST): State.DEAD,
    (State.WAITING, Event.SAMPLED_OUT): State.DONE,
    (State.WAITING, Event.DELETE): State.DONE,
    (State.WAITING, Event.EMPTY): State.DONE,
    (State.WAITING, Event.REWIND): State.WAITING,
    (State.DEFERRED, Event.DUE): State.WAITING,
    (State.DEFERRED, Event.EXPIRE): State.EXPIRED,
    (State.DEFERRED, Event.EXPIRE_KEPT): State.DEAD,
    (State.DEFERRED, Event.DELETE): State.DONE,
    (State.DEFERRED, Event.EMPTY): State.DONE,
    (State.DEFERRED, Event.REWIND): State.WAITING,
    (State.IN_FLIGHT, Event.FIN): State.DONE,
    (State.IN_FLIGHT, Event.REQ): State.WAITING,
    (State.IN_FLIGHT, Event.REQ_DELAYED): State.DEFERRED,
    (State.IN_FLIGHT, Event.TOUCH): State.IN_FLIGHT,
    (State.IN_FLIGHT, Event.TIMEOUT): State.WAITING,
    (State.IN_FLIGHT, Event.TIMEOUT_EXHAUSTED): State.DEAD,
    (State.IN_FLIGHT, Event.EXPIRE): State.EXPIRED,
    (State.IN_FLIGHT, Event.EXPIRE_KEPT): State.DEAD,
    (State.IN_FLIGHT, Event.GONE): State.WAITING,
    (State.IN_FLIGHT, Event.GIVE_UP): State.DEAD,
    (State.IN_FLIGHT, Event.DELETE): State.DONE,
    (State.IN_FLIGHT, Event.EMPTY): State.DONE,
    (State.DEAD, Event.RESPAWN): State.WAITING,
    (State.DEAD, Event.DELETE): State.DONE,
    (State.DEAD, Event.EMPTY): State.DONE,
}


class IllegalTransition(ValueError):
    """An event the table does not allow in a message's state: a bug in the channel."""


def after(state: State, event: Event) -> State:
    """The state ``event`` moves a message in ``state`` to.

    Raises:
        IllegalTransition: the event cannot happen in that state.
    """
    try:
        return TRANSITIONS[state, event]
    except KeyError:
        raise IllegalTransition(
            f"{event.value} cannot happen to a message {state.value}") from None


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


def timeout_event(msg: QueuedMessage, wall_ns: int, limit: int) -> Event:
    """A message whose deadline passed at ``wall_ns``: EXPIRE (past its expiry: it would
    never be delivered again, so it does not go back to wait, as lmstfy's timer drops an
    entry whose job is gone), else DEAD with no delivery left, else back to WAITING."""
    if msg.expires and msg.expires <= wall_ns:
        return Event.EXPIRE
    most = most_attempts(msg, limit)
    return Event.TIMEOUT_EXHAUSTED if most and msg.attempts >= most else Event.TIMEOUT


def due_event(msg: QueuedMessage, wall_ns: int) -> Event:
    """A deferred message whose time came at ``wall_ns``: DUE (waiting again), or EXPIRE if
    its expiry came first."""
    if msg.expires and msg.expires <= wall_ns:
        return Event.EXPIRE
    return Event.DUE
