# SPDX-License-Identifier: LGPL-2.1-or-later
"""Tests of the kvtier helper package."""

import ctypes
import faulthandler
import gc
import select
import threading

import numpy
import pytest

import kvtier
from kvtier import Kv, GLib

SLOT = 4096


@pytest.fixture(autouse=True)
def watchdog():
    faulthandler.dump_traceback_later(120, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


class DictTier(Kv.SecondaryTier):
    """A tier that copies synchronously on the owner thread and reports at
    once: enough to drive the helpers."""

    __gtype_name__ = 'PyHelperDictTier'

    def __init__(self, **properties):
        super().__init__(**properties)
        self.store = {}
        self.shut_down = False

    def do_lookup(self, key, request):
        return kvtier.LookupResult.HIT if key.to_string() in self.store else kvtier.LookupResult.MISS

    def do_on_new_request(self, request):
        return kvtier.OffloadPolicy.CHUNK_LEVEL

    def do_submit_store(self, job):
        buffer = self.get_primary()
        for key, slot in zip(job.get_keys(), job.get_chunk_ids()):
            self.store[key.to_string()] = bytes(kvtier.slot_view(buffer, slot))
        self.complete_job(Kv.JobResult.new(job.get_id(), True))
        return True

    def do_submit_load(self, job):
        buffer = self.get_primary()
        for key, slot in zip(job.get_keys(), job.get_chunk_ids()):
            kvtier.write_slot(buffer, slot, self.store[key.to_string()])
        self.complete_job(Kv.JobResult.new(job.get_id(), True))
        return True

    def do_drain_jobs(self):
        return True

    def do_shutdown(self):
        self.shut_down = True
        return True


REGISTRY = Kv.TierRegistry.new()
kvtier.register_tier('pydict', REGISTRY)(DictTier)

CONFIG = {
    'primary': {'size': 4 * SLOT, 'slot-size': '4KiB', 'policy': 'lru'},
    'tiers': {'memory': {'type': 'pydict', 'locality': kvtier.Locality.LOCAL}},
}


def key(i):
    return Kv.Key.new(bytes([i]) * 32, 0)


def step(manager):
    manager.on_schedule_end(Kv.ScheduleEnd.new(None, None))


def wait_idle(manager):
    step(manager)
    while manager.has_pending_work():
        assert select.select([manager.get_wakeup_fd()], [], [], 30)[0]
        step(manager)


# ---- enums -------------------------------------------------------------------

def test_enums_are_int_enums_equal_to_kv_values():
    assert issubclass(kvtier.LookupResult, int)
    assert [m.name for m in kvtier.LookupResult] == ['MISS', 'HIT', 'HIT_PENDING', 'RETRY']
    assert kvtier.LookupResult.HIT_PENDING == Kv.LookupResult.HIT_PENDING
    assert kvtier.LookupResult(int(Kv.LookupResult.RETRY)) is kvtier.LookupResult.RETRY
    assert kvtier.Medium['STORAGE'] == Kv.Medium.STORAGE
    assert kvtier.TierError.NO_SPACE == Kv.TierError.NO_SPACE
    assert kvtier.Locality.gi_type is Kv.Locality
    # Accepted wherever Kv expects the enum.
    assert Kv.locality_to_string(kvtier.Locality.REMOTE) == Kv.locality_to_string(Kv.Locality.REMOTE)


# ---- configuration ------------------------------------------------------------

def test_config_from_dict():
    config = kvtier.config_from_dict(CONFIG, REGISTRY)
    assert config.get_primary_size() == 4 * SLOT
    assert config.get_slot_size() == SLOT
    assert config.get_tier_names() == ['memory']
    assert config.get_tier_type('memory') == 'pydict'
    assert config.get_value('tier memory', 'locality') == 'local'


def test_config_from_dict_list_form_and_errors():
    config = kvtier.config_from_dict({
        'primary': {'size': '16KiB', 'slot-size': SLOT},
        'tiers': [{'name': 'a', 'type': 'pydict'}, {'name': 'b', 'type': 'pydict'}],
    }, REGISTRY)
    assert config.get_tier_names() == ['a', 'b']

    with pytest.raises(GLib.Error) as info:
        kvtier.config_from_dict({'tiers': {'a': {'type': 'pydict', 'colour': 'red'}}}, REGISTRY)
    assert info.value.matches(Kv.config_error_quark(), Kv.ConfigError.UNKNOWN_KEY)
    assert 'colour' in info.value.message

    with pytest.raises(TypeError, match=r'config\.primary\.size'):
        kvtier.config_from_dict({'primary': {'size': object()}}, REGISTRY)


# ---- manager lifetime -------------------------------------------------------

def test_open_manager_shuts_down_on_exit():
    with kvtier.open_manager(CONFIG, REGISTRY) as manager:
        tier = manager.get_tier(0)
        assert isinstance(tier, DictTier)
        assert tier.get_locality() == Kv.Locality.LOCAL
        assert not tier.shut_down
    assert tier.shut_down
    assert manager.shutdown()       # again: nothing to do


def test_open_manager_shuts_down_on_exception():
    with pytest.raises(RuntimeError, match='engine bug'):
        with kvtier.open_manager(kvtier.config_from_dict(CONFIG, REGISTRY)) as manager:
            tier = manager.get_tier(0)
            raise RuntimeError('engine bug')
    assert tier.shut_down


def test_register_tier_on_default_registry():
    @kvtier.register_tier('pydict-default')
    class DefaultTier(DictTier):
        __gtype_name__ = 'PyHelperDefaultTier'

    registry = Kv.TierRegistry.get_default()
    assert registry.lookup_tier_type('pydict-default') == DefaultTier.__gtype__


# ---- slot memory ------------------------------------------------------------------

def test_slot_view_is_zero_copy_and_writable():
    buffer = Kv.HostBuffer.new(4, SLOT)
    view = kvtier.slot_view(buffer, 2)
    assert view.nbytes == SLOT and not view.readonly
    assert ctypes.addressof(ctypes.c_char.from_buffer(view)) == buffer.peek_slot(2)
    view[:4] = b'kvtx'
    assert buffer.read_slot(2).get_data()[:4] == b'kvtx'


def test_slot_array_is_zero_copy():
    buffer = Kv.HostBuffer.new(4, SLOT)
    array = kvtier.slot_array(buffer, 1, dtype='uint32')
    assert array.shape == (SLOT // 4,)
    assert array.__array_interface__['data'][0] == buffer.peek_slot(1)
    array[:] = numpy.arange(SLOT // 4, dtype='uint32')
    assert buffer.read_slot(1).get_data() == numpy.arange(SLOT // 4, dtype='uint32').tobytes()


def test_buffer_array_covers_every_slot():
    buffer = Kv.HostBuffer.new(4, SLOT)
    array = kvtier.buffer_array(buffer)
    assert array.shape == (4, SLOT)
    assert array.__array_interface__['data'][0] == buffer.get_data()
    for slot in range(4):
        assert array[slot].__array_interface__['data'][0] == buffer.peek_slot(slot)
    array[3, :] = 7
    assert buffer.read_slot(3).get_data() == bytes([7]) * SLOT


def test_bytes_view_of_read_slot_is_zero_copy():
    """read_slot() returns a GLib.Bytes over the slot; PyGObject's
    get_data() copies it, bytes_view() does not."""
    buffer = Kv.HostBuffer.new(2, SLOT)
    kvtier.write_slot(buffer, 0, b'\x01\x02\x03')
    data = buffer.read_slot(0)
    copied = data.get_data()
    copied_address = numpy.frombuffer(copied, dtype='uint8').__array_interface__['data'][0]
    assert copied_address != buffer.peek_slot(0)
    view = kvtier.bytes_view(data)
    assert view.readonly and view.nbytes == SLOT
    assert numpy.frombuffer(view, dtype='uint8').__array_interface__['data'][0] == buffer.peek_slot(0)
    assert bytes(view[:3]) == b'\x01\x02\x03'
    with pytest.raises(TypeError):
        view[0] = 9


def test_views_keep_their_memory_alive():
    buffer = Kv.HostBuffer.new(2, SLOT)
    kvtier.write_slot(buffer, 1, b'alive')
    array = kvtier.slot_array(buffer, 1)
    data_view = kvtier.bytes_view(buffer.read_slot(1))
    del buffer
    gc.collect()
    assert bytes(array[:5]) == b'alive'
    assert bytes(data_view[:5]) == b'alive'


def test_write_slot_bounds():
    buffer = Kv.HostBuffer.new(2, SLOT)
    with pytest.raises(ValueError):
        kvtier.write_slot(buffer, 0, bytes(SLOT + 1))
    with pytest.raises(IndexError):
        kvtier.slot_view(buffer, 2)
    kvtier.write_slot(buffer, 1, numpy.full(SLOT, 5, dtype='uint8'))
    assert buffer.read_slot(1).get_data() == bytes([5]) * SLOT


def test_write_slot_forgets_the_checksum():
    """A slot's carried checksum is of its old bytes once they change."""
    buffer = Kv.HostBuffer.new(2, SLOT)
    buffer.set_slot_checksum(0, 0x0123456789abcdef)
    buffer.set_slot_checksum(1, 7)
    assert buffer.get_slot_checksum(0) == (True, 0x0123456789abcdef)
    kvtier.write_slot(buffer, 0, b'new bytes')
    assert buffer.get_slot_checksum(0)[0] is False
    assert buffer.get_slot_checksum(1) == (True, 7)
    assert Kv.PrimaryTier.new(buffer, None, False).get_slot_checksum(1) == (True, 7)


def test_views_from_another_thread():
    buffer = Kv.HostBuffer.new(2, SLOT)
    done = threading.Event()

    def worker():
        kvtier.slot_array(buffer, 0)[:] = 3
        done.set()

    threading.Thread(target=worker).start()
    assert done.wait(30)
    assert kvtier.slot_array(buffer, 0).sum() == 3 * SLOT


# ---- loads ---------------------------------------------------------------------

def test_lookup_many_and_load_through_slot_views():
    with kvtier.open_manager(CONFIG, REGISTRY) as manager:
        primary = manager.get_primary()
        buffer = primary.get_buffer()
        req = Kv.Request.new('r1', None)
        manager.on_new_request(req)
        keys = [key(i) for i in range(3)]
        prepared = manager.prepare_store(keys, req)
        for k, slot in zip(prepared.get_keys_to_store(), prepared.get_chunk_ids()):
            kvtier.slot_array(buffer, slot)[:] = k.get_hash_bytes().get_data()[0]
        manager.complete_store(prepared.get_keys_to_store(), req, True)
        wait_idle(manager)

        assert kvtier.lookup_many(manager, keys, req) == [kvtier.LookupResult.HIT] * 3
        slots = manager.prepare_load(keys, req)
        assert slots == [primary.get_chunk_id(k)[1] for k in keys]
        for i, k in enumerate(keys):
            assert primary.get_ref_count(k) == (True, 1)
            assert bytes(kvtier.slot_view(buffer, slots[i])) == bytes([i]) * SLOT
        manager.complete_load(keys, req)
        for k in keys:
            assert primary.get_ref_count(k) == (True, 0)

        with pytest.raises(GLib.Error) as info:
            manager.prepare_load([key(0), key(9)], req)
        assert info.value.matches(Kv.tier_error_quark(), Kv.TierError.NOT_FOUND)
        assert key(9).to_string() in info.value.message
        assert primary.get_ref_count(key(0)) == (True, 0)      # nothing pinned
        assert kvtier.lookup_many(manager, [], req) == []
        manager.on_request_finished(req)


def test_promotion_through_the_helpers():
    """The dict tier copies with write_slot()/slot_view(): a promotion lands
    byte for byte."""
    with kvtier.open_manager(CONFIG, REGISTRY) as manager:
        tier = manager.get_tier(0)
        buffer = manager.get_primary().get_buffer()
        req = Kv.Request.new('r1', None)
        manager.on_new_request(req)
        for round_ in range(2):
            keys = [key(4 * round_ + i) for i in range(4)]
            prepared = manager.prepare_store(keys, req)
            for k, slot in zip(prepared.get_keys_to_store(), prepared.get_chunk_ids()):
                kvtier.slot_array(buffer, slot)[:] = numpy.frombuffer(
                    k.get_hash_bytes().get_data() * (SLOT // 32), dtype='uint8')
            manager.complete_store(prepared.get_keys_to_store(), req, True)
            wait_idle(manager)
        assert len(tier.store) == 8
        assert kvtier.lookup_many(manager, [key(0)], req) == [kvtier.LookupResult.HIT_PENDING]
        wait_idle(manager)
        [slot] = manager.prepare_load([key(0)], req)
        assert bytes(kvtier.slot_view(buffer, slot)) == bytes(32) * (SLOT // 32)
        manager.complete_load([key(0)], req)
        manager.on_request_finished(req)
