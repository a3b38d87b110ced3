"""RolloutProducer: the schedule of asynchronous generation (no server: `generate` records when it ran)."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.trainer.producer import ProducerStopped, RolloutProducer


class Recorder:
    """A `generate` that notes, for every batch, the newest version released when its generation started."""

    def __init__(self, fail_on: int | None = None, seconds: float = 0.0):
        self.released = -1
        self.started: dict[int, int] = {}
        self.fail_on = fail_on
        self.seconds = seconds
        self.lock = threading.Lock()

    def __call__(self, batch: int) -> str:
        with self.lock:
            self.started[batch] = self.released
        time.sleep(self.seconds)
        if batch == self.fail_on:
            raise ConnectionError(f"server gone during batch {batch}")
        return f"batch-{batch}"


def train(producer: RolloutProducer, recorder: Recorder, batches: range, seconds: float = 0.0) -> list[str]:
    """The trainer's side: sync version b, release b, take b, train."""
    out = []
    for b in batches:
        recorder.released = b
        producer.release(b)
        out.append(producer.take(b))
        time.sleep(seconds)
    return out


def test_lookahead_zero_generates_inline_in_order():
    recorder = Recorder()
    producer = RolloutProducer(recorder, lookahead=0, first=3, last=10)
    assert producer._thread is None
    assert train(producer, recorder, range(3, 6)) == ["batch-3", "batch-4", "batch-5"]
    assert recorder.started == {3: 3, 4: 4, 5: 5}  # each generated with its own version on the server
    with pytest.raises(RuntimeError, match="batch 7 asked for, but batch 6 is next"):
        producer.take(7)


@pytest.mark.parametrize("lookahead", [1, 2, 3])
def test_generation_runs_ahead_but_never_more_than_lookahead_versions(lookahead):
    recorder = Recorder(seconds=0.01)
    producer = RolloutProducer(recorder, lookahead=lookahead, first=0, last=7)
    assert train(producer, recorder, range(8), seconds=0.05) == [f"batch-{b}" for b in range(8)]
    producer.stop()
    assert sorted(recorder.started) == list(range(8))  # nothing past `last`
    assert all(0 <= b - released <= lookahead for b, released in recorder.started.items())
    assert any(b - released == lookahead for b, released in recorder.started.items())  # it did run ahead


def test_nothing_starts_before_the_first_release():
    recorder = Recorder()
    producer = RolloutProducer(recorder, lookahead=2, first=0, last=5)
    time.sleep(0.1)
    assert recorder.started == {}
    producer.stop()


def test_a_failed_generation_is_raised_to_the_trainer_and_generation_stops():
    recorder = Recorder(fail_on=1)
    producer = RolloutProducer(recorder, lookahead=2, first=0, last=9)
    assert train(producer, recorder, range(1)) == ["batch-0"]
    recorder.released = 1
    producer.release(1)
    with pytest.raises(ConnectionError, match="batch 1"):
        producer.take(1)
    time.sleep(0.05)
    assert max(recorder.started) == 1  # nothing after the failure
    producer.stop()


def test_stop_drops_the_batches_generated_ahead():
    recorder = Recorder()
    producer = RolloutProducer(recorder, lookahead=2, first=0, last=9)
    train(producer, recorder, range(1))
    time.sleep(0.1)  # batches 1 and 2 are generated ahead
    assert set(recorder.started) == {0, 1, 2}
    producer.stop()
    with pytest.raises(ProducerStopped):
        producer.take(1)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 3), st.integers(1, 8), st.lists(st.floats(0, 0.004), min_size=8, max_size=8))
def test_staleness_is_bounded_whatever_the_timing(lookahead, batches, train_seconds):
    """Property: under any timing of training steps, batch b starts generating with a version in [b - k, b]."""
    recorder = Recorder(seconds=0.001)
    producer = RolloutProducer(recorder, lookahead=lookahead, first=0, last=batches - 1)
    for b in range(batches):
        recorder.released = b
        producer.release(b)
        assert producer.take(b) == f"batch-{b}"
        time.sleep(train_seconds[b])
    producer.stop()
    assert all(0 <= b - released <= lookahead for b, released in recorder.started.items())
