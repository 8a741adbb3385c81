# SPDX-License-Identifier: LGPL-2.1-or-later
"""kvtier tiers driven by vLLM's own TieringOffloadingManager, and vLLM's
own example tier under kvtier: run when KVTIER_VLLM_SOURCE names a vLLM
source tree (see doc/vllm.md, "Testing against vLLM"), skipped otherwise.

Each step goes as vLLM's engine goes: lookups, stores, on_schedule_end(),
then get_stats() (vLLM's aggregate() of every tier's stats), reduce(), and
an observer that refuses names the tiers did not declare."""

import os

import pytest

from conftest import VLLM_SOURCE

pytestmark = pytest.mark.skipif(
    not VLLM_SOURCE, reason='KVTIER_VLLM_SOURCE does not name a vLLM source tree; '
                            'these tests need vLLM\'s own tiering manager')

if VLLM_SOURCE:
    import numpy

    import kvtier.vllm as kvv
    from gi.repository import GLib, Kv
    from kvtier.vllm import types as T
    from vllm.v1.kv_offload.cpu.shared_offload_region import SharedOffloadRegion
    from vllm.v1.kv_offload.tiering import manager as vmanager
    from vllm_engine import PromObserver, chunk_bytes, chunk_key
    from vllm_tiers import PullTier

ROW = 8192
N_CHUNKS = 8


class Engine:
    """vLLM's real manager over vLLM's real region and primary tier."""

    def __init__(self, tiers, name):
        self.region = SharedOffloadRegion(f'kvtier-test-{os.getpid()}-{name}', N_CHUNKS,
                                          None, ROW, ROW)
        self.primary = vmanager.CPUPrimaryTierOffloadingManager(N_CHUNKS, self.region)
        self.view = self.primary.get_kv_memoryview()
        self.tiers = [make(self.view) for make in tiers]
        self.manager = vmanager.TieringOffloadingManager(self.primary, self.tiers)
        definitions = {}
        for tier in self.tiers:
            definitions.update(type(tier).build_metric_definitions(tier.vllm_entry))
        # The manager's own vllm:* families are vLLM's to declare.
        self.observer = PromObserver(definitions, undeclared_prefix='vllm:')
        self.scrapes = []

    def rows(self):
        return numpy.frombuffer(self.view, dtype=numpy.uint8).reshape(N_CHUNKS, ROW)

    def step(self):
        self.manager.on_schedule_end(T.ScheduleEndContext([], []))
        stats = self.manager.get_stats()
        if stats is not None:
            self.scrapes.append(stats.reduce())
            self.observer.observe(stats.data)

    def settle(self):
        for tier in self.tiers:
            tier.drain_jobs()
        self.step()
        self.step()

    def store(self, ctx, chunks):
        keys = [chunk_key(c) for c in chunks]
        out = self.manager.prepare_store(keys, ctx)
        assert out is not None
        slots = kvv._job_chunk_ids(out.store_spec) if hasattr(out.store_spec, 'chunk_ids') \
            else out.store_spec.block_ids
        by_key = dict(zip(keys, chunks))
        rows = self.rows()
        for key, slot in zip(out.keys_to_store, slots):
            rows[int(slot)] = numpy.frombuffer(chunk_bytes(by_key[key], ROW), dtype=numpy.uint8)
        self.manager.complete_store(out.keys_to_store, ctx)

    def shutdown(self):
        self.manager.shutdown()


def kvtier_tier(entry):
    def make(view):
        tier = kvv.KvtierSecondaryTier(None, view, 'KvtierSecondaryTier', None, **entry)
        tier.vllm_entry = entry
        return tier
    return make


def test_data_path_stats_and_failed_loads_through_vllms_manager(tmp_path):
    """fs tier under vLLM's manager: stored chunks leave the primary, come
    back byte-exact, every job reported once (vLLM asserts it); a corrupted
    file is a failed load and a MISS; every step's stats aggregate into
    vLLM's and every name is declared."""
    e = Engine([kvtier_tier({'tier': {'type': 'fs', 'root': str(tmp_path)}})], 'data')
    try:
        writer = T.ReqContext(req_id='writer')
        e.manager.on_new_request(writer)
        e.store(writer, range(4))
        e.manager.on_request_finished(writer)
        e.settle()
        filler = T.ReqContext(req_id='filler')
        e.manager.on_new_request(filler)
        e.store(filler, range(100, 100 + N_CHUNKS))      # evicts 0..3
        e.manager.on_request_finished(filler)
        e.settle()
        reader = T.ReqContext(req_id='reader')
        e.manager.on_new_request(reader)
        keys = [chunk_key(c) for c in range(4)]
        assert [e.manager.lookup(k, reader) for k in keys] == [T.LookupResult.HIT_PENDING] * 4
        e.step()                                        # submits the promotion
        e.settle()
        assert [e.manager.lookup(k, reader) for k in keys] == [T.LookupResult.HIT] * 4
        spec = e.manager.prepare_load(keys, reader)
        slots = getattr(spec, 'chunk_ids', None)
        slots = spec.block_ids if slots is None else slots
        rows = e.rows()
        for c, slot in enumerate(slots):
            assert rows[int(slot)].tobytes() == chunk_bytes(c, ROW)
        e.manager.complete_load(keys, reader)
        e.manager.on_request_finished(reader)
        # Failed loads: a corrupted chunk file is a MISS after the load fails.
        filler2 = T.ReqContext(req_id='filler2')
        e.manager.on_new_request(filler2)
        e.store(filler2, range(200, 200 + N_CHUNKS))
        e.manager.on_request_finished(filler2)
        e.settle()
        for directory, _, names in os.walk(tmp_path):
            for name in names:
                path = os.path.join(directory, name)
                if os.path.getsize(path) >= ROW:
                    with open(path, 'r+b') as f:
                        f.seek(100)
                        f.write(b'\xff' * 16)
        bad = T.ReqContext(req_id='bad')
        e.manager.on_new_request(bad)
        assert [e.manager.lookup(k, bad) for k in keys] == [T.LookupResult.HIT_PENDING] * 4
        e.step()
        e.settle()
        # the load failed (checksums): the slots are freed, and the tier's
        # negative cache keeps this request from asking again
        assert [e.manager.lookup(k, bad) for k in keys] == [T.LookupResult.MISS] * 4
        assert any(v for scrape in e.scrapes for k, v in scrape.items()
                   if k.startswith(T.TieringOffloadingMetrics.PROMOTION_JOB_FAILURES))
        e.manager.on_request_finished(bad)
        e.settle()
        assert not e.manager._jobs
        # The stats went through vLLM's aggregate() and reduce() every step.
        assert e.observer.n_observed > 0
        assert any(k.startswith('kvtier') for scrape in e.scrapes for k in scrape)
    finally:
        e.shutdown()


def test_unlinked_region_under_vllms_manager(tmp_path):
    """vLLM's region with its /dev/shm name removed after mapping, as newer
    vLLM does: the adapter still stores and promotes through it."""
    path = f'/dev/shm/vllm_offload_kvtier-test-{os.getpid()}-unlinked.mmap'
    e = Engine([lambda view: (os.unlink(path), kvtier_tier(
        {'tier': {'type': 'fs', 'root': str(tmp_path)}, 'primary_file': path})(view))[1]],
        'unlinked')
    try:
        assert kvv.region_of_view(e.view).path is None
        ctx = T.ReqContext(req_id='w')
        e.manager.on_new_request(ctx)
        e.store(ctx, range(3))
        e.manager.on_request_finished(ctx)
        e.settle()
        assert not e.manager._jobs
        assert e.tiers[0].kvtier_tier.props.root == str(tmp_path)
    finally:
        e.region._creator = False           # its name is already gone
        e.shutdown()


def test_reset_cache_and_shutdown_with_a_pull_model_tier():
    """A kvtier tier that reports only through get_finished_jobs(): vLLM's
    reset_cache() (drain_jobs, then every job must be reported) and
    shutdown() return."""
    import threading

    registry = Kv.TierRegistry.new()
    registry.register_tier_type('pull', PullTier.__gtype__)
    e = Engine([kvtier_tier({'tier': {'type': 'pull'}, 'registry': registry})], 'pull')
    try:
        ctx = T.ReqContext(req_id='p')
        e.manager.on_new_request(ctx)
        e.store(ctx, range(2))
        e.manager.on_request_finished(ctx)
        done = threading.Event()
        thread = threading.Thread(target=lambda: (e.manager.reset_cache(), done.set()),
                                  daemon=True)
        thread.start()
        assert done.wait(20), 'vLLM\'s reset_cache() did not return with a pull-model tier'
        assert not e.manager._jobs
    finally:
        e.shutdown()


def test_wrap_tier_of_vllms_example_tier():
    """vLLM's own example tier under a kvtier manager (wrap_tier)."""
    from vllm.v1.kv_offload.tiering.example.manager import ExampleSecondaryTierManager
    buffer = Kv.HostBuffer.new(4, ROW)
    manager = Kv.TieringManager.new(Kv.PrimaryTier.new(buffer, None, True))
    vtier = ExampleSecondaryTierManager(None, kvv.primary_kv_view(buffer), 'example')
    tier = kvv.wrap_tier(vtier, buffer)
    manager.add_tier(tier)
    req = Kv.Request.new('r', None)
    manager.on_new_request(req)
    keys = [Kv.Key.new_from_offload_key(chunk_key(c)) for c in range(2)]
    prepared = manager.prepare_store(keys, req)
    manager.complete_store(prepared.get_keys_to_store(), req, True)
    tier.drain_jobs()
    manager.on_schedule_end(Kv.ScheduleEnd.new(None, None))
    assert sorted(vtier.blocks) == sorted(chunk_key(c) for c in range(2))
    # The store finished inside the first step; a step takes results at its
    # first entry point, so the next step reports it.
    assert manager.get_n_active_jobs() == 1
    manager.on_schedule_end(Kv.ScheduleEnd.new(None, None))
    assert manager.get_n_active_jobs() == 0
    manager.on_request_finished(req)
    manager.reset_cache()
    manager.shutdown()
