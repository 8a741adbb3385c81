# SPDX-License-Identifier: LGPL-2.1-or-later
"""End to end: an engine replaying vLLM's calling sequence over the
kvtier fs tier through kvtier.vllm, thousands of chunks, byte-exact, then a
second engine (a restarted vLLM, a new shared region) that gets every
chunk back from disk."""

import os

import pytest

pytest.importorskip('numpy')            # kvtier.vllm speaks numpy, as vLLM does

from vllm_engine import Engine, SharedRegion, TieringManager, create_secondary_tier  # noqa: E402

N_REQUESTS = 250
CHUNKS_PER_REQUEST = 8                  # 2000 chunks
ROW = 8192
N_SLOTS = 256


def requests():
    return [(f'req-{i}', list(range(CHUNKS_PER_REQUEST * i, CHUNKS_PER_REQUEST * (i + 1))))
            for i in range(N_REQUESTS)]


def run_engine(root, name):
    region = SharedRegion(f'/dev/shm/kvtier-test-e2e-{os.getpid()}-{name}.mmap', N_SLOTS, ROW)
    tier = create_secondary_tier({
        'type': 'KvtierSecondaryTier', 'module_path': 'kvtier.vllm',
        'tier': {'type': 'fs', 'root': str(root)},
    }, region.create_kv_memoryview())
    manager = TieringManager(N_SLOTS, [tier])
    engine = Engine(manager, region)
    try:
        engine.run(requests(), per_step=8)
        manager.drain()
        assert not manager.tracker.jobs
        assert len(manager.tracker.reported) == manager.tracker.next_id
        assert manager.failed_promotions == manager.failed_cascades == 0
        return engine, manager
    finally:
        manager.shutdown()
        del tier, manager.tiers[:]
        region.cleanup()


def test_two_thousand_chunks_round_trip_through_fs(tmp_path):
    first, manager = run_engine(tmp_path, 'first')
    n_chunks = N_REQUESTS * CHUNKS_PER_REQUEST
    assert first.computed_chunks + first.store_skipped == n_chunks
    assert first.store_skipped == 0
    stores = [c for c in manager.calls if c[1] == 'submit_store']
    assert sum(c[4] for c in stores) == n_chunks

    # A restarted engine: nothing in its primary, everything on disk.
    second, manager = run_engine(tmp_path, 'second')
    assert second.computed_chunks == 0
    assert second.loaded_chunks == n_chunks      # each checked byte for byte
    loads = [c for c in manager.calls if c[1] == 'submit_load']
    assert sum(c[4] for c in loads) == n_chunks
