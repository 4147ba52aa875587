import random

from nsq_client._backoff import Action, Backoff, Signal, exponential, full_jitter


def machine(multiplier: float = 1.0, max_duration: float = 120.0) -> Backoff:
    return Backoff(exponential(multiplier), max_duration)


def test_success_outside_backoff_does_nothing() -> None:
    b = machine()
    assert b.signal(Signal.RESUME, 0.0) is Action.NONE
    assert b.signal(Signal.CONTINUE, 0.0) is Action.NONE
    assert not b.in_backoff and not b.paused


def test_five_failures_climb_and_five_successes_descend() -> None:
    b = machine()
    now = 0.0
    pauses = []
    for _ in range(5):
        assert b.signal(Signal.BACKOFF, now) is Action.PAUSE
        pauses.append(b.pause_for)
        # signals while paused are ignored
        assert b.signal(Signal.BACKOFF, now) is Action.NONE
        assert b.signal(Signal.RESUME, now) is Action.NONE
        now = b.paused_until
        b.expire()
    assert pauses == [2.0, 4.0, 8.0, 16.0, 32.0]
    assert b.counter == 5
    actions = []
    for _ in range(5):
        actions.append(b.signal(Signal.RESUME, now))
        if actions[-1] is Action.PAUSE:
            pauses.append(b.pause_for)
            b.expire()
    assert actions == [Action.PAUSE] * 4 + [Action.RESUME]
    assert pauses[5:] == [16.0, 8.0, 4.0, 2.0]
    assert b.counter == 0


def test_counter_stops_climbing_at_max_duration() -> None:
    b = machine(max_duration=10.0)
    for _ in range(6):
        b.signal(Signal.BACKOFF, 0.0)
        b.expire()
    assert b.counter == 3  # 2, 4, 8; 16 would pass 10
    b.signal(Signal.BACKOFF, 0.0)
    assert b.pause_for == 8.0


def test_continue_in_backoff_pauses_again_without_climbing() -> None:
    b = machine()
    b.signal(Signal.BACKOFF, 0.0)
    b.expire()
    assert b.signal(Signal.CONTINUE, 1.0) is Action.PAUSE
    assert b.counter == 1 and b.pause_for == 2.0 and b.paused_until == 3.0


def test_retry_later_pauses_one_second() -> None:
    b = machine()
    b.signal(Signal.BACKOFF, 0.0)
    b.expire()
    assert b.retry_later(5.0) is Action.PAUSE
    assert b.paused_until == 6.0 and b.counter == 1


def test_full_jitter_stays_below_the_exponential_value() -> None:
    strategy = full_jitter(1.0, random.Random(7))
    values = [strategy(3) for _ in range(200)]
    assert all(0 <= v < 8.0 for v in values)
    assert max(values) > 4.0
