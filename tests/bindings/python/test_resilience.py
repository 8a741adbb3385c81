# SPDX-License-Identifier: LGPL-2.1-or-later
"""Liveness a Python tier inherits from Kv.SecondaryTier without a line of
code: job deadlines, late answers dropped, the circuit breaker with a
Python probe, the per-request negative cache."""

import threading
import time

import gi

gi.require_version('GLib', '2.0')
gi.require_version('Kv', '1')
from gi.repository import GLib, Kv  # noqa: E402

from conftest import make_key  # noqa: E402


class HungTier(Kv.SecondaryTier):
    """Accepts every job and hands it to a worker thread that dies before
    it reports anything. No drain of its own: the inherited one waits for
    the jobs, which the deadline bounds."""
    __gtype_name__ = 'PyHungTier'

    def __init__(self, **properties):
        super().__init__(**properties)
        self.jobs = []
        self.present = set()
        self.calls = []

    def do_lookup(self, key, request):
        self.calls.append('lookup')
        return Kv.LookupResult.HIT if key.to_string() in self.present else Kv.LookupResult.MISS

    def do_on_new_request(self, request):
        return Kv.OffloadPolicy.CHUNK_LEVEL

    def _die(self, job):
        return      # the thread ends without reporting the job

    def do_submit_store(self, job):
        self.calls.append('submit_store')
        self.jobs.append(job)
        threading.Thread(target=self._die, args=(job,)).start()
        return True

    def do_submit_load(self, job):
        self.calls.append('submit_load')
        self.jobs.append(job)
        threading.Thread(target=self._die, args=(job,)).start()
        return True


class NaiveTier(HungTier):
    """Waits in its drain for its own jobs: would never return."""
    __gtype_name__ = 'PyNaiveHungTier'

    def do_drain_jobs(self):
        self.calls.append('drain_jobs')
        while True:
            time.sleep(1)

    def do_shutdown(self):
        self.calls.append('shutdown')
        while True:
            time.sleep(1)


class FailingTier(HungTier):
    """Fails every job at once; its probe answers self.healthy."""
    __gtype_name__ = 'PyFailingTier'

    healthy = False

    def do_submit_store(self, job):
        self.calls.append('submit_store')
        self.complete_job(Kv.JobResult.new(job.get_id(), False))
        return True

    def do_probe(self, probe_id, cancellable):
        self.calls.append('probe')
        self.complete_probe(probe_id, self.healthy)
        return True


def add(engine, cls, **properties):
    tier = cls(primary=engine.buffer, medium=Kv.Medium.CPU, tier_type='pyhung', **properties)
    engine.manager.add_tier(tier)
    return tier


def test_python_tier_that_never_answers(engine):
    tier = add(engine, HungTier, deadline_ms=80)
    assert tier.props.deadline_ms == 80
    req = Kv.Request.new('r', None)
    engine.manager.on_new_request(req)
    start = time.monotonic()
    engine.store(req, [0])
    engine.step()
    assert tier.calls.count('submit_store') == 1
    assert engine.primary.get_ref_count(engine.keys[0]) == (True, 1)

    assert tier.drain_jobs()                     # returns at the deadline
    assert time.monotonic() - start >= 0.08
    assert tier.get_n_expired_jobs() == 1
    assert tier.get_n_jobs_in_flight() == 0
    engine.step()
    engine.step()
    assert engine.primary.get_ref_count(engine.keys[0]) == (True, 0)
    assert engine.manager.get_n_active_jobs() == 0

    # the worker answers after all: dropped and counted, never applied
    tier.complete_job(Kv.JobResult.new(tier.jobs[0].get_id(), True))
    engine.step()
    engine.step()
    assert tier.get_n_late_completions() == 1

    # the tier still answers lookups
    tier.present.add(engine.keys[5].to_string())
    assert engine.manager.lookup(engine.keys[5], req) == Kv.LookupResult.HIT_PENDING
    engine.manager.on_request_finished(req)


def test_naive_drain_is_not_called_once_the_tier_is_known_hung(engine):
    clock = Kv.Clock.new_manual(0)
    tier = add(engine, NaiveTier, deadline_ms=10, clock=clock)
    req = Kv.Request.new('r', None)
    engine.manager.on_new_request(req)
    engine.store(req, [0])
    engine.step()
    clock.advance(10 * 1000)
    engine.step()                              # the deadline fails the job
    engine.step()
    assert engine.primary.get_ref_count(engine.keys[0]) == (True, 0)
    assert tier.drain_jobs()
    assert 'drain_jobs' not in tier.calls
    engine.manager.on_request_finished(req)
    engine.shutdown()                          # neither is do_shutdown
    assert 'shutdown' not in tier.calls


def test_python_breaker_and_probe(engine):
    clock = Kv.Clock.new_manual(0)
    tier = add(engine, FailingTier, clock=clock, breaker_threshold=2, breaker_open_ms=50)
    breaker = tier.get_circuit_breaker()
    req = Kv.Request.new('r', None)
    engine.manager.on_new_request(req)
    engine.store(req, [0])
    engine.store(req, [1])
    engine.step()
    assert breaker.get_state() == Kv.CircuitState.OPEN
    assert tier.calls.count('submit_store') == 2

    # open: lookups and cascades do not reach the tier
    tier.present.add(engine.keys[0].to_string())
    engine.store(req, [2])
    assert tier.calls.count('submit_store') == 2
    assert tier.lookup(engine.keys[0], req) == Kv.LookupResult.MISS
    assert 'lookup' not in tier.calls

    # a failed probe keeps it open, a healthy one closes it
    clock.advance(50 * 1000)
    tier.lookup(engine.keys[0], req)
    assert tier.calls.count('probe') == 1
    assert breaker.get_state() == Kv.CircuitState.OPEN
    tier.healthy = True
    clock.advance(50 * 1000)
    tier.lookup(engine.keys[0], req)
    assert tier.calls.count('probe') == 2
    assert breaker.get_state() == Kv.CircuitState.CLOSED
    assert tier.lookup(engine.keys[0], req) == Kv.LookupResult.HIT
    engine.manager.on_request_finished(req)


def test_negative_cache_marks_every_key_that_did_not_land(engine):
    tier = add(engine, HungTier)
    req = Kv.Request.new('r', None)
    other = Kv.Request.new('other', None)
    keys = [make_key(100 + i) for i in range(3)]
    for key in keys:
        tier.present.add(key.to_string())
    job = Kv.TransferJob.new(42, keys, [0, 1, 2], True, req)
    assert tier.submit_load(job)
    result = Kv.JobResult.new(42, False)
    result.set_successful_keys(keys[:1])
    tier.complete_job(result)
    assert [r.get_job_id() for r in tier.get_finished_jobs()] == [42]

    tier.calls.clear()
    assert tier.lookup(keys[1], req) == Kv.LookupResult.MISS
    assert tier.lookup(keys[2], req) == Kv.LookupResult.MISS
    assert tier.calls == []
    assert tier.lookup(keys[0], req) == Kv.LookupResult.HIT
    assert tier.lookup(keys[1], other) == Kv.LookupResult.HIT
    assert tier.calls == ['lookup', 'lookup']
