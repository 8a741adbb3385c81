# SPDX-License-Identifier: LGPL-2.1-or-later
"""Tiers for the kvtier.vllm tests.

- ScriptedTier: a kvtier tier (Kv.SecondaryTier in Python) whose failures
  the test chooses: refuse submits, lose some keys of a load, hold jobs
  until released; it records the requests it is given.
- PullTier: a kvtier tier that reports only through get_finished_jobs().
- DictVllmTier: a tier written for vLLM's interface (not kvtier's): chunks
  in a dict, copies on a worker thread, results collected by polling.
  kvtier.vllm.wrap_tier() runs it under a Kv.TieringManager.
- example_vllm_tier_class(): vLLM's own example tier where vLLM is
  importable; otherwise ExampleVllmTier, which behaves as it does (written
  from what vLLM's example tier does: keys in a dict, no bytes kept, every
  job finished at submit, a load of a missing key failed).
"""

import queue
import threading

import gi

gi.require_version('GLib', '2.0')
gi.require_version('Kv', '1')
from gi.repository import GLib, Kv  # noqa: E402

import kvtier.vllm as kvv  # noqa: E402
from kvtier.vllm import types  # noqa: E402


class ScriptedTier(Kv.SecondaryTier):
    __gtype_name__ = 'KvtierTestScriptedTier'

    def __init__(self, **properties):
        super().__init__(**properties)
        self.store = {}                 # offload key bytes -> bytes
        self.refuse = False             # submit raises GLib.Error
        self.lose = set()               # offload keys a load does not land
        self.unknown = set()            # offload keys looked up as RETRY
        self.hold = False               # jobs wait for release()
        self.held = []
        self.requests = []              # (method, request id, filter, params)
        self.peer_fetches = []          # (request id, [Kv.Key]) to serve
        self.sent = {}                  # offload key -> bytes served to a peer
        self._lock = threading.Lock()
        self._jobs = queue.SimpleQueue()
        self._worker = threading.Thread(target=self._run, daemon=True)
        self._worker.start()

    def _note(self, method, request):
        self.requests.append((method, request.get_id(), request.get_load_tier_filter(),
                              request.get_transfer_params()))

    def do_serve_external_requests(self, parent):
        """Serves the peers' fetches queued in self.peer_fetches, as a peer
        tier does: look the keys up through the parent, pin the ready ones
        with create_store_job and "send" their bytes (here: to self.sent)."""
        while self.peer_fetches:
            request_id, keys = self.peer_fetches.pop(0)
            request = Kv.Request.new(request_id, None)
            parent.on_new_request(request)
            ready = [k for k in keys
                     if parent.lookup(k, request) == Kv.LookupResult.HIT]
            if ready:
                job = parent.create_store_job(ready, request)
                primary = self.get_primary()
                for key, slot in zip(job.get_keys(), job.get_chunk_ids()):
                    self.sent[key.to_offload_key().get_data()] = \
                        primary.read_slot(slot).get_data()
                self.complete_job(Kv.JobResult.new(job.get_id(), True))
            parent.on_request_finished(request)

    def do_lookup(self, key, request):
        self._note('lookup', request)
        name = key.to_offload_key().get_data()
        if name in self.unknown:
            return Kv.LookupResult.RETRY
        with self._lock:
            found = name in self.store
        return Kv.LookupResult.HIT if found else Kv.LookupResult.MISS

    def do_on_new_request(self, request):
        self._note('on_new_request', request)
        return Kv.OffloadPolicy.CHUNK_LEVEL

    def _submit(self, job):
        if self.refuse:
            raise GLib.Error.new_literal(Kv.tier_error_quark(), 'refused by the test',
                                         int(Kv.TierError.FAILED))
        if self.hold:
            self.held.append(job)
        else:
            self._jobs.put(job)
        return True

    def do_submit_store(self, job):
        return self._submit(job)

    def do_submit_load(self, job):
        return self._submit(job)

    def release(self):
        for job in self.held:
            self._jobs.put(job)
        self.held = []

    def do_shutdown(self):
        # What is held never runs: the base class fails it, exactly once.
        self._jobs.put(None)
        self._worker.join()
        return True

    def _run(self):
        while (job := self._jobs.get()) is not None:
            primary = self.get_primary()
            landed = []
            for key, slot in zip(job.get_keys(), job.get_chunk_ids()):
                name = key.to_offload_key().get_data()
                if job.is_promotion():
                    with self._lock:
                        data = None if name in self.lose else self.store.get(name)
                    if data is None:
                        continue
                    primary.write_slot(slot, GLib.Bytes.new(data))
                else:
                    data = primary.read_slot(slot).get_data()
                    with self._lock:
                        self.store[name] = data
                landed.append(key)
            result = Kv.JobResult.new(job.get_id(), len(landed) == job.get_n_keys())
            if job.is_promotion() and 0 < len(landed) < job.get_n_keys():
                result.set_successful_keys(landed)
            result.set_transfer_bytes(len(landed) * primary.get_slot_size())
            self.complete_job(result)


class PullTier(ScriptedTier):
    """A kvtier tier in the pull model: it finishes each job at submit and
    reports it only through its get_finished_jobs(), as vLLM's own tiers
    and most Python tiers do (no complete_job())."""

    __gtype_name__ = 'KvtierTestPullTier'

    def __init__(self, **properties):
        super().__init__(**properties)
        self.finished = []

    def _submit(self, job):
        primary = self.get_primary()
        for key, slot in zip(job.get_keys(), job.get_chunk_ids()):
            name = key.to_offload_key().get_data()
            if job.is_promotion():
                primary.write_slot(slot, GLib.Bytes.new(self.store[name]))
            else:
                self.store[name] = primary.read_slot(slot).get_data()
        self.finished.append(Kv.JobResult.new(job.get_id(), True))
        return True

    def do_get_finished_jobs(self):
        finished, self.finished = self.finished, []
        return finished


class DictVllmTier(types.SecondaryTierManager):
    """A secondary tier written against vLLM's interface only."""

    medium = types.Medium.CPU

    def __init__(self, offloading_spec, primary_kv_view, tier_type, backpressure_detector=None,
                 lose=()):
        if kvv._BASE_TAKES_DETECTOR:
            super().__init__(offloading_spec, primary_kv_view, tier_type, backpressure_detector)
        else:
            super().__init__(offloading_spec, primary_kv_view, tier_type)
        self.locality = types.Locality.LOCAL
        self.store = {}
        self.lose = set(lose)           # keys a load does not land
        self.gate = threading.Event()   # the worker waits on it before each job
        self.gate.set()
        self.events = []
        self.n_stored = 0
        self.calls = []
        self._finished = queue.SimpleQueue()
        self._in_flight = 0
        self._lock = threading.Condition()
        self._jobs = queue.SimpleQueue()
        self._worker = threading.Thread(target=self._run, daemon=True)
        self._worker.start()

    def lookup(self, key, req_context):
        self.calls.append(('lookup', req_context.req_id))
        with self._lock:
            return types.LookupResult.HIT if key in self.store else types.LookupResult.MISS

    def on_new_request(self, req_context):
        self.calls.append(('on_new_request', req_context.req_id))
        return types.RequestOffloadingContext()

    def on_request_finished(self, req_context):
        self.calls.append(('on_request_finished', req_context.req_id))

    def touch(self, keys, req_context):
        self.calls.append(('touch', len(keys)))

    def on_schedule_end(self, ctx):
        self.calls.append(('on_schedule_end',))

    def submit_store(self, job):
        self._submit(job)

    def submit_load(self, job):
        self._submit(job)

    def _submit(self, job):
        self.calls.append(('submit_load' if job.is_promotion else 'submit_store', job.job_id))
        with self._lock:
            self._in_flight += 1
        self._jobs.put(job)

    def _run(self):
        # vLLM's view is 2-D (chunks, row bytes); rows are reached through
        # the flat bytes at chunk * row stride (block_size_bytes, which an
        # older vLLM's base class does not have).
        flat = memoryview(self._primary_kv_view).cast('B')
        size = self._primary_kv_view.strides[0]
        while (job := self._jobs.get()) is not None:
            self.gate.wait()
            landed = []
            try:
                for key, chunk in zip(job.keys, kvv._job_chunk_ids(job)):
                    row = flat[int(chunk) * size:(int(chunk) + 1) * size]
                    if job.is_promotion:
                        with self._lock:
                            data = None if key in self.lose else self.store.get(key)
                        if data is None:
                            continue
                        row[:] = data                   # one copy, into the primary
                    else:
                        data = bytes(row)               # one copy, out of the primary
                        with self._lock:
                            self.store[key] = data
                    landed.append(key)
            except Exception:                           # noqa: BLE001 - a failed job
                landed = []
            ok = len(landed) == len(job.keys)
            result = types.job_result(job.job_id, ok,
                                      successful_keys=tuple(landed) if job.is_promotion and
                                      landed and not ok else None,
                                      transfer_bytes=len(landed) * size)
            self._finished.put(result)
            with self._lock:
                if ok and not job.is_promotion:
                    self.n_stored += len(job.keys)
                    self.events.append(types.OffloadingEvent(list(job.keys), self.medium,
                                                             False, self.locality))
                self._in_flight -= 1
                self._lock.notify_all()

    def get_finished_jobs(self):
        results = []
        while True:
            try:
                results.append(self._finished.get_nowait())
            except queue.Empty:
                return results

    def has_pending_work(self):
        with self._lock:
            return self._in_flight > 0

    def get_stats(self):
        with self._lock:
            n, self.n_stored = self.n_stored, 0
        if n == 0:
            return None
        stats = types.OffloadingConnectorStats()
        stats.increase_counter('vllm:test_dict_stored_chunks', n, labelvalues=(self.tier_type,))
        stats.set_gauge('vllm:test_dict_keys', len(self.store), labelvalues=(self.tier_type,))
        stats.observe_histogram('vllm:test_dict_job_chunks', n, labelvalues=(self.tier_type,))
        return stats

    def take_events(self):
        with self._lock:
            events, self.events = self.events, []
        return events

    def drain_jobs(self):
        self.gate.set()                 # draining finishes what was held
        with self._lock:
            self._lock.wait_for(lambda: self._in_flight == 0)

    def shutdown(self):
        self.drain_jobs()
        self._jobs.put(None)
        self._worker.join()


class ExampleVllmTier(types.SecondaryTierManager):
    """vLLM's example tier as it behaves: an in-memory set of keys (no
    bytes are kept or copied), every job finished at submit and reported by
    the next get_finished_jobs(), a load that names a missing key failed."""

    medium = types.Medium.CPU

    def __init__(self, offloading_spec, primary_kv_view, tier_type, custom_param=0):
        super().__init__(offloading_spec, primary_kv_view, tier_type)
        self.custom_param = custom_param
        self.blocks = {}
        self.completed_jobs = []

    def lookup(self, key, req_context):
        return types.LookupResult.HIT if key in self.blocks else types.LookupResult.MISS

    def submit_store(self, job_metadata):
        assert len(job_metadata.keys) == len(kvv._job_chunk_ids(job_metadata))
        for key in job_metadata.keys:
            self.blocks[key] = True
        self.completed_jobs.append(types.job_result(job_metadata.job_id, True,
                                                    transfer_time=0.0))

    def submit_load(self, job_metadata):
        assert len(job_metadata.keys) == len(kvv._job_chunk_ids(job_metadata))
        ok = all(key in self.blocks for key in job_metadata.keys)
        self.completed_jobs.append(types.job_result(job_metadata.job_id, ok,
                                                    transfer_time=0.0 if ok else None))

    def get_finished_jobs(self):
        jobs, self.completed_jobs = self.completed_jobs, []
        return jobs

    def on_new_request(self, req_context):
        return types.RequestOffloadingContext()

    def drain_jobs(self):
        return                  # every job finished at submit


def example_vllm_tier_class():
    """vLLM's ExampleSecondaryTierManager where vLLM is importable."""
    if kvv.HAVE_VLLM:
        from vllm.v1.kv_offload.tiering.example.manager import ExampleSecondaryTierManager
        return ExampleSecondaryTierManager
    return ExampleVllmTier
