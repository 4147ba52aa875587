"""Protocol V2's connection states, and which command may run in which (cf. h11's ``_state.py``).

A connection starts in ``INIT``; ``SUB`` moves it to ``SUBSCRIBED``, ``CLS`` to ``CLOSING``::

    INIT ──SUB──> SUBSCRIBED ──CLS──> CLOSING

    command            allowed in              then
    IDENTIFY, AUTH     INIT                    (unchanged)
    SUB                INIT                    SUBSCRIBED
    RDY                SUBSCRIBED, CLOSING     (unchanged; ignored while CLOSING, as nsqd does)
    FIN, REQ, TOUCH    SUBSCRIBED, CLOSING     (unchanged: a closing consumer still answers)
    CLS                SUBSCRIBED              CLOSING
    anything else      any state               (unchanged)

The numbers are nsqd's (``stateInit`` 0, ``stateSubscribed`` 3, ``stateClosing`` 4), which
``/stats`` shows. Handlers never compare states themselves: they ask ``ALLOWED`` (or its
per-command constants, which the hot FIN/RDY paths use to skip a dict lookup) and take the
next state from ``TRANSITIONS``; a command in the wrong state is NSQ's ``E_INVALID cannot <CMD>
in current state``, made by ``invalid``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from nsq_common import ErrorCode, ProtocolError


class State(enum.IntEnum):
    INIT = 0
    SUBSCRIBED = 3
    CLOSING = 4


# Module constants: a global read is cheaper than an attribute of the enum class, and
# ``ready_slots`` (once per client per pump) and FIN (once per message) read them.
INIT = State.INIT
SUBSCRIBED = State.SUBSCRIBED
CLOSING = State.CLOSING

#: command -> {state it may run in: the state after it}
TRANSITIONS: Mapping[bytes, Mapping[State, State]] = {
    b"IDENTIFY": {INIT: INIT},
    b"AUTH": {INIT: INIT},
    b"SUB": {INIT: SUBSCRIBED},
    b"RDY": {SUBSCRIBED: SUBSCRIBED, CLOSING: CLOSING},
    b"FIN": {SUBSCRIBED: SUBSCRIBED, CLOSING: CLOSING},
    b"REQ": {SUBSCRIBED: SUBSCRIBED, CLOSING: CLOSING},
    b"TOUCH": {SUBSCRIBED: SUBSCRIBED, CLOSING: CLOSING},
    b"CLS": {SUBSCRIBED: CLOSING},
}

#: command -> the states it may run in (only commands that care are listed)
ALLOWED: Mapping[bytes, frozenset[State]] = {
    command: frozenset(states) for command, states in TRANSITIONS.items()}

ANSWER_STATES = ALLOWED[b"FIN"]  # FIN, REQ, TOUCH, RDY


def invalid(command: bytes) -> ProtocolError:
    """NSQ's error for ``command`` in a state that does not allow it."""
    return ProtocolError(ErrorCode.E_INVALID, f"cannot {command.decode()} in current state")


def after(state: State, command: bytes) -> State:
    """The state after ``command`` runs in ``state``.

    Raises:
        ProtocolError: E_INVALID, the command is not allowed in ``state``.
    """
    states = TRANSITIONS.get(command)
    if states is None:
        return state
    try:
        return states[state]
    except KeyError:
        raise invalid(command) from None
