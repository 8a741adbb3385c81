# SPDX-License-Identifier: LGPL-2.1-or-later
"""Capabilities a Python tier class states once for every instance
(Kv.SecondaryTier.type_set_*): an instance made from C (the registry, as a
tier module loader does, with no __init__ keywords) has them, and the
manager honours them; an instance may narrow them, never widen them."""

import gi
import pytest

gi.require_version('GLib', '2.0')
gi.require_version('Kv', '1')
from gi.repository import GLib, Kv  # noqa: E402

import kvtier  # noqa: E402
from conftest import Engine  # noqa: E402


class HoldingTier(Kv.SecondaryTier):
    """Takes every job and never reports it (a store already handed to a
    server that stalled)."""

    def __init__(self, **properties):
        super().__init__(**properties)
        self.jobs = []

    def do_lookup(self, key, request):
        return Kv.LookupResult.MISS

    def do_on_new_request(self, request):
        return Kv.OffloadPolicy.CHUNK_LEVEL

    def do_submit_store(self, job):
        self.jobs.append(job)
        return True

    def do_submit_load(self, job):
        self.jobs.append(job)
        return True


class FetchOnlyTier(HoldingTier):
    __gtype_name__ = 'PyFetchOnlyTier'


class UncancellableTier(HoldingTier):
    __gtype_name__ = 'PyUncancellableTier'


class DefinedBeforeStatement(UncancellableTier):
    """A subclass whose class exists before its parent's statement."""
    __gtype_name__ = 'PyDefinedBeforeStatement'


Kv.SecondaryTier.type_set_accepts_cascaded_stores(FetchOnlyTier, False)
Kv.SecondaryTier.type_set_can_cancel_stores(FetchOnlyTier, False)
Kv.SecondaryTier.type_set_can_cancel_stores(UncancellableTier, False)


class DefinedAfterStatement(UncancellableTier):
    __gtype_name__ = 'PyDefinedAfterStatement'


def create_from_c(cls, name, buffer=None):
    """An instance made by C's g_object_new(), as the registry and the tier
    module loaders make one: no keyword reaches __init__."""
    registry = Kv.TierRegistry.new()
    assert registry.register_tier_type(name, cls.__gtype__)
    tier = registry.create_tier(name, buffer or Kv.HostBuffer.new(4, 4096), None, None)
    assert type(tier) is cls
    return tier


def test_instance_from_c_has_the_class_capabilities():
    tier = create_from_c(FetchOnlyTier, 'fetch-only')
    assert tier.get_accepts_cascaded_stores() is False
    assert tier.props.accepts_cascaded_stores is False
    assert tier.get_can_cancel_stores() is False
    assert tier.props.can_cancel_stores is False
    assert tier.shutdown()

    tier = create_from_c(UncancellableTier, 'uncancellable')
    assert tier.get_can_cancel_stores() is False
    assert tier.get_accepts_cascaded_stores() is True
    assert tier.shutdown()

    # the base class and other Python tiers keep the defaults
    tier = create_from_c(HoldingTier, 'holding')
    assert tier.get_can_cancel_stores() is True
    assert tier.get_accepts_cascaded_stores() is True
    assert tier.shutdown()


@kvtier.tier_capabilities(can_cancel_stores=False, lazy_promotion_allocation=True)
class DecoratedTier(HoldingTier):
    __gtype_name__ = 'PyDecoratedTier'


def test_helper_decorator_states_the_capabilities():
    tier = create_from_c(DecoratedTier, 'decorated')
    assert tier.get_can_cancel_stores() is False
    assert tier.get_lazy_promotion_allocation() is True
    assert tier.get_accepts_cascaded_stores() is True
    assert tier.shutdown()
    with pytest.raises(TypeError, match='cancel_store'):
        kvtier.tier_capabilities(cancel_store=False)


def test_subclasses_inherit_the_statement():
    for cls, name in ((DefinedBeforeStatement, 'before'), (DefinedAfterStatement, 'after')):
        tier = create_from_c(cls, name)
        assert tier.get_can_cancel_stores() is False, cls.__name__
        assert tier.shutdown()


def test_instance_may_narrow_never_widen():
    buffer = Kv.HostBuffer.new(4, 4096)
    widened = FetchOnlyTier(primary=buffer, can_cancel_stores=True,
                            accepts_cascaded_stores=True)
    assert widened.get_can_cancel_stores() is False
    assert widened.get_accepts_cascaded_stores() is False
    narrowed = HoldingTier(primary=buffer, can_cancel_stores=False)
    assert narrowed.get_can_cancel_stores() is False


def test_manager_makes_no_cascade_job_for_a_fetch_only_class():
    engine = Engine()
    tier = create_from_c(FetchOnlyTier, 'fetch-only-manager', engine.buffer)
    engine.manager.add_tier(tier)
    req = Kv.Request.new('r', None)
    engine.manager.on_new_request(req)
    try:
        engine.store(req, [0, 1])
        engine.step()
        assert tier.jobs == []
        assert engine.manager.get_n_active_jobs() == 0
        # nothing pinned for it: both chunks are the primary tier's alone
        assert engine.primary.get_n_evictable() == 2
    finally:
        engine.manager.on_request_finished(req)
        engine.shutdown()


def test_manager_keeps_pins_of_an_uncancellable_class_past_the_deadline():
    engine = Engine()
    tier = create_from_c(UncancellableTier, 'uncancellable-manager', engine.buffer)
    tier.props.deadline_ms = 50
    engine.manager.add_tier(tier)
    req = Kv.Request.new('r', None)
    engine.manager.on_new_request(req)
    try:
        engine.store(req, [0])
        engine.step()
        assert len(tier.jobs) == 1
        assert tier.drain_jobs()        # returns at the deadline
        assert tier.get_n_expired_jobs() == 1
        engine.step()
        engine.step()
        # failed at its deadline, but the tier may still read the slot
        assert engine.primary.get_ref_count(engine.keys[0]) == (True, 1)
        tier.complete_job(Kv.JobResult.new(tier.jobs[0].get_id(), True))
        engine.step()
        engine.step()
        assert engine.primary.get_ref_count(engine.keys[0]) == (True, 0)
    finally:
        engine.manager.on_request_finished(req)
        engine.shutdown()


def expect_tier_error(code, call, *args):
    with pytest.raises(GLib.Error) as info:
        call(*args)
    assert info.value.matches(Kv.tier_error_quark(), code), info.value.message
    return info.value.message


def test_misuse_is_an_error():
    message = expect_tier_error(Kv.TierError.INVALID_ARGUMENT,
                                Kv.SecondaryTier.type_set_can_cancel_stores,
                                Kv.HostBuffer, False)
    assert 'KvHostBuffer' in message and 'not a subclass' in message
    expect_tier_error(Kv.TierError.INVALID_ARGUMENT,
                      Kv.SecondaryTier.type_set_accepts_cascaded_stores,
                      Kv.SecondaryTier, False)

    class Instantiated(HoldingTier):
        __gtype_name__ = 'PyInstantiatedTier'

    class Child(Instantiated):
        __gtype_name__ = 'PyInstantiatedTierChild'

    Child(primary=Kv.HostBuffer.new(4, 4096))
    for cls in (Child, Instantiated):
        message = expect_tier_error(Kv.TierError.BUSY,
                                    Kv.SecondaryTier.type_set_lazy_promotion_allocation,
                                    cls, True)
        assert 'an instance of it exists' in message
    # refused: nothing changed for later instances
    assert Child(primary=Kv.HostBuffer.new(4, 4096)).get_lazy_promotion_allocation() is False
