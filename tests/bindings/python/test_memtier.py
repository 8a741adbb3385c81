# SPDX-License-Identifier: LGPL-2.1-or-later
"""A Python tier (memtier.MemTier) driven by the C Kv.TieringManager:
cascade, eviction from the primary tier, promotion and loads, with
byte-exact checks of the slots; threads; registration by name."""

import threading

import pytest
from conftest import Engine, pattern
from gi.repository import GLib, Kv
from memtier import MemTier

OWNER = threading.main_thread().ident


class RecordingTier(MemTier):
    """MemTier that records every vfunc call and every completion with the
    thread it ran on."""

    __gtype_name__ = 'PyRecordingTier'

    def __init__(self, **properties):
        super().__init__(**properties)
        self.calls = []            # (name, thread ident), owner thread only
        self.completions = []      # (job id, success, thread ident)
        self.touched = []

    def _record(self, name):
        self.calls.append((name, threading.get_ident()))

    def do_lookup(self, key, request):
        self._record('lookup')
        return super().do_lookup(key, request)

    def do_on_new_request(self, request):
        self._record('on_new_request')
        return super().do_on_new_request(request)

    def do_on_request_finished(self, request):
        self._record('on_request_finished')

    def do_submit_store(self, job):
        self._record('submit_store')
        return super().do_submit_store(job)

    def do_submit_load(self, job):
        self._record('submit_load')
        return super().do_submit_load(job)

    def do_touch(self, keys, request):
        self._record('touch')
        self.touched.append([k.to_string() for k in keys])

    def do_on_schedule_end(self, schedule_end):
        self._record('on_schedule_end')

    def do_drain_jobs(self):
        self._record('drain_jobs')
        return super().do_drain_jobs()

    def do_shutdown(self):
        self._record('shutdown')
        return super().do_shutdown()

    def _report(self, tier_job):
        self.completions.append((tier_job.get_job().get_id(), None, threading.get_ident()))
        super()._report(tier_job)


def add_tier(engine, cls=RecordingTier, **properties):
    tier = cls(primary=engine.buffer, medium=Kv.Medium.CPU, tier_type='pymem', **properties)
    engine.manager.add_tier(tier)
    finished = []
    tier.connect('job-finished',
                 lambda t, r: finished.append((r.get_job_id(), r.get_success(),
                                               threading.get_ident())))
    return tier, finished


def lookup_all(engine, request, indices):
    return [engine.manager.lookup(engine.keys[i], request) for i in indices]


def promote(engine, request, indices):
    """Looks keys up until the promotions from the tier landed."""
    assert lookup_all(engine, request, indices) == [Kv.LookupResult.HIT_PENDING] * len(indices)
    engine.step()              # promotions are submitted at the end of the step
    engine.wait_idle()
    assert lookup_all(engine, request, indices) == [Kv.LookupResult.HIT] * len(indices)


def test_properties_of_python_tier(engine):
    tier, _ = add_tier(engine)
    assert tier.get_tier_type() == 'pymem'
    assert tier.get_medium() == Kv.Medium.CPU
    assert tier.get_block_size_bytes() == 4096
    assert tier.get_primary() == engine.buffer
    assert engine.manager.get_tier(0) == tier


def test_cascade_stores_exact_bytes(engine):
    tier, finished = add_tier(engine)
    req = Kv.Request.new('r1', None)
    engine.manager.on_new_request(req)

    engine.store(req, range(4))
    engine.wait_idle()

    assert [t.calls.count(('submit_store', OWNER)) for t in [tier]] == [1]
    for i in range(4):
        assert tier.get_stored(engine.keys[i]) == pattern(i)
    assert [(job, ok) for job, ok, _ in finished] == [(0, True)]
    engine.manager.on_request_finished(req)


def test_cascade_evict_promote_load_cycles(engine):
    """Four slots, twelve keys: every round evicts what the previous round
    stored, and every key comes back from the Python tier byte for byte."""
    tier, finished = add_tier(engine)
    req = Kv.Request.new('r1', None)
    engine.manager.on_new_request(req)

    # Cascade: three rounds of four keys; each round evicts the previous one.
    for r in range(3):
        indices = range(4 * r, 4 * r + 4)
        prepared = engine.store(req, indices)
        evicted = sorted(engine.index(k) for k in prepared.get_evicted_keys())
        assert evicted == ([] if r == 0 else list(range(4 * r - 4, 4 * r)))
        engine.wait_idle()
        for i in indices:
            assert engine.slot_bytes(i) == pattern(i)
    for i in range(12):
        assert tier.get_stored(engine.keys[i]) == pattern(i)
    # Only keys 8-11 are left in the primary tier.
    for i in range(12):
        expected = Kv.LookupResult.HIT if i >= 8 else Kv.LookupResult.MISS
        assert engine.primary.lookup(engine.keys[i]) == expected

    # Promotion and load, two keys at a time, over every key twice: each
    # promotion evicts the two least recently used chunks.
    loads = 0
    for _ in range(2):
        for first in range(0, 12, 2):
            pair = [first, first + 1]
            if all(engine.primary.lookup(engine.keys[i]) == Kv.LookupResult.HIT for i in pair):
                continue
            promote(engine, req, pair)
            loads += 1
            assert engine.load(req, pair) == [pattern(i) for i in pair]
            # A GPU prefix hit marks them used: the tier hears it too.
            engine.manager.touch([engine.keys[i] for i in pair], req)

    assert loads == 12
    assert tier.calls.count(('submit_load', OWNER)) == loads
    assert all(ok for _, ok, _ in finished)
    assert len(finished) == 3 + loads
    assert [len(t) for t in tier.touched] == [2] * loads
    engine.manager.on_request_finished(req)


def test_vfuncs_on_owner_thread_completions_from_worker(engine):
    tier, finished = add_tier(engine)
    req = Kv.Request.new('r1', None)
    engine.manager.on_new_request(req)
    engine.store(req, range(4))
    engine.wait_idle()
    engine.store(req, range(4, 8))
    engine.wait_idle()
    promote(engine, req, [0])
    engine.manager.on_request_finished(req)
    engine.shutdown()

    names = {name for name, _ in tier.calls}
    assert {'on_new_request', 'lookup', 'submit_store', 'submit_load',
            'on_schedule_end', 'on_request_finished', 'drain_jobs', 'shutdown'} <= names
    assert {ident for _, ident in tier.calls} == {OWNER}
    # Completions come from the tier's worker thread ...
    assert len(tier.completions) == 3
    assert all(ident == tier._worker.ident for _, _, ident in tier.completions)
    assert OWNER != tier._worker.ident
    # ... and the manager emits ::job-finished for them on the owner thread.
    assert sorted(job for job, _, _ in finished) == [job for job, _, _ in tier.completions]
    assert {ident for _, _, ident in finished} == {OWNER}


def test_completions_from_many_python_threads(engine):
    """Kv.TierJob reports from several Python threads at once: every job is
    reported exactly once and consumed on the owner thread."""

    class ThreadPerJobTier(MemTier):
        __gtype_name__ = 'PyThreadPerJobTier'

        def _submit(self, job):
            with self._lock:
                self._in_flight += 1
            threading.Thread(target=self._one, args=(job,)).start()
            return True

        def _one(self, job):
            tier_job = Kv.TierJob.new(self, job)
            self._copy(self.get_primary(), tier_job)
            tier_job.report()
            with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()

    tier, finished = add_tier(engine, ThreadPerJobTier)
    requests = [Kv.Request.new('r%d' % i, None) for i in range(4)]
    for i, req in enumerate(requests):
        engine.manager.on_new_request(req)
        engine.store(req, [i])
    engine.wait_idle()
    assert sorted(job for job, ok, _ in finished if ok) == [0, 1, 2, 3]
    assert {ident for _, _, ident in finished} == {OWNER}
    for i in range(4):
        assert tier.get_stored(engine.keys[i]) == pattern(i)
    for req in requests:
        engine.manager.on_request_finished(req)


def test_drain_and_shutdown_report_every_job(engine):
    tier, finished = add_tier(engine)
    req = Kv.Request.new('r1', None)
    engine.manager.on_new_request(req)
    engine.store(req, range(4))
    engine.manager.on_request_finished(req)
    engine.shutdown()       # drains: the job is reported, not dropped
    assert [(job, ok) for job, ok, _ in finished] == [(0, True)]
    # The manager calls shutdown(); MemTier's drains before it stops its worker.
    assert [name for name, _ in tier.calls][-2:] == ['shutdown', 'drain_jobs']
    assert not tier._worker.is_alive()


def test_request_level_policy_from_python(engine):
    class RequestLevelTier(MemTier):
        __gtype_name__ = 'PyRequestLevelTier'

        def do_on_new_request(self, request):
            return Kv.OffloadPolicy.REQUEST_LEVEL

    add_tier(engine, RequestLevelTier)
    req = Kv.Request.new('r1', None)
    assert engine.manager.on_new_request(req) == Kv.OffloadPolicy.REQUEST_LEVEL
    engine.manager.on_request_finished(req)


def test_register_python_tier_by_name():
    """A Python class registered with the registry is created by name, from
    the registry and from a configuration given as a dict."""
    registry = Kv.TierRegistry.new()
    assert registry.register_tier_type('pymem', MemTier.__gtype__)
    assert 'pymem' in registry.list_tier_types()
    with pytest.raises(GLib.Error) as info:
        registry.register_tier_type('pymem', MemTier.__gtype__)
    assert info.value.matches(Kv.tier_registry_error_quark(), Kv.TierRegistryError.DUPLICATE)

    buffer = Kv.HostBuffer.new(4, 4096)
    tier = registry.create_tier('pymem', buffer, None, None)
    assert isinstance(tier, MemTier)          # the Python class, with its state
    assert tier.get_tier_type() == 'pymem'
    assert tier.get_primary() == buffer
    assert tier.shutdown()

    config = Kv.Config.new_from_variant(registry, GLib.Variant('a{sv}', {
        'primary': GLib.Variant('a{sv}', {
            'size': GLib.Variant('s', '16KiB'),
            'slot-size': GLib.Variant('s', '4KiB'),
        }),
        'tiers': GLib.Variant('aa{sv}', [{
            'name': GLib.Variant('s', 'memory'),
            'type': GLib.Variant('s', 'pymem'),
            'locality': GLib.Variant('s', 'local'),
            # a Python class cannot set the C class field: the config says it
            'medium': GLib.Variant('s', 'storage'),
        }]),
    }))
    manager = config.create_manager()
    try:
        assert manager.get_n_tiers() == 1
        created = manager.get_tier(0)
        assert isinstance(created, MemTier)
        assert created.get_locality() == Kv.Locality.LOCAL
        assert created.get_medium() == Kv.Medium.STORAGE
        # The configured tier works like any other.
        engine = Engine(manager=manager)
        req = Kv.Request.new('r1', None)
        manager.on_new_request(req)
        engine.store(req, range(2))
        engine.wait_idle()
        assert created.get_stored(engine.keys[1]) == pattern(1)
        manager.on_request_finished(req)
    finally:
        manager.shutdown()


def test_register_on_default_registry():
    registry = Kv.TierRegistry.get_default()
    name = 'pymem-default'
    if name not in registry.list_tier_types():
        assert registry.register_tier_type(name, MemTier.__gtype__)
    assert registry.lookup_tier_type(name) == MemTier.__gtype__
    tier = registry.create_tier(name, Kv.HostBuffer.new(1, 4096), None, None)
    assert isinstance(tier, MemTier)
    assert tier.shutdown()

