# SPDX-License-Identifier: LGPL-2.1-or-later
"""A kvtier tier in the pull model (results only through its
get_finished_jobs(), as vLLM's own tiers report) under vLLM's
reset_cache() and shutdown, through the adapter's drain_jobs()."""

import os
import threading

import pytest

pytest.importorskip('numpy')

from kvtier.vllm import types as T  # noqa: E402
from test_vllm_adapter import ROW, fill, make_tier  # noqa: E402
from vllm_engine import SharedRegion, TieringManager, chunk_key  # noqa: E402
from vllm_tiers import PullTier  # noqa: E402

import gi  # noqa: E402

gi.require_version('Kv', '1')
from gi.repository import Kv  # noqa: E402

registry = Kv.TierRegistry.new()
registry.register_tier_type('pull', PullTier.__gtype__)


def returns_within(seconds, call):
    """Runs call on a thread; whether it returned in time (a hang is a
    failure here, not a stuck suite)."""
    done = threading.Event()
    failure = []

    def run():
        try:
            call()
        except Exception as error:      # noqa: BLE001 - reported below
            failure.append(error)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    returned = done.wait(seconds)
    if failure:
        raise failure[0]
    return returned


def test_reset_cache_and_shutdown_with_a_pull_model_tier():
    region = SharedRegion(f'/dev/shm/kvtier-test-vllm-pull-{os.getpid()}.mmap', 16, ROW)
    try:
        tier = make_tier(region, tier={'type': 'pull'}, registry=registry)
        manager = TieringManager(region.n_chunks, [tier])
        ctx = T.ReqContext(req_id='pull')
        manager.on_new_request(ctx)
        prepared = manager.prepare_store([chunk_key(c) for c in range(3)], ctx)
        for chunk_id, c in zip(prepared[1], range(3)):
            fill(region, chunk_id, c)
        manager.complete_store(prepared[0], ctx)
        manager.on_request_finished(ctx)
        assert manager.tracker.jobs                     # the cascade, finished but not polled
        assert returns_within(20, manager.reset_cache), \
            "vLLM's reset_cache() hung on a pull-model kvtier tier"
        assert not manager.tracker.jobs
        assert manager.failed_cascades == 0             # its success was kept
        assert sorted(tier.kvtier_tier.store) == sorted(chunk_key(c) for c in range(3))
        # once more with a job in flight at shutdown
        ctx = T.ReqContext(req_id='late')
        manager.on_new_request(ctx)
        prepared = manager.prepare_store([chunk_key(9)], ctx)
        fill(region, prepared[1][0], 9)
        manager.complete_store(prepared[0], ctx)
        manager.on_request_finished(ctx)
        assert returns_within(20, manager.shutdown)
        manager.process_finished_jobs()
        assert not manager.tracker.jobs and manager.failed_cascades == 0
    finally:
        region.cleanup()
