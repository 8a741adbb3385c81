# SPDX-License-Identifier: LGPL-2.1-or-later
"""A small inference engine written in Python, driving a Kv.Connector over
the host device: its own block table, requests whose prompts are chunk
keys, and nothing below the block table but the connector's calls. The
engine never polls or sleeps blindly: it waits on the connector's wake-up
descriptor (or a GLib main loop with the connector's source)."""

import random
import select

import gi

gi.require_version('GLib', '2.0')
gi.require_version('Kv', '1')
from gi.repository import GLib, Kv  # noqa: E402

from conftest import SLOT_SIZE, make_key  # noqa: E402
from memtier import MemTier  # noqa: E402

N_LAYERS = 2
BLOCK_BYTES = SLOT_SIZE // N_LAYERS     # one block per chunk per layer


def piece(chunk, layer):
    """The bytes computing `chunk` writes into one layer of its block."""
    return random.Random(chunk * 1000 + layer).randbytes(BLOCK_BYTES)


class Request:
    def __init__(self, rid, chunks):
        self.kv = Kv.Request.new(rid, None)
        self.chunks = chunks
        self.blocks = []
        self.lookup = None
        self.transfers = set()   # job ids of its loads and stores in flight
        self.done = False


class MiniEngine:
    """Schedules waiting requests, one connector call per thing it does."""

    def __init__(self, connector, device, n_blocks):
        self.connector = connector
        self.device = device
        self.free = list(range(n_blocks))
        self.keys = {}
        self.waiting = []
        self.running = []
        self.jobs = {}          # job id -> (request, 'load' | 'store')
        self.log = []

    def key(self, chunk):
        if chunk not in self.keys:
            self.keys[chunk] = make_key(chunk)
        return self.keys[chunk]

    def submit(self, rid, chunks):
        request = Request(rid, chunks)
        self.connector.add_request(request.kv)
        self.waiting.append(request)
        return request

    def step(self):
        """One scheduler step: look up, load, compute, store, end the step."""
        new_ids = []
        for request in list(self.waiting):
            keys = [self.key(c) for c in request.chunks]
            # No prefix cache of our own: every chunk is looked up below.
            lookup = self.connector.lookup(request.kv, keys, 0)
            if not lookup.is_complete():
                self.log.append(('deferred', request.kv.get_id()))
                continue
            if len(self.free) < len(keys):
                break
            request.blocks = [self.free.pop() for _ in keys]
            ready = lookup.get_n_ready()
            job = self.connector.load(lookup, request.blocks[:ready])
            if job:
                self.jobs[job] = (request, 'load')
                request.transfers.add(job)
            self.connector.touch(request.kv, keys[:ready])
            for chunk, block in zip(request.chunks[ready:], request.blocks[ready:]):
                for layer in range(N_LAYERS):
                    self.device.write_block(layer, block, GLib.Bytes.new(piece(chunk, layer)))
            if ready < len(keys):
                try:
                    job = self.connector.store(request.kv, keys[ready:], request.blocks[ready:])
                except GLib.Error as e:
                    # No room in the primary tier: the chunks are not offloaded.
                    if not e.matches(Kv.tier_error_quark(), Kv.TierError.NO_SPACE):
                        raise
                    self.log.append(('refused', request.kv.get_id()))
                    job = 0
                if job:
                    self.jobs[job] = (request, 'store')
                    request.transfers.add(job)
            request.lookup = lookup
            self.waiting.remove(request)
            self.running.append(request)
            new_ids.append(request.kv.get_id())
        self.connector.end_step(new_ids, None)
        self.finish_ready()

    def take_finished(self):
        for result in self.connector.take_finished():
            request, kind = self.jobs.pop(result.get_job_id())
            assert result.get_success()
            request.transfers.discard(result.get_job_id())
            self.log.append((kind, request.kv.get_id(), result.get_transfer_bytes()))
        self.finish_ready()

    def finish_ready(self):
        for request in list(self.running):
            if not request.transfers:
                # The request ran; its blocks are free once nothing reads them.
                assert not self.connector.finish_request(request.kv)
                self.verify(request)
                self.free.extend(request.blocks)
                request.done = True
                self.running.remove(request)

    def verify(self, request):
        for chunk, block in zip(request.chunks, request.blocks):
            for layer in range(N_LAYERS):
                got = self.device.read_block(layer, block).get_data()
                assert got == piece(chunk, layer), \
                    'chunk %d in block %d layer %d' % (chunk, block, layer)

    def idle(self):
        return not self.waiting and not self.running and not self.connector.has_pending_work()

    def run(self, timeout=30.0):
        """Steps until everything is done, sleeping on the wake-up fd."""
        fd = self.connector.get_wakeup_fd()
        for _ in range(1000):
            self.step()
            if self.idle():
                return
            if self.running or self.connector.has_pending_work():
                readable, _, _ = select.select([fd], [], [], timeout)
                assert readable, 'nothing finished within %.0f s' % timeout
                self.take_finished()
        raise AssertionError('the engine did not finish')


def make_stack(n_slots, n_blocks, tier=True):
    buffer = Kv.HostBuffer.new(n_slots, SLOT_SIZE)
    manager = Kv.TieringManager.new(Kv.PrimaryTier.new(buffer, None, False))
    memtier = None
    if tier:
        memtier = MemTier(primary=buffer, medium=Kv.Medium.CPU, tier_type='pymem')
        manager.add_tier(memtier)
    device = Kv.HostDevice.new(buffer, n_blocks, BLOCK_BYTES, N_LAYERS, 1)
    connector = Kv.Connector.new(manager, device)
    return connector, device, memtier


def stat(stats, name, label=None):
    found, value = stats.lookup(name, [label] if label is not None else None)
    assert found, name
    return value


def test_engine_loop_round_trip():
    """Chunks computed by the engine come back bit-exact, from the primary
    tier or, once it evicted them, from the Python tier."""
    connector, device, memtier = make_stack(n_slots=4, n_blocks=6)
    engine = MiniEngine(connector, device, 6)
    try:
        engine.submit('a', [0, 1, 2])
        engine.run()
        engine.submit('b', [3, 4, 5])
        engine.run()
        assert [e[0] for e in engine.log].count('store') == 2
        assert 'refused' not in [e[0] for e in engine.log]
        for chunk in range(6):
            assert memtier.contains(engine.key(chunk))

        again = engine.submit('c', [0, 1, 2])
        engine.run()
        lookup = again.lookup
        assert lookup.get_n_hits() == 3 and lookup.get_n_ready() == 3
        from_tier = lookup.get_n_from(Kv.ChunkSource.TIER)
        from_primary = lookup.get_n_from(Kv.ChunkSource.PRIMARY)
        # 6 chunks in 4 slots: at least the two oldest came from the tier
        assert from_tier >= 2 and from_tier + from_primary == 3
        assert ('deferred', 'c') in engine.log      # the promotions took a step
        assert again.done

        stats = connector.get_stats()
        assert stat(stats, 'vllm:kv_offload_total_bytes', 'GPU_to_CPU') == 6 * SLOT_SIZE
        assert stat(stats, 'vllm:kv_offload_total_bytes', 'CPU_to_GPU') == 3 * SLOT_SIZE
        assert stat(stats, 'kvtier_connector_chunk_hits', '1:pymem') == from_tier
        assert stat(stats, 'kvtier_connector_chunk_hits', '0:primary') == from_primary
        assert stat(stats, 'kvtier_connector_computed_chunks') == 6
        # A chunk first found in the primary tier may be pushed out by this
        # request's own promotions and promoted too: it keeps its first source.
        assert stat(stats, 'vllm:kv_offload_tiering_read_bytes', '1:pymem') >= from_tier * SLOT_SIZE
        assert connector.get_n_manager_lookups() > 0
        registry = connector.create_metric_registry()
        assert registry.has_metric('vllm:kv_offload_total_bytes')
        assert registry.has_metric('kvtier_connector_chunk_hits')
    finally:
        connector.shutdown()


def test_wakeup_fd_readable_only_when_something_finished():
    connector, device, _ = make_stack(n_slots=4, n_blocks=4, tier=False)
    try:
        fd = connector.get_wakeup_fd()
        assert select.select([fd], [], [], 0)[0] == []
        request = Kv.Request.new('r', None)
        connector.add_request(request)
        job = connector.store(request, [make_key(1)], [0])
        assert job != 0
        assert connector.get_n_transfers(request) == 1
        assert select.select([fd], [], [], 30)[0] == [fd]
        results = connector.take_finished()
        assert [r.get_job_id() for r in results] == [job]
        assert [r.get_id() for r in connector.get_ready_requests()] == ['r']
        assert select.select([fd], [], [], 0)[0] == []
        assert connector.get_n_transfers(request) == 0
        assert not connector.finish_request(request)
    finally:
        connector.shutdown()


def test_main_loop_source():
    """An engine on a GLib main loop: the connector's source dispatches when
    a transfer finished, and the callback takes it."""
    connector, device, _ = make_stack(n_slots=4, n_blocks=4, tier=False)
    loop = GLib.MainLoop()
    taken = []

    def on_wakeup(*args):
        taken.extend(connector.take_finished())
        loop.quit()
        return GLib.SOURCE_CONTINUE

    source = connector.create_source()
    source.set_callback(on_wakeup)
    source.attach(None)
    timeout = GLib.timeout_add_seconds(30, loop.quit)
    try:
        request = Kv.Request.new('r', None)
        connector.add_request(request)
        job = connector.store(request, [make_key(2), make_key(3)], [1, 2])
        loop.run()
        assert [r.get_job_id() for r in taken] == [job]
        connector.finish_request(request)
    finally:
        GLib.source_remove(timeout)
        source.destroy()
        connector.shutdown()


def test_errors_release_pins():
    connector, device, _ = make_stack(n_slots=2, n_blocks=4, tier=False)
    primary = connector.get_manager().get_primary()
    try:
        request = Kv.Request.new('r', None)
        connector.add_request(request)
        keys = [make_key(5), make_key(6)]
        # a block the device does not have: nothing stays allocated
        try:
            connector.store(request, keys, [0, 99])
            raise AssertionError('expected an error')
        except GLib.Error as e:
            assert e.matches(Kv.tier_error_quark(), Kv.TierError.INVALID_ARGUMENT)
        assert primary.get_n_allocated() == 0
        connector.store(request, keys, [0, 1])
        connector.wait()
        connector.take_finished()
        connector.end_step(None, None)
        lookup = connector.lookup(request, keys, 0)
        assert lookup.get_n_ready() == 2
        try:
            connector.load(lookup, [2, 99])
            raise AssertionError('expected an error')
        except GLib.Error:
            pass
        assert primary.get_ref_count(keys[0]) == (True, 0)
        assert primary.get_ref_count(keys[1]) == (True, 0)
        connector.finish_request(request)
    finally:
        connector.shutdown()
