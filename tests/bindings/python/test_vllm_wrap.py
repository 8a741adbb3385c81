# SPDX-License-Identifier: LGPL-2.1-or-later
"""kvtier.vllm.wrap_tier: a tier written for vLLM's interface, driven by
the C Kv.TieringManager."""

import ctypes

import gi
import pytest

pytest.importorskip('numpy')            # kvtier.vllm speaks numpy, as vLLM does
gi.require_version('GLib', '2.0')
gi.require_version('Kv', '1')
from gi.repository import GLib, Kv  # noqa: E402

import kvtier.vllm as kvv  # noqa: E402
from conftest import SLOT_SIZE, Engine, key_name, pattern  # noqa: E402
from kvtier.vllm import types as T  # noqa: E402
from vllm_tiers import DictVllmTier, example_vllm_tier_class  # noqa: E402


class Wrapped:
    def __init__(self, n_slots=4, lose=(), wrap_properties=None):
        self.engine = Engine(n_slots=n_slots)
        self.view = kvv.primary_kv_view(self.engine.buffer)
        self.vtier = DictVllmTier(None, self.view, 'dict', lose=lose)
        self.tier = kvv.wrap_tier(self.vtier, self.engine.buffer, **(wrap_properties or {}))
        self.engine.manager.add_tier(self.tier)

    def offload_key(self, i):
        return self.engine.keys[i].to_offload_key().get_data()

    def settle(self):
        """A vLLM tier has no completion signal (vLLM polls every step):
        drain it through kvtier's invoker, which queues its results and so
        wakes the manager, then step until nothing is in flight."""
        self.tier.drain_jobs()
        self.engine.wait_idle()

    def promote(self, request, indices):
        manager = self.engine.manager
        assert kvtier_lookups(self.engine, request, indices) == \
            [Kv.LookupResult.HIT_PENDING] * len(indices)
        manager.on_schedule_end(Kv.ScheduleEnd.new(None, None))
        self.settle()


def kvtier_lookups(engine, request, indices):
    return [engine.manager.lookup(engine.keys[i], request) for i in indices]


@pytest.fixture
def wrapped():
    w = Wrapped()
    yield w
    w.engine.shutdown()


def test_primary_kv_view_is_the_host_buffer_in_place(wrapped):
    buffer = wrapped.engine.buffer
    view = wrapped.view
    assert view.shape == (buffer.get_n_slots(), buffer.get_slot_size())
    assert view.strides[0] == SLOT_SIZE
    if hasattr(T.SecondaryTierManager, 'block_size_bytes'):     # not on older vLLM
        assert wrapped.vtier.block_size_bytes == SLOT_SIZE
    anchor = ctypes.c_char.from_buffer(view)
    assert ctypes.addressof(anchor) == buffer.get_data()
    del anchor
    view[2, 7] = 0x5a
    assert buffer.read_slot(2).get_data()[7] == 0x5a


def test_wrapped_properties(wrapped):
    tier = wrapped.tier
    assert tier.get_tier_type() == 'dict'
    assert tier.get_medium() == Kv.Medium.CPU
    assert tier.get_locality() == Kv.Locality.LOCAL
    assert tier.vllm_tier is wrapped.vtier
    assert wrapped.engine.manager.get_tier(0) == tier
    # vLLM's interface has no cancellation: the manager must keep a store
    # failed at its deadline pinned until the vLLM tier reports it
    assert tier.get_can_cancel_stores() is False
    assert tier.props.can_cancel_stores is False


def test_cascade_evict_promote_byte_exact(wrapped):
    """The kvtier manager cascades into the vLLM tier, evicts, promotes the
    chunks back and the engine reads them byte for byte."""
    engine = wrapped.engine
    req = Kv.Request.new('r', None)
    engine.manager.on_new_request(req)
    for r in range(3):
        engine.store(req, range(4 * r, 4 * r + 4))
        wrapped.settle()
    for i in range(12):
        assert wrapped.vtier.store[wrapped.offload_key(i)] == pattern(i)
    for first in range(0, 8, 2):
        pair = [first, first + 1]
        wrapped.promote(req, pair)
        assert kvtier_lookups(engine, req, pair) == [Kv.LookupResult.HIT] * 2
        assert engine.load(req, pair) == [pattern(i) for i in pair]
        engine.manager.touch([engine.keys[i] for i in pair], req)
    engine.manager.on_request_finished(req)
    engine.step()
    calls = [c[0] for c in wrapped.vtier.calls]
    assert calls.count('submit_store') == 3
    assert calls.count('submit_load') == 4
    assert calls.count('touch') == 4
    assert calls[0] == 'on_new_request' and calls[-2:] == ['on_request_finished',
                                                           'on_schedule_end']
    # One ReqContext per kvtier request, with its id.
    assert {c[1] for c in wrapped.vtier.calls if c[0] == 'lookup'} == {'r'}


def test_partial_load_through_successful_keys():
    """The vLLM tier lands two of three keys: the manager makes those HIT
    and the third a MISS again."""
    w = Wrapped(n_slots=8)
    engine = w.engine
    try:
        req = Kv.Request.new('r', None)
        engine.manager.on_new_request(req)
        engine.store(req, range(3))
        w.settle()
        engine.store(req, range(3, 11))              # evicts 0..2 from the primary
        w.settle()
        assert kvtier_lookups(engine, req, range(3)) == [Kv.LookupResult.HIT_PENDING] * 3
        w.vtier.lose.add(w.offload_key(1))
        engine.manager.on_schedule_end(Kv.ScheduleEnd.new(None, None))
        w.settle()
        primary = engine.primary
        assert [primary.lookup(engine.keys[i]) for i in range(3)] == \
            [Kv.LookupResult.HIT, Kv.LookupResult.MISS, Kv.LookupResult.HIT]
        assert engine.load(req, [0, 2]) == [pattern(0), pattern(2)]
        # kvtier's negative cache: this request does not ask for key 1 again.
        n_lookups = len([c for c in w.vtier.calls if c[0] == 'lookup'])
        assert engine.manager.lookup(engine.keys[1], req) == Kv.LookupResult.MISS
        assert len([c for c in w.vtier.calls if c[0] == 'lookup']) == n_lookups
        engine.manager.on_request_finished(req)
    finally:
        engine.shutdown()


def test_events_and_filters_cross_over(wrapped):
    engine = wrapped.engine
    params = GLib.Variant('a{sv}', {'max_load_tokens': GLib.Variant('x', 64)})
    req = Kv.Request.new('events', params)
    only_remote = Kv.TierFilter.new()
    only_remote.add_matcher(Kv.Medium.UNSPECIFIED, Kv.Locality.REMOTE)
    req.set_load_tier_filter(only_remote)
    engine.manager.on_new_request(req)
    engine.store(req, range(2))
    wrapped.settle()
    events = [e for e in engine.manager.take_events()
              if e.get_medium() == Kv.Medium.CPU and e.get_locality() == Kv.Locality.LOCAL
              and not e.get_removed() and e.get_ownership() is None and
              sorted(key_name(k) for k in e.get_keys()) ==
              sorted(key_name(engine.keys[i]) for i in range(2))]
    assert events, 'the vLLM tier\'s stored event did not come through'
    ctx = wrapped.vtier_ctx = wrapped.tier._ctx(req)
    assert ctx.req_id == 'events'
    assert ctx.kv_transfer_params == {'max_load_tokens': 64}
    assert ctx.load_tier_filter is not T.TierFilter.ALL
    assert ctx.load_tier_filter.allows(T.Medium.STORAGE, T.Locality.REMOTE)
    assert not ctx.load_tier_filter.allows(T.Medium.CPU, T.Locality.LOCAL)
    engine.manager.on_request_finished(req)


def test_shutdown_with_jobs_in_flight_reports_every_job(wrapped):
    """Jobs held in the vLLM tier at shutdown: the manager's shutdown
    drains the tier (vLLM's drain_jobs finishes them) and every job is
    reported once; the chunks are stored."""
    engine = wrapped.engine
    req = Kv.Request.new('busy', None)
    engine.manager.on_new_request(req)
    wrapped.vtier.gate.clear()
    engine.store(req, range(4))
    assert engine.manager.get_n_active_jobs() == 1
    assert engine.manager.has_pending_work()
    engine.manager.on_request_finished(req)
    engine.shutdown()
    assert engine.manager.get_n_active_jobs() == 0
    assert not wrapped.vtier._worker.is_alive()
    assert sorted(wrapped.vtier.store) == sorted(wrapped.offload_key(i) for i in range(4))
    for i in range(4):
        assert engine.primary.get_ref_count(engine.keys[i]) == (True, 0)


def test_a_refused_submit_fails_the_job(wrapped):
    engine = wrapped.engine
    req = Kv.Request.new('refuse', None)
    engine.manager.on_new_request(req)

    def refuse(job):
        raise OSError('disk on fire')
    wrapped.vtier.submit_store = refuse
    engine.store(req, range(2))
    engine.wait_idle()
    assert engine.manager.get_n_active_jobs() == 0
    assert wrapped.vtier.store == {}
    assert engine.primary.get_ref_count(engine.keys[0]) == (True, 0)
    engine.manager.on_request_finished(req)


def test_the_vllm_tiers_stats_reach_the_manager(wrapped):
    engine = wrapped.engine
    req = Kv.Request.new('stats', None)
    engine.manager.on_new_request(req)
    engine.store(req, range(3))
    wrapped.settle()
    stats = engine.manager.get_stats()
    flat = stats.reduce().unpack()
    # Each kind keeps its kind: the counter adds up, the gauge is the
    # latest value, the histogram counts its observations.
    assert flat["vllm:test_dict_stored_chunks:('dict',)"] == 3.0
    assert flat["vllm:test_dict_keys:('dict',)"] == 3.0
    assert flat["vllm:test_dict_job_chunks_count:('dict',)"] == 1.0
    assert flat["vllm:test_dict_job_chunks_sum:('dict',)"] == 3.0
    engine.manager.on_request_finished(req)


def test_wrap_tier_of_vllms_example_tier():
    """vLLM's example tier (its own class where vLLM imports) under a
    kvtier manager: cascades reach it, a promotion of a key it holds
    succeeds and one of a key it never had fails (a MISS again), every job
    is reported once through its get_finished_jobs(), and reset_cache and
    shutdown return (its drain_jobs does nothing; the wrapper queues what
    it finished)."""
    engine = Engine(n_slots=4)
    view = kvv.primary_kv_view(engine.buffer)
    vtier = example_vllm_tier_class()(None, view, 'example', custom_param=7)
    tier = kvv.wrap_tier(vtier, engine.buffer)
    manager = engine.manager
    manager.add_tier(tier)

    def settle():
        # no completion signal from a vLLM tier: drain it, then step
        tier.drain_jobs()
        engine.wait_idle()

    try:
        req = Kv.Request.new('ex', None)
        manager.on_new_request(req)
        engine.store(req, range(4))
        settle()
        assert sorted(vtier.blocks) == sorted(engine.keys[i].to_offload_key().get_data()
                                              for i in range(4))
        engine.store(req, range(4, 8))           # evicts 0..3 from the primary
        settle()
        assert kvtier_lookups(engine, req, [0, 1]) == [Kv.LookupResult.HIT_PENDING] * 2
        manager.on_schedule_end(Kv.ScheduleEnd.new(None, None))
        settle()
        # The example tier keeps no bytes: the keys are back, not the data.
        assert [engine.primary.lookup(engine.keys[i]) for i in (0, 1)] == \
            [Kv.LookupResult.HIT] * 2
        # A key it never had: lookups say MISS, so no promotion is tried.
        assert kvtier_lookups(engine, req, [20]) == [Kv.LookupResult.MISS]
        assert manager.get_n_active_jobs() == 0
        manager.on_request_finished(req)
        manager.reset_cache()
        assert engine.primary.lookup(engine.keys[0]) == Kv.LookupResult.MISS
        assert kvtier_lookups(engine, Kv.Request.new('again', None), [2]) == \
            [Kv.LookupResult.HIT_PENDING]
    finally:
        engine.shutdown()
    assert manager.get_n_active_jobs() == 0
