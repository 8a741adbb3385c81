# SPDX-License-Identifier: LGPL-2.1-or-later
"""A tier written against vLLM's interface (kvtier.vllm.types), run as a
Kv.SecondaryTier by kvtier.vllm's wrapper (what wrap_tier() returns), for
the contract suite.

The vLLM tier keeps chunks in a dict with a checksum each and moves the
bytes on a worker thread; its results are collected by polling
get_finished_jobs(), as vLLM does. vLLM's interface has no cancellation:
a job runs to its end.

ContractVllmTier is the wrapper class with the suite's hooks as GObject
properties (``stalled``, ``damage``, ``idle``); the loader creates it from
C, so the vLLM tier is made on first use, when the wrapper's primary
buffer is known."""

import queue
import threading
import zlib

import gi

gi.require_version('GObject', '2.0')
gi.require_version('Kv', '1')
from gi.repository import GObject, Kv  # noqa: E402

import kvtier.vllm as kvv  # noqa: E402
from kvtier.vllm import types  # noqa: E402


class ContractDictTier(types.SecondaryTierManager):
    """A secondary tier for vLLM: nothing of kvtier in it."""

    medium = types.Medium.CPU

    def __init__(self, offloading_spec, primary_kv_view, tier_type, backpressure_detector=None):
        super().__init__(offloading_spec, primary_kv_view, tier_type, backpressure_detector)
        self.locality = types.Locality.LOCAL
        self._chunks = {}               # key -> (crc32, bytes)
        self._finished = queue.SimpleQueue()
        self._lock = threading.Condition()
        self._running = 0
        self._stalled = False
        self._jobs = queue.SimpleQueue()
        self._worker = threading.Thread(target=self._run, name='contract-vllm', daemon=True)
        self._worker.start()

    def lookup(self, key, req_context):
        with self._lock:
            return types.LookupResult.HIT if key in self._chunks else types.LookupResult.MISS

    def on_new_request(self, req_context):
        return types.RequestOffloadingContext()

    def on_request_finished(self, req_context):
        pass

    def touch(self, keys, req_context):
        pass

    def on_schedule_end(self, ctx):
        pass

    def submit_store(self, job):
        self._submit(job)

    def submit_load(self, job):
        self._submit(job)

    def _submit(self, job):
        with self._lock:
            self._running += 1
        self._jobs.put(job)

    def get_finished_jobs(self):
        results = []
        while True:
            try:
                results.append(self._finished.get_nowait())
            except queue.Empty:
                return results

    def has_pending_work(self):
        with self._lock:
            return self._running > 0

    def take_events(self):
        return []

    def get_stats(self):
        return None

    def drain_jobs(self):
        with self._lock:
            self._lock.wait_for(lambda: self._running == 0 or self._stalled)

    def shutdown(self):
        self.set_stalled(False)
        self.drain_jobs()
        self._jobs.put(None)
        self._worker.join()

    # ---- hooks -------------------------------------------------------------

    def set_stalled(self, stalled):
        with self._lock:
            self._stalled = stalled
            self._lock.notify_all()

    def damage(self, key):
        with self._lock:
            crc, data = self._chunks[key]
            flipped = bytearray(data)
            flipped[99] ^= 0x10
            self._chunks[key] = (crc, bytes(flipped))

    def is_idle(self):
        with self._lock:
            return self._running == 0

    # ---- worker thread -----------------------------------------------------

    def _run(self):
        flat = memoryview(self._primary_kv_view).cast('B')
        size = self.block_size_bytes
        while (job := self._jobs.get()) is not None:
            with self._lock:
                self._lock.wait_for(lambda: not self._stalled)
            landed = []
            for key, chunk in zip(job.keys, job.chunk_ids):
                row = flat[int(chunk) * size:(int(chunk) + 1) * size]
                if job.is_promotion:
                    with self._lock:
                        record = self._chunks.get(key)
                    if record is None:
                        continue
                    if zlib.crc32(record[1]) != record[0]:
                        # damaged: forgotten, as the fs tier deletes a bad file
                        with self._lock:
                            self._chunks.pop(key, None)
                        continue
                    row[:] = record[1]
                else:
                    data = bytes(row)
                    with self._lock:
                        self._chunks[key] = (zlib.crc32(data), data)
                landed.append(key)
            ok = len(landed) == len(job.keys)
            self._finished.put(types.JobResult(
                job.job_id, ok,
                successful_keys=tuple(landed) if job.is_promotion and landed and not ok else None,
                transfer_bytes=len(landed) * size))
            with self._lock:
                self._running -= 1
                self._lock.notify_all()


class ContractVllmTier(kvv.VllmTierWrapper):
    __gtype_name__ = 'ContractVllmTier'

    def __init__(self, **properties):
        self._inner = None
        super().__init__(None, **properties)

    # The wrapper reaches its vLLM tier as self._vllm: made on first use,
    # once the construct properties (the primary) are set.
    @property
    def _vllm(self):
        if self._inner is None:
            view = kvv.primary_kv_view(self.get_primary())
            self._inner = ContractDictTier(None, view, self.get_tier_type())
        return self._inner

    @_vllm.setter
    def _vllm(self, value):
        if value is not None:
            self._inner = value

    @GObject.Property(type=bool, default=False)
    def stalled(self):
        return self._vllm._stalled

    @stalled.setter
    def stalled(self, value):
        self._vllm.set_stalled(value)

    @GObject.Property(type=Kv.Key, flags=GObject.ParamFlags.WRITABLE)
    def damage(self):
        return None

    @damage.setter
    def damage(self, key):
        self._vllm.damage(key.to_offload_key().get_data())

    @GObject.Property(type=bool, default=True, flags=GObject.ParamFlags.READABLE)
    def idle(self):
        return self._vllm.is_idle()
