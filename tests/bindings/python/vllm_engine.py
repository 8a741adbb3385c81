# SPDX-License-Identifier: LGPL-2.1-or-later
"""vLLM's side of the secondary-tier interface, re-implemented for tests.

Written from the behaviour reference (vllm-tiering-behaviour.md §4.2, §4.5,
§5), not from vLLM's code: what vLLM does around a secondary tier, so that
kvtier.vllm's adapter can be driven as vLLM drives it, with vLLM absent.

- SharedRegion: the primary memory, a file under /dev/shm mapped with
  MAP_SHARED, handed to tiers as a 2-D (chunks, row bytes) memoryview;
- Primary: the CPU primary tier's slot states (-1 written, 0 ready, n
  pinned), LRU eviction of ready chunks;
- PromObserver: vLLM's Prometheus side of the offloading stats: the
  families declared by the tiers' build_metric_definitions(), and an
  observe() that refuses a name, kind or label count it was not told about;
- TieringManager: the tiering manager's calling sequence: completions
  consumed once per step at the first entry point, primary lookup before
  the tiers, promotions batched per (tier, request) and submitted at the
  step's end, cascades to every tier after a store, request finalization
  after the last cascade, every job id checked to be reported exactly once
  by the tier it went to; each step's stats taken from every tier,
  aggregated into the manager's own stats object, reduced and observed;
  reset_cache() draining every tier first;
- Engine: requests that look their chunks up, "compute" the missing ones
  into primary slots, store them and read the hits back, byte-exact.

The types (JobResult, TransferJob...) are kvtier.vllm.types: vLLM's own
classes where vLLM is installed, the stand-ins otherwise.
"""

import collections
import mmap
import os
import random

import numpy

from kvtier.vllm import types

T = types


class SharedRegion:
    """vLLM's SharedOffloadRegion: the first opener creates and sizes the
    file, every process maps all of it, the creator unlinks it."""

    def __init__(self, path, n_chunks, row_stride):
        self.path = path
        self.n_chunks = n_chunks
        self.row_stride = row_stride
        size = n_chunks * row_stride
        try:
            self.fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
            self.creator = True
            os.ftruncate(self.fd, size)
        except FileExistsError:
            self.fd = os.open(path, os.O_RDWR)
            self.creator = False
        self.mmap = mmap.mmap(self.fd, size, flags=mmap.MAP_SHARED,
                              prot=mmap.PROT_READ | mmap.PROT_WRITE)
        self._views = []

    def create_kv_memoryview(self):
        view = memoryview(self.mmap).cast('B', (self.n_chunks, self.row_stride))
        self._views.append(view)
        return view

    def array(self):
        """The region as a numpy array, no copy (what the GPU worker's DMA
        would write)."""
        return numpy.frombuffer(self.mmap, dtype=numpy.uint8).reshape(self.n_chunks, -1)

    def address(self, chunk):
        import ctypes
        return ctypes.addressof(ctypes.c_char.from_buffer(self.mmap)) + chunk * self.row_stride

    def cleanup(self):
        for view in self._views:
            view.release()
        self._views = []
        try:
            self.mmap.close()
        except BufferError:
            pass            # a numpy view still exists; the mapping goes with it
        os.close(self.fd)
        if self.creator:
            os.unlink(self.path)


class Primary:
    """The CPU primary tier: one state per chunk key."""

    def __init__(self, n_chunks):
        self.n_chunks = n_chunks
        self.free = list(range(n_chunks - 1, -1, -1))
        self.slot = {}                                  # key -> chunk id
        self.ref = {}                                   # key -> -1 | 0 | n
        self.evictable = collections.OrderedDict()      # ref 0 keys, LRU first

    def lookup(self, key):
        ref = self.ref.get(key)
        if ref is None:
            return T.LookupResult.MISS
        return T.LookupResult.HIT_PENDING if ref == -1 else T.LookupResult.HIT

    def _set_ref(self, key, ref):
        self.ref[key] = ref
        if ref == 0:
            self.evictable[key] = None
        else:
            self.evictable.pop(key, None)

    def prepare_store(self, keys):
        """(keys to store, their chunk ids, evicted keys), or None: cannot
        store (nothing changed)."""
        to_store = [k for k in dict.fromkeys(keys) if k not in self.ref]
        need = len(to_store) - len(self.free)
        evicted = []
        if need > 0:
            protected = set(keys)
            candidates = [k for k in self.evictable if k not in protected][:need]
            if len(candidates) < need:
                return None
            for key in candidates:
                self.evictable.pop(key)
                del self.ref[key]
                self.free.append(self.slot.pop(key))
                evicted.append(key)
        chunk_ids = []
        for key in to_store:
            chunk = self.free.pop()
            self.slot[key] = chunk
            self._set_ref(key, -1)
            chunk_ids.append(chunk)
        return to_store, chunk_ids, evicted

    def complete_store(self, keys, success):
        for key in keys:
            if self.ref.get(key) != -1:
                continue
            if success:
                self._set_ref(key, 0)
            else:
                del self.ref[key]
                self.free.append(self.slot.pop(key))

    def pin(self, keys):
        for key in keys:
            assert self.ref.get(key, -1) >= 0, 'pinning a chunk that is not ready'
            self._set_ref(key, self.ref[key] + 1)
        return [self.slot[k] for k in keys]

    def unpin(self, keys):
        for key in keys:
            assert self.ref[key] > 0, 'unpinning a chunk that is not pinned'
            self._set_ref(key, self.ref[key] - 1)

    def touch(self, keys):
        for key in reversed(keys):
            if key in self.evictable:
                self.evictable.move_to_end(key)


class PromObserver:
    """What vLLM's Prometheus observer does with the offloading stats it is
    sent: every name must be declared (build_metric_definitions), with the
    kind and the number of labels declared; counters add up, gauges are
    set, histograms count their observations in the declared buckets."""

    def __init__(self, definitions, undeclared_prefix=None):
        self.definitions = dict(definitions)
        # names under this prefix are someone else's to declare (vLLM's own
        # manager families when the manager is vLLM's)
        self.undeclared_prefix = undeclared_prefix
        self.counters = {}              # (name, labels) -> total
        self.gauges = {}                # (name, labels) -> value
        self.histograms = {}            # (name, labels) -> [count per bucket..., +Inf]
        self.n_observed = 0

    def observe(self, data):
        kinds = {T.OffloadingCounterMetadata: 'counter', T.OffloadingGaugeMetadata: 'gauge',
                 T.OffloadingHistogramMetadata: 'histogram'}
        for name, by_labels in data['data'].items():
            kind = data['types'].get(name)
            assert kind is not None, f'Unknown offloading stats key: {name}'
            if self.undeclared_prefix and name.startswith(self.undeclared_prefix) and \
                    name not in self.definitions:
                continue
            assert name in self.definitions, f'{name} was never declared to vLLM'
            metadata = self.definitions[name]
            assert kinds[type(metadata)] == kind, f'{name} declared a {type(metadata)}, sent a {kind}'
            for labels, value in by_labels.items():
                assert len(labels) == len(metadata.labelnames), \
                    f'{name} expects {len(metadata.labelnames)} labels, got {len(labels)}'
                key = (name, tuple(labels))
                if kind == 'counter':
                    assert isinstance(value, (int, float)) and value >= 0, (name, value)
                    self.counters[key] = self.counters.get(key, 0) + value
                elif kind == 'gauge':
                    assert isinstance(value, (int, float)), (name, value)
                    self.gauges[key] = value
                else:
                    assert isinstance(value, list) and all(isinstance(v, (int, float))
                                                           for v in value), (name, value)
                    buckets = list(metadata.buckets or ())
                    counts = self.histograms.setdefault(key, [0] * (len(buckets) + 1))
                    for v in value:
                        counts[next((i for i, b in enumerate(buckets) if v <= b),
                                    len(buckets))] += 1
                self.n_observed += 1


def metric_definitions(tiers):
    """What vLLM's spec declares for its tiers: each tier class's
    build_metric_definitions() of the tier's entry, plus the manager's own
    families this stand-in reports."""
    definitions = {MANAGER_GAUGE: T.OffloadingGaugeMetadata(
        documentation='Number of active secondary-tier cascade jobs, labeled by tier.',
        labelnames=('tier',))}
    for tier in tiers:
        entry = getattr(tier, 'vllm_entry', None)
        if entry is not None:
            definitions.update(type(tier).build_metric_definitions(entry))
    return definitions


MANAGER_GAUGE = 'vllm:kv_offload_tiering_active_cascade_jobs'


class JobTracker:
    """The manager's job table: every job reported exactly once, by the
    tier it was submitted to."""

    def __init__(self):
        self.next_id = 0
        self.jobs = {}                  # id -> (job, tier index)
        self.reported = set()

    def register(self, job_keys, chunk_ids, is_promotion, ctx, tier_idx):
        job = T.transfer_job(self.next_id, list(job_keys),
                             numpy.array(chunk_ids, dtype=numpy.int32 if is_promotion
                                         else numpy.int64),
                             is_promotion, ctx)
        self.next_id += 1
        self.jobs[job.job_id] = (job, tier_idx)
        return job

    def pop(self, result, tier_idx):
        assert result.job_id not in self.reported, f'job {result.job_id} reported twice'
        assert result.job_id in self.jobs, f'job {result.job_id} not in _jobs'
        job, idx = self.jobs.pop(result.job_id)
        assert idx == tier_idx, f'job {result.job_id} reported by tier {tier_idx}, not {idx}'
        self.reported.add(result.job_id)
        return job


class TieringManager:
    """vLLM's TieringOffloadingManager, as far as a secondary tier sees it."""

    def __init__(self, n_chunks, tiers):
        self.primary = Primary(n_chunks)
        self.tiers = list(tiers)
        self.observer = PromObserver(metric_definitions(self.tiers))
        self.reduced = {}                 # the last scrape's reduce()
        self.tracker = JobTracker()
        self.pending_loads = [dict() for _ in self.tiers]    # req id -> (ctx, keys, chunks)
        self.processed_this_step = False
        self.requests = {}                # req id -> [ctx, pending stores, finished]
        self.calls = []                   # (tier index, method, details) in order
        self.failed_promotions = 0
        self.failed_cascades = 0
        self.allocation_failures = 0

    # -- polling --

    def _maybe_process_finished_jobs(self):
        if self.processed_this_step:
            return
        self.processed_this_step = True
        self.process_finished_jobs()

    def process_finished_jobs(self):
        for i, tier in enumerate(self.tiers):
            for result in tier.get_finished_jobs():
                job = self.tracker.pop(result, i)
                self.calls.append((i, 'finished', result.job_id, result.success))
                if job.is_promotion:
                    if result.success:
                        self.primary.complete_store(job.keys, True)
                    else:
                        self.failed_promotions += 1
                        landed = set(result.successful_keys or ())
                        assert landed <= set(job.keys), 'successful_keys not in the job'
                        self.primary.complete_store([k for k in job.keys if k in landed], True)
                        self.primary.complete_store([k for k in job.keys if k not in landed],
                                                    False)
                else:
                    if not result.success:
                        self.failed_cascades += 1
                    self.primary.unpin(job.keys)
        for req_id in list(self.requests):
            self._maybe_finalize(req_id)

    # -- requests --

    def on_new_request(self, ctx):
        self.requests[ctx.req_id] = [ctx, 0, False]
        level = T.RequestOffloadingContext().policy      # chunk (block) level
        for tier in self.tiers:
            if tier.on_new_request(ctx).policy == T.OffloadPolicy.REQUEST_LEVEL:
                level = T.OffloadPolicy.REQUEST_LEVEL
        return level

    def on_request_finished(self, ctx):
        self.requests[ctx.req_id][2] = True
        self._maybe_finalize(ctx.req_id)

    def _maybe_finalize(self, req_id):
        ctx, pending, finished = self.requests[req_id]
        if finished and pending == 0:
            for i, tier in enumerate(self.tiers):
                self.calls.append((i, 'on_request_finished', req_id))
                tier.on_request_finished(ctx)
            del self.requests[req_id]

    # -- lookups and promotions --

    def lookup(self, key, ctx):
        self._maybe_process_finished_jobs()
        result = self.primary.lookup(key)
        if result != T.LookupResult.MISS:
            return result
        retry = False
        for i, tier in enumerate(self.tiers):
            if not ctx.load_tier_filter.allows(tier.medium, tier.locality):
                continue
            tier_result = tier.lookup(key, ctx)
            if tier_result == T.LookupResult.HIT:
                return T.LookupResult.HIT_PENDING if self._promote(i, key, ctx) \
                    else T.LookupResult.MISS
            retry = retry or tier_result == T.LookupResult.RETRY
        return T.LookupResult.RETRY if retry else T.LookupResult.MISS

    def _promote(self, tier_idx, key, ctx):
        prepared = self.primary.prepare_store([key])
        if prepared is None:
            self.allocation_failures += 1
            return False
        keys, chunks, _ = prepared
        entry = self.pending_loads[tier_idx].setdefault(ctx.req_id, (ctx, [], []))
        entry[1].extend(keys)
        entry[2].extend(chunks)
        return True

    def _flush_pending_promotions(self):
        for i, tier in enumerate(self.tiers):
            for ctx, keys, chunks in self.pending_loads[i].values():
                job = self.tracker.register(keys, chunks, True, ctx, i)
                self.calls.append((i, 'submit_load', job.job_id, ctx.req_id, len(keys)))
                tier.submit_load(job)
            self.pending_loads[i] = {}

    # -- the GPU-facing load path --

    def prepare_load(self, keys):
        return self.primary.pin(keys)

    def complete_load(self, keys):
        self.primary.unpin(keys)

    def touch(self, keys, ctx):
        self.primary.touch(keys)
        for tier in self.tiers:
            tier.touch(keys, ctx)

    # -- the store path and its cascade --

    def prepare_store(self, keys, ctx):
        self._maybe_process_finished_jobs()
        prepared = self.primary.prepare_store(keys)
        if prepared is not None and prepared[0]:
            self.requests[ctx.req_id][1] += 1
        return prepared

    def complete_store(self, keys, ctx, success=True):
        self.primary.complete_store(keys, success)
        if success:
            for i, tier in enumerate(self.tiers):
                chunks = self.primary.pin(keys)
                job = self.tracker.register(keys, chunks, False, ctx, i)
                self.calls.append((i, 'submit_store', job.job_id, ctx.req_id, len(keys)))
                tier.submit_store(job)
        self.requests[ctx.req_id][1] -= 1
        self._maybe_finalize(ctx.req_id)

    # -- steps --

    def on_schedule_end(self, ctx):
        self._maybe_process_finished_jobs()
        for i, tier in enumerate(self.tiers):
            tier.serve_external_requests(TierParent(self, i))
        self.processed_this_step = False
        self._flush_pending_promotions()
        for tier in self.tiers:
            tier.on_schedule_end(ctx)
        self.scrape()

    def get_stats(self):
        """The manager's stats: its own, then each tier's aggregated into
        them (vLLM's aggregate() asserts the tier's are its class)."""
        stats = T.OffloadingConnectorStats()
        for i, tier in enumerate(self.tiers):
            stats.set_gauge(MANAGER_GAUGE, sum(1 for _, idx in self.tracker.jobs.values()
                                                if idx == i),
                            labelvalues=(f'{i + 1}:{tier.tier_type}',))
        for tier in self.tiers:
            tier_stats = tier.get_stats()
            if tier_stats is None or tier_stats.is_empty():
                continue
            stats.aggregate(tier_stats)
        return stats

    def scrape(self):
        """One stats interval, as vLLM's loggers see it."""
        stats = self.get_stats()
        self.reduced = stats.reduce()
        self.observer.observe(stats.data)

    def has_pending_work(self):
        return bool(self.tracker.jobs) or any(t.has_pending_work() for t in self.tiers)

    def take_events(self):
        return [e for tier in self.tiers for e in tier.take_events()]

    def drain(self):
        """Blocks until every tier reported every job (reset_cache's first
        half), then processes the results."""
        for tier in self.tiers:
            tier.drain_jobs()
        self.process_finished_jobs()

    def reset_cache(self):
        """vLLM's reset_cache(): drain every tier, take their results (each
        job must be reported by then), forget promotions never submitted,
        then empty the primary. Secondary tiers keep their data."""
        self.drain()
        assert not self.tracker.jobs, f'jobs not reported after drain: {self.tracker.jobs}'
        self.pending_loads = [dict() for _ in self.tiers]
        n_chunks = self.primary.n_chunks
        self.primary = Primary(n_chunks)
        self.processed_this_step = False

    def shutdown(self):
        errors = []
        for tier in self.tiers:
            try:
                tier.shutdown()
            except Exception as error:      # noqa: BLE001 - as vLLM: log, re-raise last
                errors.append(error)
        if errors:
            raise errors[-1]


class TierParent:
    """vLLM's ParentManager handed to tier `origin` during
    serve_external_requests: the manager minus the origin tier."""

    def __init__(self, manager, origin):
        self.manager = manager
        self.origin = origin

    def on_new_request(self, ctx):
        self.manager.requests[ctx.req_id] = [ctx, 0, False]
        return T.RequestOffloadingContext()

    def lookup(self, key, ctx):
        result = self.manager.primary.lookup(key)
        if result != T.LookupResult.MISS:
            return result
        for i, tier in enumerate(self.manager.tiers):
            if i != self.origin and tier.lookup(key, ctx) == T.LookupResult.HIT:
                return T.LookupResult.HIT_PENDING if self.manager._promote(i, key, ctx) \
                    else T.LookupResult.MISS
        return T.LookupResult.MISS

    def create_store_job(self, keys, ctx):
        """Pins the keys and registers a store job under the origin tier,
        which moves the bytes and reports the job itself."""
        chunks = self.manager.primary.pin(keys)
        job = self.manager.tracker.register(keys, chunks, False, ctx, self.origin)
        self.manager.calls.append((self.origin, 'create_store_job', job.job_id, ctx.req_id,
                                   len(keys)))
        return job

    def on_request_finished(self, ctx):
        self.manager.requests[ctx.req_id][2] = True
        self.manager._maybe_finalize(ctx.req_id)


def chunk_bytes(chunk, size):
    """What computing chunk number `chunk` writes into its primary row."""
    return random.Random(chunk).randbytes(size)


def chunk_key(chunk, group=0):
    """An OffloadKey: a 32-byte block hash unique to `chunk`, then the
    group index."""
    return T.make_offload_key(chunk.to_bytes(8, 'big') * 4, group)


class Engine:
    """Runs requests through the manager in vLLM's order: look every chunk
    up; defer on RETRY / HIT_PENDING; load the hit prefix (checking its
    bytes), compute the rest into freshly allocated primary slots and store
    them; end the step."""

    def __init__(self, manager, region):
        self.manager = manager
        self.region = region
        self.rows = region.array()
        self.steps = 0
        self.loaded_chunks = 0
        self.computed_chunks = 0
        self.deferred = 0
        self.store_skipped = 0

    def step_end(self, new_ids=()):
        self.manager.on_schedule_end(T.ScheduleEndContext(list(new_ids), []))
        self.steps += 1

    def run(self, requests, per_step=None, max_steps=100000):
        """requests: list of (req id, [chunk numbers]). Returns when every
        request finished; a request computes the chunks after its hit
        prefix and stores them. At most per_step requests are scheduled in
        one step (vLLM's token budget)."""
        waiting = list(requests)
        contexts = {}
        while waiting:
            new_ids = []
            deferred = []
            budget = per_step or len(waiting)
            for req_id, chunks in waiting[:budget]:
                ctx = contexts.get(req_id)
                if ctx is None:
                    ctx = contexts[req_id] = T.ReqContext(req_id)
                    self.manager.on_new_request(ctx)
                    new_ids.append(req_id)
                if not self._try(ctx, chunks):
                    deferred.append((req_id, chunks))
            # Deferred requests keep their place (first come, first served).
            waiting = deferred + waiting[budget:]
            self.step_end(new_ids)
            if waiting and self.manager.tracker.jobs:
                # Nothing to compute while promotions land: wait for them
                # as the model's forward pass would, without spinning.
                for tier in self.manager.tiers:
                    tier.drain_jobs()
            assert self.steps < max_steps, 'requests made no progress'
        while self.manager.has_pending_work():
            for tier in self.manager.tiers:
                tier.drain_jobs()
            self.step_end()

    def _try(self, ctx, chunks):
        keys = [chunk_key(c) for c in chunks]
        hits = 0
        pending = False
        for key in keys:
            # The prefix goes on through chunks being promoted (they count
            # as hits), so that one step starts every promotion it needs;
            # an unknown location (RETRY) ends it.
            result = self.manager.lookup(key, ctx)
            if result == T.LookupResult.RETRY:
                pending = True
                break
            if result == T.LookupResult.HIT_PENDING:
                pending = True
            elif result != T.LookupResult.HIT:
                break
            hits += 1
        if pending:
            self.deferred += 1
            return False
        # Load the prefix hits: pin, "DMA" them (check the bytes), unpin.
        if hits:
            prefix = keys[:hits]
            chunk_ids = self.manager.prepare_load(prefix)
            for chunk, chunk_id in zip(chunks[:hits], chunk_ids):
                expected = chunk_bytes(chunk, self.region.row_stride)
                assert self.rows[chunk_id].tobytes() == expected, \
                    f'chunk {chunk} in slot {chunk_id} is not byte-exact'
            self.manager.touch(prefix, ctx)
            self.manager.complete_load(prefix)
            self.loaded_chunks += hits
        # Compute the rest and store it (GPU -> primary -> cascade).
        rest = keys[hits:]
        if rest:
            prepared = self.manager.prepare_store(rest, ctx)
            if prepared is None:
                # The primary is full of pinned chunks: vLLM does not offload
                # these (the request still ran on the GPU).
                self.manager.on_request_finished(ctx)
                self.store_skipped += len(rest)
                return True
            to_store, chunk_ids, _ = prepared
            by_key = dict(zip(rest, chunks[hits:]))
            for key, chunk_id in zip(to_store, chunk_ids):
                self.rows[chunk_id] = numpy.frombuffer(
                    chunk_bytes(by_key[key], self.region.row_stride), dtype=numpy.uint8)
            if to_store:
                self.manager.complete_store(to_store, ctx)
            self.computed_chunks += len(to_store)
        self.manager.on_request_finished(ctx)
        return True


def create_secondary_tier(config, primary_kv_view, offloading_spec=None):
    """vLLM's SecondaryTierFactory for an out-of-tree tier: the class is
    the attribute named by "type" in the module named by "module_path";
    every other key is a constructor keyword, and the detector is always
    passed (None without a "backpressure" block)."""
    import importlib

    entry = dict(config)
    config = dict(config)
    tier_type = config.pop('type', None)
    if not tier_type:
        raise ValueError("Secondary tier configuration must include 'type'")
    module_path = config.pop('module_path', None)
    if module_path is None:
        raise ValueError(f"Unknown secondary tier type: '{tier_type}'. For an out-of-tree "
                         f"tier, also set 'module_path'.")
    config.pop('backpressure', None)
    cls = getattr(importlib.import_module(module_path), tier_type)
    assert issubclass(cls, T.SecondaryTierManager)
    tier = cls(offloading_spec=offloading_spec, primary_kv_view=primary_kv_view,
               tier_type=tier_type, backpressure_detector=None, **config)
    tier.vllm_entry = entry         # what vLLM's spec declares metrics from
    return tier
