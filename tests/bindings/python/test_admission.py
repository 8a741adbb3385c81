# SPDX-License-Identifier: LGPL-2.1-or-later
"""Admission policies and lazy promotion from Python: a Kv.AdmissionPolicy
written in Python gates the C manager's stores and promotions, hears of
each job exactly once and reports its own metrics; a Python tier with
lazy-promotion-allocation reserves its slots when it starts a load."""

import gi

gi.require_version('GObject', '2.0')
from gi.repository import GObject, Kv  # noqa: E402

from conftest import SLOT_SIZE, Engine, pattern  # noqa: E402
from memtier import MemTier  # noqa: E402

REFUSED = 'kvtier_test_py_refused_stores'


class CountingPolicy(GObject.Object, Kv.AdmissionPolicy):
    """Refuses stores of more than `max_store_keys` chunks; logs every call."""

    __gtype_name__ = 'PyCountingPolicy'

    def __init__(self, max_store_keys=2):
        super().__init__()
        self.max_store_keys = max_store_keys
        self.calls = []
        self.tiers = []
        self.admitted = {}
        self.completed = []
        self.refused = 0

    def do_tier_added(self, tier_index, tier):
        self.tiers.append((tier_index, tier.get_tier_type()))

    def do_should_admit(self, keys, tier_index, is_promotion):
        self.calls.append(('should_admit', len(keys), tier_index, is_promotion))
        if not is_promotion and len(keys) > self.max_store_keys:
            self.refused += 1
            return False
        return True

    def do_on_admitted(self, job, tier_index):
        assert job.get_id() not in self.admitted
        self.admitted[job.get_id()] = tier_index
        self.calls.append(('on_admitted', job.get_id(), tier_index))

    def do_on_completed(self, job, tier_index, result):
        assert self.admitted.pop(job.get_id()) == tier_index
        self.completed.append((job.get_id(), result.get_success()))
        self.calls.append(('on_completed', job.get_id(), result.get_success()))

    def do_reset(self):
        self.calls.append(('reset',))

    def do_register_metrics(self, registry):
        registry.add_counter(REFUSED, 'Stores the Python policy refused', None)
        return True

    def do_get_stats(self):
        stats = Kv.Stats.new()
        stats.increase_counter(REFUSED, self.refused, None)
        self.refused = 0
        return stats


def make_engine(policy, tier_class=MemTier, **tier_properties):
    buffer = Kv.HostBuffer.new(8, SLOT_SIZE)
    primary = Kv.PrimaryTier.new(buffer, None, True)
    manager = Kv.TieringManager(primary=primary, admission_policy=policy)
    tier = tier_class(primary=buffer, medium=Kv.Medium.CPU, tier_type='pymem', **tier_properties)
    manager.add_tier(tier)
    return Engine(manager=manager), tier


def test_python_policy_gates_stores():
    policy = CountingPolicy(max_store_keys=2)
    engine, tier = make_engine(policy)
    try:
        assert engine.manager.get_admission_policy() is policy
        assert engine.manager.props.admission_policy is policy
        assert policy.tiers == [(0, 'pymem')]
        request = Kv.Request.new('r1', None)
        engine.manager.on_new_request(request)

        # 3 chunks: refused before any pin or job id
        engine.store(request, [0, 1, 2])
        assert policy.calls == [('should_admit', 3, 0, False)]
        for i in (0, 1, 2):
            assert engine.primary.get_ref_count(engine.keys[i]) == (True, 0)
        assert engine.manager.get_n_active_jobs() == 0

        # 2 chunks: admitted as job 0, reported once
        engine.store(request, [3, 4])
        engine.wait_idle()
        assert policy.calls[1:] == [('should_admit', 2, 0, False), ('on_admitted', 0, 0),
                                    ('on_completed', 0, True)]
        assert tier.contains(engine.keys[3]) and not tier.contains(engine.keys[0])
        assert engine.primary.get_ref_count(engine.keys[3]) == (True, 0)

        # its metrics come with the manager's
        registry = engine.manager.create_metric_registry()
        assert registry.get_kind(REFUSED) == Kv.MetricKind.COUNTER
        found, value = engine.manager.get_stats().lookup(REFUSED, None)
        assert found and value == 1

        engine.manager.on_request_finished(request)
        engine.manager.reset_cache()
        assert policy.calls[-1] == ('reset',)
    finally:
        engine.shutdown()
    assert policy.admitted == {}


def test_python_policy_refuses_promotion():
    class NoPromotions(CountingPolicy):
        __gtype_name__ = 'PyNoPromotions'

        def do_should_admit(self, keys, tier_index, is_promotion):
            super().do_should_admit(keys, tier_index, is_promotion)
            return not is_promotion

    policy = NoPromotions()
    engine, tier = make_engine(policy)
    try:
        request = Kv.Request.new('r1', None)
        engine.manager.on_new_request(request)
        engine.store(request, [0])
        engine.wait_idle()
        engine.manager.reset_cache()             # key 0 is only in the tier now
        assert engine.manager.lookup(engine.keys[0], request) == Kv.LookupResult.MISS
        assert policy.calls[-1] == ('should_admit', 1, 0, True)
        assert engine.primary.get_n_allocated() == 0
        engine.manager.on_request_finished(request)
    finally:
        engine.shutdown()


class LazyMemTier(MemTier):
    """Starts each load in submit_load, on the owner thread: reserves the
    load's primary slots there, then hands it to the worker."""

    __gtype_name__ = 'PyLazyMemTier'

    def __init__(self, **properties):
        super().__init__(**properties)
        self.slots_seen = []

    def do_submit_load(self, job):
        assert all(slot == 0xffffffff for slot in job.get_chunk_ids())
        self.reserve_load_slots(job)
        self.slots_seen.append(list(job.get_chunk_ids()))
        return super().do_submit_load(job)


def test_python_lazy_tier():
    policy = Kv.AlwaysAdmitPolicy.new()
    engine, tier = make_engine(policy, LazyMemTier, lazy_promotion_allocation=True)
    try:
        assert tier.props.lazy_promotion_allocation
        assert tier.get_lazy_promotion_allocation()
        assert engine.manager.props.hit_pending_deadline == 60.0
        writer = Kv.Request.new('w', None)
        engine.manager.on_new_request(writer)
        engine.store(writer, [0, 1, 2])
        engine.wait_idle()
        engine.manager.on_request_finished(writer)
        engine.manager.reset_cache()

        reader = Kv.Request.new('r', None)
        engine.manager.on_new_request(reader)
        for i in (0, 1, 2):
            assert engine.manager.lookup(engine.keys[i], reader) == Kv.LookupResult.HIT_PENDING
        assert engine.primary.get_n_allocated() == 0     # nothing reserved at lookup
        engine.wait_idle()
        assert len(tier.slots_seen) == 1 and len(set(tier.slots_seen[0])) == 3
        assert all(slot < 8 for slot in tier.slots_seen[0])
        assert engine.load(reader, [0, 1, 2]) == [pattern(0), pattern(1), pattern(2)]
        engine.manager.on_request_finished(reader)
    finally:
        engine.shutdown()
