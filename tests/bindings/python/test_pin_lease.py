# SPDX-License-Identifier: LGPL-2.1-or-later
"""Kv.PinLease from Python: a tier pins chunks that are ready in the
primary tier through the Kv.ParentManager it is handed at each step, reads
which keys are pinned and in which slots, and releases the lease once;
while it is held the chunks are not evicted and reset_cache() is BUSY."""

import gi
import pytest

gi.require_version('GLib', '2.0')
gi.require_version('Kv', '1')
from gi.repository import GLib, Kv  # noqa: E402

from conftest import Engine, pattern  # noqa: E402

NO_SLOT = 0xffffffff      # G_MAXUINT32: a key the lease did not pin


class ServingTier(Kv.SecondaryTier):
    """Stores nothing of its own; keeps the parent manager it is handed, as
    a tier that serves chunks to other nodes does."""
    __gtype_name__ = 'PyPinServingTier'

    def __init__(self, **properties):
        super().__init__(**properties)
        self.parent = None

    def do_lookup(self, key, request):
        return Kv.LookupResult.MISS

    def do_on_new_request(self, request):
        return Kv.OffloadPolicy.CHUNK_LEVEL

    def do_submit_store(self, job):
        raise GLib.Error('a fetch-only tier takes no store')

    def do_submit_load(self, job):
        raise GLib.Error('nothing to load')

    def do_serve_external_requests(self, parent):
        self.parent = parent


@pytest.fixture
def served():
    engine = Engine(n_slots=4)
    tier = ServingTier(primary=engine.buffer, tier_type='serving',
                       accepts_cascaded_stores=False)
    engine.manager.add_tier(tier)
    req = Kv.Request.new('r', None)
    engine.manager.on_new_request(req)
    engine.step()
    assert isinstance(tier.parent, Kv.ParentManager)
    yield engine, tier.parent, req
    engine.manager.on_request_finished(req)
    engine.shutdown()


def test_lease_reports_what_is_ready(served):
    engine, parent, req = served
    engine.store(req, [0, 1])
    engine.step()
    found0, slot0 = engine.primary.get_chunk_id(engine.keys[0])
    found1, slot1 = engine.primary.get_chunk_id(engine.keys[1])
    assert found0 and found1

    asked = [0, 5, 1, 0]          # key 5 is not in the primary tier
    lease = parent.pin([engine.keys[i] for i in asked])
    assert isinstance(lease, Kv.PinLease)
    assert lease.get_n_keys() == 4
    assert lease.get_n_pinned() == 3
    assert [lease.get_key(i).to_string() for i in range(4)] == \
        [engine.keys[i].to_string() for i in asked]
    assert [lease.is_pinned(i) for i in range(4)] == [True, False, True, True]
    assert [lease.get_chunk_id(i) for i in range(4)] == [slot0, NO_SLOT, slot1, slot0]
    assert lease.get_chunk_ids() == [slot0, NO_SLOT, slot1, slot0]
    assert engine.buffer.read_slot(slot1).get_data() == pattern(1)
    # key 0 was asked twice: pinned twice
    assert engine.primary.get_ref_count(engine.keys[0]) == (True, 2)
    assert engine.manager.get_n_active_jobs() == 0

    assert lease.release(True)
    # the unpin waits for the owner's next step
    assert engine.primary.get_ref_count(engine.keys[0]) == (True, 2)
    engine.step()
    assert engine.primary.get_ref_count(engine.keys[0]) == (True, 0)
    assert engine.primary.get_ref_count(engine.keys[1]) == (True, 0)

    with pytest.raises(GLib.Error) as info:
        lease.release(True)
    assert info.value.matches(Kv.tier_error_quark(), Kv.TierError.INVALID_ARGUMENT)


def test_leased_chunk_is_not_evicted_and_reset_cache_is_busy(served):
    engine, parent, req = served
    engine.store(req, [0, 1, 2, 3])
    engine.step()
    assert engine.primary.get_n_free() == 0
    lease = parent.pin([engine.keys[0]])
    slot = lease.get_chunk_id(0)

    # three new chunks evict the three unleased ones, never the leased one
    engine.store(req, [8, 9, 10])
    engine.step()
    assert engine.primary.lookup(engine.keys[0]) == Kv.LookupResult.HIT
    for i in (1, 2, 3):
        assert engine.primary.lookup(engine.keys[i]) == Kv.LookupResult.MISS
    assert engine.buffer.read_slot(slot).get_data() == pattern(0)

    with pytest.raises(GLib.Error) as info:
        engine.manager.reset_cache()
    assert info.value.matches(Kv.tier_error_quark(), Kv.TierError.BUSY)
    assert 'pin lease' in info.value.message
    assert engine.primary.get_ref_count(engine.keys[0]) == (True, 1)

    assert lease.release(False)
    engine.step()
    assert engine.primary.get_ref_count(engine.keys[0]) == (True, 0)
    assert engine.manager.reset_cache()
    assert engine.primary.lookup(engine.keys[0]) == Kv.LookupResult.MISS
