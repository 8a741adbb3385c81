# SPDX-License-Identifier: LGPL-2.1-or-later
"""kvtier.vllm.KvtierSecondaryTier: kvtier tiers driven as vLLM drives a
secondary tier (vllm_engine.py re-implements vLLM's side)."""

import bisect
import ctypes
import json
import os
import struct

import gi
import pytest

numpy = pytest.importorskip('numpy')     # kvtier.vllm speaks numpy, as vLLM does

gi.require_version('GLib', '2.0')
gi.require_version('Kv', '1')
from gi.repository import GLib, Kv  # noqa: E402

import kvtier.vllm as kvv  # noqa: E402
from kvtier.vllm import types as T  # noqa: E402
from vllm_engine import (Engine, SharedRegion, TieringManager, chunk_bytes,  # noqa: E402
                         chunk_key, create_secondary_tier)
from vllm_tiers import ScriptedTier  # noqa: E402

ROW = 8192                   # bytes of one chunk row (two 4 KiB worker cells)

registry = Kv.TierRegistry.new()
registry.load_plugins()
registry.register_tier_type('scripted', ScriptedTier.__gtype__)


@pytest.fixture
def region():
    path = f'/dev/shm/kvtier-test-vllm-{os.getpid()}-{id(object())}.mmap'
    r = SharedRegion(path, 64, ROW)
    yield r
    r.cleanup()


def make_tier(region, registry=registry, **kwargs):
    tier = kvv.KvtierSecondaryTier(None, region.create_kv_memoryview(), 'KvtierSecondaryTier',
                                   None, registry=registry, **kwargs)
    # the tier's entry in secondary_tiers, for the metric definitions
    tier.vllm_entry = dict(kwargs, registry=registry)
    return tier


def fill(region, chunk_id, chunk):
    region.array()[chunk_id] = numpy.frombuffer(chunk_bytes(chunk, ROW), dtype=numpy.uint8)


def poll_until_done(tier, n):
    """Collects n results; drain_jobs() blocks (no spinning) until the
    kvtier tier reported every job."""
    tier.drain_jobs()
    results = tier.get_finished_jobs()
    assert len(results) == n, results
    return results


def check_transfer_bytes(result, expected):
    if 'transfer_bytes' in T.job_result_fields:
        assert result.transfer_bytes == expected
    else:                   # an older vLLM's JobResult has no such field
        assert not hasattr(result, 'transfer_bytes')


# ---- registration and configuration -----------------------------------------------

def test_vllm_factory_builds_the_adapter_by_module_path(region, tmp_path):
    """vLLM's factory: class = getattr(import(module_path), type), the other
    keys as keywords, backpressure_detector always passed."""
    tier = create_secondary_tier({
        'type': 'KvtierSecondaryTier', 'module_path': 'kvtier.vllm',
        'tier': {'type': 'fs', 'root': str(tmp_path)}, 'locality': 'LOCAL',
    }, region.create_kv_memoryview())
    try:
        assert isinstance(tier, T.SecondaryTierManager)
        assert tier.tier_type == 'KvtierSecondaryTier'
        assert tier.kvtier_tier.get_tier_type() == 'fs'
        assert tier.medium == T.Medium.STORAGE
        assert tier.locality == T.Locality.LOCAL
        assert tier.block_size_bytes == ROW
        assert tier.bp_detector is None
    finally:
        tier.shutdown()


def test_tier_from_a_kvtier_config_file(region, tmp_path):
    conf = tmp_path / 'kvtier.conf'
    conf.write_text(f'[primary]\nsize = 1MiB\nslot-size = 8KiB\n\n'
                    f'[tier disk]\ntype = fs\nroot = {tmp_path}\n')
    tier = make_tier(region, config_file=str(conf), tier_name='disk')
    try:
        assert tier.kvtier_tier.get_tier_type() == 'fs'
        assert tier.kvtier_tier.props.root == str(tmp_path)
        with pytest.raises(ValueError, match=r'no \[tier cloud\] section \(it has: disk\)'):
            make_tier(region, config_file=str(conf), tier_name='cloud')
    finally:
        tier.shutdown()


@pytest.mark.parametrize('kwargs, error, match', [
    ({}, ValueError, 'either as "tier"'),
    ({'tier': {'root': '/x'}}, ValueError, 'a "type"'),
    ({'tier': {'type': 'nosuch'}}, GLib.Error, 'nosuch'),
    ({'tier': {'type': 'example', 'colour': 'red'}}, GLib.Error, 'colour'),
    ({'tier': {'type': 'example', 'deadline-ms': 500}}, ValueError, 'deadline-ms'),
    ({'tier': {'type': 'example', 'backpressure': 'ema'}}, ValueError, 'back-pressure'),
    ({'tier': {'type': 'example'}, 'locality': 'local'}, ValueError, 'local'),
    ({'config_file': '/nonexistent.conf'}, ValueError, 'tier_name'),
])
def test_bad_configuration_is_refused_with_the_key_named(region, kwargs, error, match):
    with pytest.raises(error, match=match):
        make_tier(region, **kwargs)


def test_a_view_that_is_not_a_shared_file_is_refused():
    private = bytearray(4 * ROW)
    view = memoryview(private).cast('B', (4, ROW))
    with pytest.raises(ValueError, match='not in a shared file mapping'):
        kvv.KvtierSecondaryTier(None, view, 't', None, tier={'type': 'example'})


def test_a_view_inside_the_region_uses_its_rows_in_place(region):
    """The buffer is the view's own memory: a view that starts one row
    into the region has slot 0 at the region's row 1."""
    view = memoryview(region.mmap)[ROW:].cast('B', (region.n_chunks - 1, ROW))
    tier = kvv.KvtierSecondaryTier(None, view, 't', None, tier={'type': 'example'})
    assert tier.kvtier_buffer.get_data() == region.address(1)
    assert tier.kvtier_buffer.get_n_slots() == region.n_chunks - 1
    fill(region, 1, 42)
    assert tier.kvtier_buffer.read_slot(0).get_data() == chunk_bytes(42, ROW)
    tier.shutdown()
    del tier
    view.release()


def test_a_region_unlinked_after_mapping(tmp_path):
    """Newer vLLM removes /dev/shm/vllm_offload_<engine>.mmap once every
    process mapped it: the adapter uses the memory it was handed, with or
    without a primary_file that no longer exists, stores and promotes
    through it byte-exact, and lets go of it at shutdown."""
    path = f'/dev/shm/kvtier-test-vllm-unlinked-{os.getpid()}.mmap'
    r = SharedRegion(path, 16, ROW)
    try:
        os.unlink(path)                 # what newer vLLM does
        assert kvv.region_of_view(r.create_kv_memoryview()).path is None
        for extra in ({}, {'primary_file': path}):
            tier = kvv.KvtierSecondaryTier(None, r.create_kv_memoryview(), 'KvtierSecondaryTier',
                                           None, tier={'type': 'fs', 'root': str(tmp_path)},
                                           **extra)
            buffer = tier.kvtier_buffer
            assert buffer.props.backing == Kv.HostBufferBacking.BORROWED
            assert buffer.get_data() == r.address(0)
            ctx = T.ReqContext(req_id='unlinked')
            tier.on_new_request(ctx)
            fill(r, 3, 3)
            tier.submit_store(T.transfer_job(1, [chunk_key(3)], numpy.array([3]), False, ctx))
            assert [(x.job_id, x.success) for x in poll_until_done(tier, 1)] == [(1, True)]
            r.array()[9] = 0
            tier.submit_load(T.transfer_job(2, [chunk_key(3)],
                                            numpy.array([9], dtype=numpy.int32), True, ctx))
            assert [(x.job_id, x.success) for x in poll_until_done(tier, 1)] == [(2, True)]
            assert r.array()[9].tobytes() == chunk_bytes(3, ROW)
            tier.on_request_finished(ctx)
            tier.shutdown()
        r.creator = False               # nothing left to unlink
    finally:
        r.cleanup()                     # closes the mmap: the adapter let go of it


def test_a_primary_file_that_is_another_file_is_refused(region, tmp_path):
    """Where a name is given it must be the mapped file; a file put in the
    region's place later changes nothing: the adapter works on the memory
    vLLM mapped, never on what the name now points to."""
    other = tmp_path / 'other.mmap'
    other.write_bytes(bytes(ROW))
    with pytest.raises(ValueError, match='primary_file .* is not the file mapped'):
        kvv.KvtierSecondaryTier(None, region.create_kv_memoryview(), 't', None,
                                tier={'type': 'example'}, primary_file=str(other))
    view = region.create_kv_memoryview()
    replacement = region.path + '.new'
    with open(replacement, 'wb') as f:
        f.write(bytes(region.n_chunks * ROW))
    os.rename(replacement, region.path)     # replaces the region's name
    assert kvv.region_of_view(view).path is None
    with pytest.raises(ValueError, match='primary_file .* is not the file mapped'):
        kvv.KvtierSecondaryTier(None, view, 't', None, tier={'type': 'example'},
                                primary_file=region.path)
    tier = kvv.KvtierSecondaryTier(None, view, 't', None, tier={'type': 'example'})
    assert tier.kvtier_buffer.get_data() == region.address(0)
    fill(region, 0, 5)
    assert tier.kvtier_buffer.read_slot(0).get_data() == chunk_bytes(5, ROW)
    tier.shutdown()


# ---- zero copy ---------------------------------------------------------------------

def _file_page(address):
    """(device, inode, file offset) of the byte at address."""
    r = kvv._region_of(address, 1)
    return r.device, r.inode, r.offset


def _physical_frame(address):
    """The page frame behind address, or None when the kernel hides it."""
    try:
        with open('/proc/self/pagemap', 'rb') as pagemap:
            pagemap.seek(address // os.sysconf('SC_PAGE_SIZE') * 8)
            entry, = struct.unpack('<Q', pagemap.read(8))
    except OSError:
        return None
    frame = entry & ((1 << 55) - 1)
    return frame if entry >> 63 and frame else None


def test_no_byte_is_copied_between_vllm_and_kvtier(region, tmp_path):
    """vLLM's row c and the kvtier buffer's slot c are the same bytes of
    the same file (same device, inode and offset; the same physical page
    where the kernel shows it), and the fs tier stores and promotes
    through them."""
    tier = make_tier(region, tier={'type': 'fs', 'root': str(tmp_path), 'enable-events': True})
    buffer = tier.kvtier_buffer
    assert buffer.get_n_slots() == region.n_chunks
    assert buffer.get_slot_size() == ROW
    # The buffer is vLLM's memory itself, not a second mapping of it.
    assert buffer.props.backing == Kv.HostBufferBacking.BORROWED
    assert buffer.get_data() == region.address(0)
    checked_frames = []
    for chunk in (0, 1, 17, region.n_chunks - 1):
        fill(region, chunk, chunk)
        vllm_address = region.address(chunk)
        kv_address = buffer.peek_slot(chunk)
        assert _file_page(vllm_address) == _file_page(kv_address)
        assert _file_page(kv_address)[2] == chunk * ROW
        # A write through vLLM's view is at once in kvtier's slot.
        region.array()[chunk, 100] ^= 0xff
        assert ctypes.string_at(kv_address, ROW) == region.array()[chunk].tobytes()
        region.array()[chunk, 100] ^= 0xff
        # Both mappings touched the page: where the kernel shows page
        # frames (CAP_SYS_ADMIN), they are the same frame.
        frames = _physical_frame(vllm_address), _physical_frame(kv_address)
        if None not in frames:
            assert frames[0] == frames[1]
            checked_frames.append(chunk)
    if os.geteuid() == 0 and _physical_frame(region.address(0)) is not None:
        assert len(checked_frames) == 4

    ctx = T.ReqContext('zero-copy')
    tier.on_new_request(ctx)
    keys = [chunk_key(c) for c in (0, 1, 17)]
    tier.submit_store(T.transfer_job(1, keys, numpy.array([0, 1, 17]), False, ctx))
    [result] = poll_until_done(tier, 1)
    assert (result.job_id, result.success) == (1, True)
    check_transfer_bytes(result, 3 * ROW)
    [event] = tier.take_events()
    assert event.keys == keys and event.medium == T.Medium.STORAGE and not event.removed

    # Promote chunk 17's bytes into free rows 40..42; vLLM reads them in place.
    region.array()[40:43] = 0
    assert [tier.lookup(k, ctx) for k in keys] == [T.LookupResult.HIT] * 3
    tier.submit_load(T.transfer_job(2, keys, numpy.array([40, 41, 42], dtype=numpy.int32),
                                   True, ctx))
    [result] = poll_until_done(tier, 1)
    assert result.success and result.successful_keys is None
    for row, chunk in zip((40, 41, 42), (0, 1, 17)):
        assert region.array()[row].tobytes() == chunk_bytes(chunk, ROW)
    tier.on_request_finished(ctx)
    tier.shutdown()


# ---- vLLM's calling sequence ------------------------------------------------------

def test_promotions_are_batched_per_request_and_submitted_at_step_end(region):
    """Reference §5.4: lookups of two requests in one step make exactly one
    submit_load each, at on_schedule_end; the same chunk looked up by both
    is promoted once (HIT_PENDING for both)."""
    tier = make_tier(region, tier={'type': 'scripted'})
    scripted = tier.kvtier_tier
    manager = TieringManager(region.n_chunks, [tier])
    for c in range(6):
        scripted.store[chunk_key(c)] = chunk_bytes(c, ROW)
    a, b = T.ReqContext('a'), T.ReqContext('b')
    manager.on_new_request(a)
    manager.on_new_request(b)
    assert [manager.lookup(chunk_key(c), a) for c in (0, 1, 2)] == [T.LookupResult.HIT_PENDING] * 3
    assert [manager.lookup(chunk_key(c), b) for c in (2, 3)] == [T.LookupResult.HIT_PENDING] * 2
    assert not [c for c in manager.calls if c[1] == 'submit_load']
    manager.on_schedule_end(T.ScheduleEndContext(['a', 'b'], []))
    loads = [c for c in manager.calls if c[1] == 'submit_load']
    assert [(c[3], c[4]) for c in loads] == [('a', 3), ('b', 1)]
    # The job carries vLLM's request context as a Kv.Request of that id.
    assert {r for m, r, *_ in scripted.requests if m == 'lookup'} == {'a', 'b'}

    tier.drain_jobs()
    manager.on_schedule_end(T.ScheduleEndContext([], []))
    rows = region.array()
    for c in (0, 1, 2, 3):
        assert manager.lookup(chunk_key(c), a) == T.LookupResult.HIT
        assert rows[manager.primary.slot[chunk_key(c)]].tobytes() == chunk_bytes(c, ROW)
    manager.on_request_finished(a)
    manager.on_request_finished(b)
    manager.shutdown()
    assert not manager.tracker.jobs


def test_partial_promotion_reports_successful_keys(region):
    """A load that landed some keys: vLLM's JobResult names them with the
    job's own key bytes; the primary answers [HIT, MISS, HIT]."""
    tier = make_tier(region, tier={'type': 'scripted'})
    scripted = tier.kvtier_tier
    keys = [chunk_key(c) for c in range(3)]
    for c, key in enumerate(keys):
        scripted.store[key] = chunk_bytes(c, ROW)
    scripted.lose = {keys[1]}
    manager = TieringManager(region.n_chunks, [tier])
    ctx = T.ReqContext('partial')
    manager.on_new_request(ctx)
    assert [manager.lookup(k, ctx) for k in keys] == [T.LookupResult.HIT_PENDING] * 3
    manager.on_schedule_end(T.ScheduleEndContext(['partial'], []))
    tier.drain_jobs()
    [result] = tier.get_finished_jobs()
    assert not result.success
    assert result.successful_keys == (keys[0], keys[2])
    check_transfer_bytes(result, 2 * ROW)
    # Feed it back the way vLLM's manager would.
    job = manager.tracker.pop(result, 0)
    manager.primary.complete_store([k for k in job.keys if k in result.successful_keys], True)
    manager.primary.complete_store([keys[1]], False)
    assert [manager.primary.lookup(k) for k in keys] == \
        [T.LookupResult.HIT, T.LookupResult.MISS, T.LookupResult.HIT]
    # A load that landed nothing has no successful keys at all.
    scripted.lose = set(keys)
    ctx2 = T.ReqContext('none')
    tier.on_new_request(ctx2)
    tier.submit_load(T.transfer_job(99, keys[:2], numpy.array([50, 51], dtype=numpy.int32),
                                   True, ctx2))
    [result] = poll_until_done(tier, 1)
    assert (result.job_id, result.success, result.successful_keys) == (99, False, None)
    manager.on_request_finished(ctx)
    tier.on_request_finished(ctx2)
    tier.shutdown()


def test_a_refused_job_is_a_failed_job_reported_once(region):
    tier = make_tier(region, tier={'type': 'scripted'})
    tier.kvtier_tier.refuse = True
    ctx = T.ReqContext('refused')
    tier.on_new_request(ctx)
    fill(region, 5, 5)
    tier.submit_store(T.transfer_job(7, [chunk_key(5)], numpy.array([5]), False, ctx))
    assert tier.has_pending_work()
    assert [(r.job_id, r.success) for r in tier.get_finished_jobs()] == [(7, False)]
    assert tier.get_finished_jobs() == []
    assert not tier.has_pending_work()
    # The job id is free again: vLLM never reuses one, but a refusal must
    # not leave it "in flight".
    tier.kvtier_tier.refuse = False
    tier.submit_store(T.transfer_job(7, [chunk_key(5)], numpy.array([5]), False, ctx))
    assert [(r.job_id, r.success) for r in poll_until_done(tier, 1)] == [(7, True)]
    with pytest.raises(ValueError, match='already in flight'):
        tier.kvtier_tier.hold = True
        tier.submit_store(T.transfer_job(8, [chunk_key(5)], numpy.array([5]), False, ctx))
        tier.submit_store(T.transfer_job(8, [chunk_key(5)], numpy.array([5]), False, ctx))
    tier.kvtier_tier.release()
    assert [(r.job_id, r.success) for r in poll_until_done(tier, 1)] == [(8, True)]
    tier.shutdown()


def test_a_failed_load_from_fs_is_a_failed_job_and_a_miss_again(region, tmp_path):
    """The chunk file disappears between lookup and load: the promotion
    fails, vLLM frees the slot (MISS), and the tier's negative cache makes
    the same request's next lookup a MISS (vLLM #49176)."""
    tier = make_tier(region, tier={'type': 'fs', 'root': str(tmp_path)})
    manager = TieringManager(region.n_chunks, [tier])
    ctx = T.ReqContext('writer')
    manager.on_new_request(ctx)
    prepared = manager.prepare_store([chunk_key(1)], ctx)
    fill(region, prepared[1][0], 1)
    manager.complete_store(prepared[0], ctx)
    manager.on_request_finished(ctx)
    manager.drain()
    assert not manager.tracker.jobs
    # Evict it from the primary, then delete its file.
    manager.primary.evictable.pop(chunk_key(1))
    manager.primary.free.append(manager.primary.slot.pop(chunk_key(1)))
    del manager.primary.ref[chunk_key(1)]
    reader = T.ReqContext('reader')
    manager.on_new_request(reader)
    assert manager.lookup(chunk_key(1), reader) == T.LookupResult.HIT_PENDING
    for path in _chunk_files(tmp_path):
        os.unlink(path)
    manager.on_schedule_end(T.ScheduleEndContext(['reader'], []))
    manager.drain()
    assert manager.failed_promotions == 1
    assert manager.primary.lookup(chunk_key(1)) == T.LookupResult.MISS
    assert manager.lookup(chunk_key(1), reader) == T.LookupResult.MISS
    manager.on_request_finished(reader)
    manager.shutdown()


def _chunk_files(root):
    found = []
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            if os.path.getsize(path) >= ROW:
                found.append(path)
    assert found, f'no chunk file under {root}'
    return found


def test_shutdown_with_jobs_in_flight_reports_each_once(region, tmp_path):
    """Jobs still in flight at shutdown: the fs tier finishes the running
    ones and cancels the queued ones (reported failed, as vLLM's contract
    allows); the scripted tier's shutdown drops its held jobs, which
    kvtier fails. Each is reported exactly once, after shutdown, by
    get_finished_jobs(); the tier's late answers are not reported."""
    fs = make_tier(region, tier={'type': 'fs', 'root': str(tmp_path)})
    scripted = make_tier(region, tier={'type': 'scripted'})
    scripted.kvtier_tier.hold = True
    ctx = T.ReqContext('busy')
    for tier in (fs, scripted):
        tier.on_new_request(ctx)
    for c in range(32):
        fill(region, c, c)
    for job_id in range(16):
        chunks = [2 * job_id, 2 * job_id + 1]
        for tier in (fs, scripted):
            tier.submit_store(T.transfer_job(job_id, [chunk_key(c) for c in chunks],
                                            numpy.array(chunks), False, ctx))
    assert scripted.has_pending_work()
    fs.shutdown()
    scripted.shutdown()
    fs_results = fs.get_finished_jobs()
    scripted_results = scripted.get_finished_jobs()
    assert sorted(r.job_id for r in fs_results) == list(range(16))
    assert fs.kvtier_tier.get_n_late_completions() == 0
    assert sorted(r.job_id for r in scripted_results) == list(range(16))
    assert not any(r.success for r in scripted_results)
    # The tier answering after its shutdown is too late: dropped, counted.
    for job in scripted.kvtier_tier.held:
        scripted.kvtier_tier.complete_job(Kv.JobResult.new(job.get_id(), True))
    assert scripted.kvtier_tier.get_n_late_completions() == 16
    for tier in (fs, scripted):
        assert tier.get_finished_jobs() == []
        assert not tier.has_pending_work()
        assert tier.lookup(chunk_key(0), ctx) == T.LookupResult.MISS
        tier.submit_store(T.transfer_job(100, [chunk_key(0)], numpy.array([0]), False, ctx))
        assert [(r.job_id, r.success) for r in tier.get_finished_jobs()] == [(100, False)]
        tier.shutdown()             # again: nothing happens


def test_request_context_and_tier_filter_reach_the_kvtier_tier(region):
    tier = make_tier(region, tier={'type': 'scripted'})
    scripted = tier.kvtier_tier
    only_storage = T.TierFilter((T.TierMatcher(medium=T.Medium.STORAGE),))
    ctx = T.ReqContext(req_id='filtered',
                       kv_transfer_params={'kv_load_tiers': [{'medium': 'STORAGE'}],
                                           'max_load_tokens': 4096, 'note': None,
                                           'blob': b'\x00\x01', 'huge': 2 ** 70},
                       load_tier_filter=only_storage)
    tier.on_new_request(ctx)
    tier.lookup(chunk_key(1), ctx)
    everything = T.ReqContext('all')
    tier.lookup(chunk_key(1), everything)
    (_, rid, kv_filter, params), (_, rid2, kv_filter2, _) = [
        r for r in scripted.requests if r[0] == 'lookup']
    assert rid == 'filtered' and rid2 == 'all'
    assert kv_filter.get_n_matchers() == 1 and not kv_filter.is_all()
    assert kv_filter.allows(Kv.Medium.STORAGE, Kv.Locality.REMOTE)
    assert not kv_filter.allows(Kv.Medium.CPU, Kv.Locality.LOCAL)
    assert kv_filter2.is_all()
    params = params.unpack()
    assert params['max_load_tokens'] == 4096
    assert params['kv_load_tiers'] == [{'medium': 'STORAGE'}]
    assert params['note'] is None
    assert params['blob'] == str(b'\x00\x01') and params['huge'] == str(2 ** 70)
    # One Kv.Request per vLLM request, kept until it finishes.
    assert len(tier._requests) == 2
    tier.on_request_finished(ctx)
    tier.on_request_finished(everything)
    assert len(tier._requests) == 0
    tier.shutdown()


def test_engine_over_the_c_example_tier(region):
    """vLLM's calling sequence over the C example tier: requests store,
    later ones get the chunks back by promotion, byte-exact, every job
    reported exactly once."""
    tier = make_tier(region, tier={'type': 'example'})
    manager = TieringManager(region.n_chunks, [tier])
    engine = Engine(manager, region)
    engine.run([(f'w{i}', list(range(8 * i, 8 * i + 8))) for i in range(6)])
    engine.run([(f'x{i}', list(range(1000 + 8 * i, 1000 + 8 * i + 8))) for i in range(8)])
    engine.run([(f'r{i}', list(range(8 * i, 8 * i + 8))) for i in range(6)])
    assert engine.loaded_chunks > 0 and engine.deferred > 0       # promotions happened
    assert manager.failed_promotions == manager.failed_cascades == 0
    assert not manager.tracker.jobs
    assert len(manager.tracker.reported) == manager.tracker.next_id
    manager.shutdown()


def test_vllm_stats_from_the_kvtier_tier(region, tmp_path):
    """The fs tier's own metrics reach vLLM in vLLM's stats container, by
    name, label and kind, once; vLLM's aggregate() and reduce() take them."""
    tier = make_tier(region, tier={'type': 'fs', 'root': str(tmp_path)})
    ctx = T.ReqContext(req_id='stats')
    tier.on_new_request(ctx)
    fill(region, 3, 3)
    fill(region, 4, 4)
    tier.submit_store(T.transfer_job(0, [chunk_key(3), chunk_key(4)], numpy.array([3, 4]),
                                     False, ctx))
    poll_until_done(tier, 1)
    stats = tier.get_stats()
    assert type(stats) is T.OffloadingConnectorStats
    written, stored, used = (_fs_metric(n) for n in ('written_bytes', 'stored_chunks',
                                                     'used_bytes'))
    types, data = stats.data['types'], stats.data['data']
    assert data[written] == {('fs',): 2 * ROW}
    assert data[stored] == {('fs',): 2}
    # Kinds come from the tier's metric definitions: a gauge is set, not
    # summed, when stats are aggregated.
    assert types[used] == 'gauge' and types[stored] == 'counter'
    assert data[used][('fs',)] >= 2 * ROW
    flat = stats.reduce()
    assert flat[f"{written}:('fs',)"] == 2 * ROW
    json.dumps(flat)
    # The manager's own stats object aggregates the tier's, twice.
    total = T.OffloadingConnectorStats()
    total.set_gauge('vllm:kv_offload_tiering_active_cascade_jobs', 0, ('1:fs',))
    total.aggregate(stats).aggregate(stats)
    assert total.data['data'][written] == {('fs',): 4 * ROW}
    assert total.data['data'][used] == data[used]
    # Every name is declared, with the library's documentation and labels.
    definitions = kvv.KvtierSecondaryTier.build_metric_definitions(tier.vllm_entry)
    for name in types:
        assert name in definitions, name
        assert definitions[name].labelnames == ('tier',)
        assert definitions[name].documentation
    assert isinstance(definitions[used], T.OffloadingGaugeMetadata)
    assert isinstance(definitions[written], T.OffloadingCounterMetadata)
    # Return and reset: the counters start again.
    again = tier.get_stats()
    assert again is None or again.data['data'].get(written, {('fs',): 0}) == {('fs',): 0}
    tier.on_request_finished(ctx)
    tier.shutdown()


def _fs_metric(suffix):
    """The fs tier's metric whose name ends with suffix, as the library
    names it (read from the library, not spelled here)."""
    metrics = kvv._tier_class_metrics(registry, 'fs')
    [name] = [n for n in metrics.list_names() if n.endswith('fs_' + suffix)]
    return name


def test_metric_definitions_are_the_librarys(tmp_path):
    """build_metric_definitions() declares exactly what the library defines
    for the tier class: names, kinds, documentation, label names, buckets;
    for a tier given inline or as a section of a kvtier configuration file,
    without creating a tier (no directory appears)."""
    root = tmp_path / 'never-created'
    definitions = kvv.KvtierSecondaryTier.build_metric_definitions(
        {'type': 'KvtierSecondaryTier', 'module_path': 'kvtier.vllm',
         'tier': {'type': 'fs', 'root': str(root)}})
    assert not root.exists()
    metrics = kvv._tier_class_metrics(registry, 'fs')
    assert sorted(definitions) == sorted(metrics.list_names())
    for name, metadata in definitions.items():
        assert metadata.documentation == metrics.get_documentation(name)
        assert metadata.labelnames == tuple(metrics.get_label_names(name))
        kind = metrics.get_kind(name)
        assert isinstance(metadata, {Kv.MetricKind.COUNTER: T.OffloadingCounterMetadata,
                                     Kv.MetricKind.GAUGE: T.OffloadingGaugeMetadata,
                                     Kv.MetricKind.HISTOGRAM: T.OffloadingHistogramMetadata}[kind])
    conf = tmp_path / 'kvtier.conf'
    conf.write_text(f'[tier disk]\ntype = fs\nroot = {root}\n')
    assert kvv.KvtierSecondaryTier.build_metric_definitions(
        {'config_file': str(conf), 'tier_name': 'disk'}) == definitions
    # a vLLM that names its tiers passes the entry's name too
    assert kvv.KvtierSecondaryTier.build_metric_definitions(
        {'config_file': str(conf), 'tier_name': 'disk'}, 'disk') == definitions
    with pytest.raises(ValueError, match='either as "tier"'):
        kvv.KvtierSecondaryTier.build_metric_definitions({})


def test_histograms_keep_their_buckets_and_observations(region):
    """A tier's own histogram is declared with the library's buckets and
    reaches vLLM as observations that give the same count and sum."""
    tier = make_tier(region, tier={'type': 'histogram-tier'},
                     registry=histogram_registry)
    definitions = kvv.KvtierSecondaryTier.build_metric_definitions(tier.vllm_entry)
    assert definitions[HISTOGRAM].buckets == HISTOGRAM_BUCKETS
    assert definitions[HISTOGRAM].labelnames == ('tier', 'op')
    tier.kvtier_tier.observations = [0.002, 0.04, 3.0]
    stats = tier.get_stats()
    assert stats.data['types'][HISTOGRAM] == 'histogram'
    [values] = stats.data['data'][HISTOGRAM].values()
    assert list(stats.data['data'][HISTOGRAM]) == [('hist', 'read')]
    assert len(values) == 3 and sum(values) == pytest.approx(3.042)
    # each in its own bucket, as kvtier counted them: (0.001, 0.01],
    # (0.01, 0.1], above 1.0
    assert sorted(bisect.bisect_left(HISTOGRAM_BUCKETS, v) for v in values) == [1, 2, 4]
    flat = stats.reduce()
    assert flat[f"{HISTOGRAM}:('hist', 'read')_count"] == 3
    tier.shutdown()


HISTOGRAM = 'kvtier_test_read_seconds'
HISTOGRAM_BUCKETS = (0.001, 0.01, 0.1, 1.0)


class HistogramTier(ScriptedTier):
    """A kvtier tier with a histogram of its own."""

    __gtype_name__ = 'KvtierTestVllmHistogramTier'
    observations = ()
    seen = None             # a Kv.Stats that keeps what every call returned

    def do_register_metrics(self, metrics):
        metrics.add_histogram(HISTOGRAM, 'Test read time', ['tier', 'op'],
                              list(HISTOGRAM_BUCKETS))
        return True

    def do_get_stats(self):
        stats = Kv.Stats.new()
        for value in self.observations:
            stats.observe_histogram(HISTOGRAM, value, ['hist', 'read'])
        self.observations = ()
        if self.seen is not None:
            self.seen.aggregate(stats)
        return stats


histogram_registry = Kv.TierRegistry.new()
histogram_registry.register_tier_type('histogram-tier', HistogramTier.__gtype__)


def test_serve_external_requests_through_vllms_parent(region):
    """A kvtier tier serving a peer's fetch during serve_external_requests
    sees vLLM's parent as a Kv.ParentManager: it looks keys up (primary
    first), pins the ready ones with create_store_job, sends their bytes
    and reports the job, which vLLM's manager then unpins."""
    tier = make_tier(region, tier={'type': 'scripted'})
    scripted = tier.kvtier_tier
    manager = TieringManager(region.n_chunks, [tier])
    ctx = T.ReqContext('local')
    manager.on_new_request(ctx)
    prepared = manager.prepare_store([chunk_key(c) for c in (1, 2)], ctx)
    for chunk_id, c in zip(prepared[1], (1, 2)):
        fill(region, chunk_id, c)
    manager.complete_store(prepared[0], ctx)
    manager.on_request_finished(ctx)
    manager.drain()

    scripted.peer_fetches.append(
        ('peer-1', [Kv.Key.new_from_offload_key(chunk_key(c)) for c in (1, 2, 3)]))
    manager.on_schedule_end(T.ScheduleEndContext([], []))
    assert scripted.sent == {chunk_key(c): chunk_bytes(c, ROW) for c in (1, 2)}
    [(_, _, job_id, req_id, n)] = [c for c in manager.calls if c[1] == 'create_store_job']
    assert (req_id, n) == ('peer-1', 2)
    assert manager.primary.ref[chunk_key(1)] == 1           # pinned until reported
    manager.on_schedule_end(T.ScheduleEndContext([], []))
    assert manager.primary.ref[chunk_key(1)] == 0
    assert job_id in manager.tracker.reported
    assert 'peer-1' not in manager.requests
    manager.shutdown()


OLDER_VLLM = """
import dataclasses, abc

@dataclasses.dataclass
class JobMetadata:                          # before the TransferJob rename
    job_id: int
    keys: object
    block_ids: object
    is_promotion: bool
    req_context: object

@dataclasses.dataclass
class JobResult:                            # before transfer_bytes
    job_id: int
    success: bool
    successful_keys: object = None
    transfer_time: object = None

class SecondaryTierManager(SecondaryTierManager):   # before the detector
    def __init__(self, offloading_spec, primary_kv_view, tier_type):
        super().__init__(offloading_spec, primary_kv_view, tier_type)
"""

OLDER_VLLM_BASE = """
import dataclasses, enum

class OffloadPolicy(enum.Enum):             # before the CHUNK_LEVEL rename
    BLOCK_LEVEL = 'block_level'
    REQUEST_LEVEL = 'request_level'

@dataclasses.dataclass
class RequestOffloadingContext:
    policy: OffloadPolicy = OffloadPolicy.BLOCK_LEVEL
"""


@pytest.mark.parametrize('version', ['current', 'older'])
def test_with_vllm_importable_the_adapter_is_a_vllm_tier(tmp_path, version):
    """When vLLM imports, the adapter subclasses vLLM's own base class and
    speaks vLLM's types, its stats container included. A stand-in vllm
    package (fresh classes, not kvtier's) is put first on the path of a
    child interpreter; the older one has vLLM's earlier names (JobMetadata
    with block_ids, no transfer_bytes, no back-pressure detector)."""
    import subprocess
    import sys

    stand_ins = os.path.abspath(os.path.join(os.path.dirname(kvv.__file__), '_vllm_types.py'))
    package = tmp_path / 'vllm' / 'v1' / 'kv_offload'
    (package / 'tiering').mkdir(parents=True)
    offloading = tmp_path / 'vllm' / 'distributed' / 'kv_transfer' / 'kv_connector' / 'v1' / \
        'offloading'
    offloading.mkdir(parents=True)
    for directory in (tmp_path / 'vllm', tmp_path / 'vllm' / 'v1', package, package / 'tiering',
                      *offloading.parents[:4], offloading):
        (directory / '__init__.py').write_text('')
    loader = ('import importlib.util\n'
              f'spec = importlib.util.spec_from_file_location("vllm_types_{{}}", {stand_ins!r})\n'
              'module = importlib.util.module_from_spec(spec)\n'
              'spec.loader.exec_module(module)\n'
              'globals().update({{n: getattr(module, n) for n in module.__all__ if n in NAMES}})\n')
    base_names = ['LookupResult', 'Medium', 'Locality', 'OffloadPolicy', 'ReqContext',
                  'RequestOffloadingContext', 'ScheduleEndContext', 'OffloadingEvent',
                  'TierFilter', 'TierMatcher', 'make_offload_key', 'OffloadingMetricMetadata',
                  'OffloadingCounterMetadata', 'OffloadingGaugeMetadata',
                  'OffloadingHistogramMetadata']
    tiering_names = ['SecondaryTierManager', 'TransferJob', 'JobResult', 'ParentManager']
    if version == 'older':
        tiering_names.remove('TransferJob')
        base_names.remove('OffloadPolicy')
        base_names.remove('RequestOffloadingContext')
    (package / 'base.py').write_text(f'NAMES = {base_names!r}\n' + loader.format('base') +
                                     (OLDER_VLLM_BASE if version == 'older' else ''))
    (package / 'tiering' / 'base.py').write_text(
        f'NAMES = {tiering_names!r}\n' + loader.format('tiering') +
        (OLDER_VLLM if version == 'older' else ''))
    (offloading / 'metrics.py').write_text("NAMES = ['OffloadingConnectorStats']\n" +
                                           loader.format('metrics'))
    region_path = f'/dev/shm/kvtier-test-vllm-real-{os.getpid()}-{version}.mmap'
    script = f"""
import sys
sys.path.insert(0, {str(tmp_path)!r})
sys.path.insert(1, {os.path.dirname(__file__)!r})
import numpy
import vllm.v1.kv_offload.base as vbase
import vllm.v1.kv_offload.tiering.base as vtiering
import vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics as vmetrics
import kvtier._vllm_types as stand_ins
import kvtier.vllm as kvv
from vllm_engine import SharedRegion, chunk_key
assert kvv.HAVE_VLLM
assert issubclass(kvv.KvtierSecondaryTier, vtiering.SecondaryTierManager)
assert not issubclass(kvv.KvtierSecondaryTier, stand_ins.SecondaryTierManager)
assert kvv.types.LookupResult is vbase.LookupResult is not stand_ins.LookupResult
assert kvv.types.JobResult is vtiering.JobResult
assert kvv.types.OffloadingConnectorStats is vmetrics.OffloadingConnectorStats
older = {version == 'older'!r}
assert kvv.types.TransferJob is (vtiering.JobMetadata if older else vtiering.TransferJob)
assert kvv.types.job_chunk_field == ('block_ids' if older else 'chunk_ids')
region = SharedRegion({region_path!r}, 4, 8192)
try:
    tier = kvv.KvtierSecondaryTier(None, region.create_kv_memoryview(), 'KvtierSecondaryTier',
                                   None, tier={{'type': 'example'}})
    ctx = vbase.ReqContext(req_id='r')
    assert type(tier.lookup(chunk_key(1), ctx)) is vbase.LookupResult
    assert tier.lookup(chunk_key(1), ctx) is vbase.LookupResult.MISS
    assert type(tier.on_new_request(ctx)) is vbase.RequestOffloadingContext
    # vLLM's chunk-level policy, under whichever name this vLLM gives it
    assert tier.on_new_request(ctx).policy is vbase.RequestOffloadingContext().policy
    assert tier.on_new_request(ctx).policy.name == ('BLOCK_LEVEL' if older else 'CHUNK_LEVEL')
    assert tier.medium is vbase.Medium.CPU
    region.array()[2] = 7
    tier.submit_store(kvv.types.transfer_job(5, [chunk_key(1)], numpy.array([2]), False, ctx))
    tier.drain_jobs()
    [result] = tier.get_finished_jobs()
    assert type(result) is vtiering.JobResult and (result.job_id, result.success) == (5, True)
    assert hasattr(result, 'transfer_bytes') != older
    stats = tier.get_stats()
    assert stats is None or type(stats) is vmetrics.OffloadingConnectorStats
    definitions = kvv.KvtierSecondaryTier.build_metric_definitions({{'tier': {{'type': 'example'}}}})
    assert definitions and all(isinstance(d, (vbase.OffloadingCounterMetadata,
                                              vbase.OffloadingGaugeMetadata))
                               for d in definitions.values())
    assert isinstance(definitions['kvtier_tier_breaker_open'], vbase.OffloadingGaugeMetadata)
    tier.on_request_finished(ctx)
    tier.shutdown()
finally:
    region.cleanup()
print('vllm-base-ok')
"""
    child = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                           timeout=60)
    assert child.returncode == 0, child.stderr
    assert 'vllm-base-ok' in child.stdout


def test_tier_modules_register_python_tiers_before_the_tier_is_built(region, tmp_path,
                                                                   monkeypatch):
    """"tier_modules" are imported first, so a vLLM configuration can name
    a Python tier that a module registers on the default registry."""
    (tmp_path / 'kvtier_test_vllm_tiers.py').write_text(
        'import kvtier\n'
        'from vllm_tiers import ScriptedTier\n'
        '\n'
        '@kvtier.register_tier("vllm-test-module-tier")\n'
        'class ModuleTier(ScriptedTier):\n'
        '    __gtype_name__ = "KvtierTestVllmModuleTier"\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(GLib.Error, match='vllm-test-module-tier'):
        kvv.KvtierSecondaryTier(None, region.create_kv_memoryview(), 't', None,
                                tier={'type': 'vllm-test-module-tier'})
    tier = create_secondary_tier({
        'type': 'KvtierSecondaryTier', 'module_path': 'kvtier.vllm',
        'tier_modules': ['kvtier_test_vllm_tiers'],
        'tier': {'type': 'vllm-test-module-tier'},
    }, region.create_kv_memoryview())
    assert type(tier.kvtier_tier).__name__ == 'ModuleTier'
    assert tier.kvtier_tier.get_tier_type() == 'vllm-test-module-tier'
    tier.shutdown()


def test_lookup_answers_map_to_vllms(region):
    """HIT, MISS and RETRY come back as vLLM's members; vLLM's manager
    turns a secondary HIT into a promotion (HIT_PENDING) and keeps RETRY
    unless a later tier has the chunk."""
    tier = make_tier(region, tier={'type': 'scripted', 'medium': 'cpu'})
    scripted = tier.kvtier_tier
    scripted.store[chunk_key(1)] = chunk_bytes(1, ROW)
    scripted.unknown.add(chunk_key(2))
    ctx = T.ReqContext('answers')
    assert [tier.lookup(chunk_key(c), ctx) for c in (1, 2, 3)] == \
        [T.LookupResult.HIT, T.LookupResult.RETRY, T.LookupResult.MISS]
    manager = TieringManager(region.n_chunks, [tier])
    other = T.ReqContext('manager')
    manager.on_new_request(other)
    assert [manager.lookup(chunk_key(c), other) for c in (1, 2, 3)] == \
        [T.LookupResult.HIT_PENDING, T.LookupResult.RETRY, T.LookupResult.MISS]
    # A load filter that excludes the tier's medium (the section's, read
    # back from the kvtier tier): vLLM's manager does not ask the tier.
    storage_only = T.ReqContext(
        req_id='storage-only',
        load_tier_filter=T.TierFilter((T.TierMatcher(medium=T.Medium.STORAGE),)))
    manager.on_new_request(storage_only)
    assert tier.medium == T.Medium.CPU
    n_lookups = len(scripted.requests)
    assert manager.lookup(chunk_key(1), storage_only) == T.LookupResult.HIT_PENDING  # primary
    assert manager.lookup(chunk_key(5), storage_only) == T.LookupResult.MISS
    assert len(scripted.requests) == n_lookups
    tier.on_request_finished(ctx)
    for c in (other, storage_only):
        manager.on_request_finished(c)
    manager.on_schedule_end(T.ScheduleEndContext([], []))
    manager.drain()
    manager.shutdown()
