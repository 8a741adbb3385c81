# SPDX-License-Identifier: LGPL-2.1-or-later
"""kvtier.vllm.KvtierSecondaryTier: kvtier tiers driven as vLLM drives a
secondary tier (vllm_engine.py re-implements vLLM's side)."""

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
    return kvv.KvtierSecondaryTier(None, region.create_kv_memoryview(), 'KvtierSecondaryTier',
                                   None, registry=registry, **kwargs)


def fill(region, chunk_id, chunk):
    region.array()[chunk_id] = numpy.frombuffer(chunk_bytes(chunk, ROW), dtype=numpy.uint8)


def poll_until_done(tier, n):
    """Collects n results; drain_jobs() blocks (no spinning) until the
    kvtier tier reported every job."""
    tier.drain_jobs()
    results = tier.get_finished_jobs()
    assert len(results) == n, results
    return results


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


def test_a_view_not_at_the_start_of_the_region_is_refused(region):
    rows = region.create_kv_memoryview()
    view = memoryview(region.mmap)[ROW:].cast('B', (region.n_chunks - 1, ROW))
    with pytest.raises(ValueError, match=f'starts {ROW} bytes into'):
        kvv.KvtierSecondaryTier(None, view, 't', None, tier={'type': 'example'})
    view.release()
    rows.release()


# ---- zero copy ---------------------------------------------------------------------

def _file_page(address):
    """(device, inode, file offset) of the byte at address."""
    _, device, inode, offset = kvv._mapping_of(address)
    return device, inode, offset


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
    tier.submit_store(T.TransferJob(1, keys, numpy.array([0, 1, 17]), False, ctx))
    [result] = poll_until_done(tier, 1)
    assert (result.job_id, result.success, result.transfer_bytes) == (1, True, 3 * ROW)
    [event] = tier.take_events()
    assert event.keys == keys and event.medium == T.Medium.STORAGE and not event.removed

    # Promote chunk 17's bytes into free rows 40..42; vLLM reads them in place.
    region.array()[40:43] = 0
    assert [tier.lookup(k, ctx) for k in keys] == [T.LookupResult.HIT] * 3
    tier.submit_load(T.TransferJob(2, keys, numpy.array([40, 41, 42], dtype=numpy.int32),
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
    assert result.transfer_bytes == 2 * ROW
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
    tier.submit_load(T.TransferJob(99, keys[:2], numpy.array([50, 51], dtype=numpy.int32),
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
    tier.submit_store(T.TransferJob(7, [chunk_key(5)], numpy.array([5]), False, ctx))
    assert tier.has_pending_work()
    assert [(r.job_id, r.success) for r in tier.get_finished_jobs()] == [(7, False)]
    assert tier.get_finished_jobs() == []
    assert not tier.has_pending_work()
    # The job id is free again: vLLM never reuses one, but a refusal must
    # not leave it "in flight".
    tier.kvtier_tier.refuse = False
    tier.submit_store(T.TransferJob(7, [chunk_key(5)], numpy.array([5]), False, ctx))
    assert [(r.job_id, r.success) for r in poll_until_done(tier, 1)] == [(7, True)]
    with pytest.raises(ValueError, match='already in flight'):
        tier.kvtier_tier.hold = True
        tier.submit_store(T.TransferJob(8, [chunk_key(5)], numpy.array([5]), False, ctx))
        tier.submit_store(T.TransferJob(8, [chunk_key(5)], numpy.array([5]), False, ctx))
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
            tier.submit_store(T.TransferJob(job_id, [chunk_key(c) for c in chunks],
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
        tier.submit_store(T.TransferJob(100, [chunk_key(0)], numpy.array([0]), False, ctx))
        assert [(r.job_id, r.success) for r in tier.get_finished_jobs()] == [(100, False)]
        tier.shutdown()             # again: nothing happens


def test_request_context_and_tier_filter_reach_the_kvtier_tier(region):
    tier = make_tier(region, tier={'type': 'scripted'})
    scripted = tier.kvtier_tier
    only_storage = T.TierFilter((T.TierMatcher(medium=T.Medium.STORAGE),))
    ctx = T.ReqContext('filtered', {'kv_load_tiers': [{'medium': 'STORAGE'}],
                                    'max_load_tokens': 4096, 'note': None,
                                    'blob': b'\x00\x01', 'huge': 2 ** 70},
                       only_storage)
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
    """The fs tier's own metrics reach vLLM by name, label and kind, once."""
    tier = make_tier(region, tier={'type': 'fs', 'root': str(tmp_path)})
    ctx = T.ReqContext('stats')
    tier.on_new_request(ctx)
    fill(region, 3, 3)
    fill(region, 4, 4)
    tier.submit_store(T.TransferJob(0, [chunk_key(3), chunk_key(4)], numpy.array([3, 4]),
                                    False, ctx))
    poll_until_done(tier, 1)
    stats = tier.get_stats()
    data = stats.data['data']
    assert data['kvtier:fs_bytes_written'] == {('fs',): 2 * ROW}
    assert data['kvtier:fs_stored_chunks'] == {('fs',): 2}
    flat = stats.reduce()
    assert flat["kvtier:fs_bytes_written:('fs',)"] == 2 * ROW
    json.dumps(flat)
    # Kinds come from the tier's metric definitions: a gauge is set, not
    # summed, when stats are aggregated.
    assert 'kvtier:fs_used_bytes' in stats.gauges
    assert 'kvtier:fs_stored_chunks' not in stats.gauges
    used = data['kvtier:fs_used_bytes'][('fs',)]
    assert used >= 2 * ROW
    total = T.TieringStats()
    total.aggregate(stats)
    total.aggregate(stats)
    assert total.data['data']['kvtier:fs_bytes_written'] == {('fs',): 4 * ROW}
    assert total.data['data']['kvtier:fs_used_bytes'] == {('fs',): used}
    # Return and reset: the counters start again.
    again = tier.get_stats()
    assert again is None or 'kvtier:fs_bytes_written' not in again.data['data'] or \
        again.data['data']['kvtier:fs_bytes_written'] == {('fs',): 0}
    tier.on_request_finished(ctx)
    tier.shutdown()


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


def test_with_vllm_importable_the_adapter_is_a_vllm_tier(tmp_path):
    """When vLLM imports, the adapter subclasses vLLM's own base class and
    speaks vLLM's types. A stand-in vllm package (fresh classes, not
    kvtier's) is put first on the path of a child interpreter."""
    import subprocess
    import sys

    stand_ins = os.path.abspath(os.path.join(os.path.dirname(kvv.__file__), '_vllm_types.py'))
    package = tmp_path / 'vllm' / 'v1' / 'kv_offload'
    (package / 'tiering').mkdir(parents=True)
    for directory in (tmp_path / 'vllm', tmp_path / 'vllm' / 'v1', package):
        (directory / '__init__.py').write_text('')
    (package / 'tiering' / '__init__.py').write_text('')
    loader = ('import importlib.util\n'
              f'spec = importlib.util.spec_from_file_location("vllm_types_{{}}", {stand_ins!r})\n'
              'module = importlib.util.module_from_spec(spec)\n'
              'spec.loader.exec_module(module)\n'
              'globals().update({{n: getattr(module, n) for n in module.__all__ if n in NAMES}})\n')
    base_names = ['LookupResult', 'Medium', 'Locality', 'OffloadPolicy', 'ReqContext',
                  'RequestOffloadingContext', 'ScheduleEndContext', 'OffloadingEvent',
                  'TierFilter', 'TierMatcher', 'make_offload_key']
    tiering_names = ['SecondaryTierManager', 'TransferJob', 'JobResult']
    (package / 'base.py').write_text(f'NAMES = {base_names!r}\n' + loader.format('base'))
    (package / 'tiering' / 'base.py').write_text(f'NAMES = {tiering_names!r}\n' +
                                                 loader.format('tiering'))
    region_path = f'/dev/shm/kvtier-test-vllm-real-{os.getpid()}.mmap'
    script = f'''
import sys
sys.path.insert(0, {str(tmp_path)!r})
sys.path.insert(1, {os.path.dirname(__file__)!r})
import vllm.v1.kv_offload.base as vbase
import vllm.v1.kv_offload.tiering.base as vtiering
import kvtier._vllm_types as stand_ins
import kvtier.vllm as kvv
from vllm_engine import SharedRegion, chunk_key
assert kvv.HAVE_VLLM
assert issubclass(kvv.KvtierSecondaryTier, vtiering.SecondaryTierManager)
assert not issubclass(kvv.KvtierSecondaryTier, stand_ins.SecondaryTierManager)
assert kvv.types.LookupResult is vbase.LookupResult is not stand_ins.LookupResult
assert kvv.types.JobResult is vtiering.JobResult
assert kvv.types.TieringStats is stand_ins.TieringStats     # not a vLLM name
region = SharedRegion({region_path!r}, 4, 8192)
try:
    tier = kvv.KvtierSecondaryTier(None, region.create_kv_memoryview(), 'KvtierSecondaryTier',
                                   None, tier={{'type': 'example'}})
    ctx = vbase.ReqContext('r')
    assert type(tier.lookup(chunk_key(1), ctx)) is vbase.LookupResult
    assert tier.lookup(chunk_key(1), ctx) is vbase.LookupResult.MISS
    assert type(tier.on_new_request(ctx)) is vbase.RequestOffloadingContext
    assert tier.medium is vbase.Medium.CPU
    tier.shutdown()
finally:
    region.cleanup()
print('vllm-base-ok')
'''
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
    storage_only = T.ReqContext('storage-only', None,
                                T.TierFilter((T.TierMatcher(medium=T.Medium.STORAGE),)))
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
