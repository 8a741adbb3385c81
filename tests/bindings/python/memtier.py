# SPDX-License-Identifier: LGPL-2.1-or-later
"""MemTier: a complete secondary tier written in Python.

It keeps chunks in a dict and moves bytes on a worker thread, the way a
real tier does its I/O:

- every vfunc runs on the owner thread (the thread that drives the
  Kv.TieringManager) and returns at once;
- do_submit_store() and do_submit_load() wrap the job in a Kv.TierJob and
  queue it for the worker;
- the worker copies the bytes, marks each key of the Kv.TierJob (landed,
  missing or failed) and reports it exactly once with report(), which is
  safe from any thread: the Kv.TierJob builds the job's result;
- do_drain_jobs() waits on a condition until nothing is in flight; it never
  iterates a main context.

The test suite in tests/bindings/python runs this class; doc/writing-a-tier.md
includes this file as it is.
"""

import queue
import threading

import gi

gi.require_version('GLib', '2.0')
gi.require_version('Kv', '1')
from gi.repository import GLib, Kv  # noqa: E402


class MemTier(Kv.SecondaryTier):
    __gtype_name__ = 'PyMemTier'

    def __init__(self, **properties):
        super().__init__(**properties)
        self._lock = threading.Lock()      # guards _store and _in_flight
        self._idle = threading.Condition(self._lock)
        self._store = {}                   # (hash hex, group) -> bytes
        self._in_flight = 0                # accepted jobs not reported yet
        self._jobs = queue.SimpleQueue()
        self._worker = threading.Thread(target=self._run, name='memtier-worker',
                                        daemon=True)
        self._worker.start()

    @staticmethod
    def _name(key):
        return (key.to_string(), key.get_group())

    def contains(self, key):
        with self._lock:
            return self._name(key) in self._store

    def get_stored(self, key):
        with self._lock:
            return self._store.get(self._name(key))

    # ---- vfuncs: owner thread only, never block ----------------------------

    def do_lookup(self, key, request):
        if self.contains(key):
            return Kv.LookupResult.HIT
        return Kv.LookupResult.MISS

    def do_on_new_request(self, request):
        return Kv.OffloadPolicy.CHUNK_LEVEL

    def do_submit_store(self, job):
        return self._submit(job)

    def do_submit_load(self, job):
        return self._submit(job)

    def do_drain_jobs(self):
        with self._idle:
            self._idle.wait_for(lambda: self._in_flight == 0)
        return True

    def do_shutdown(self):
        self.do_drain_jobs()
        self._jobs.put(None)
        self._worker.join()
        return True

    def _submit(self, job):
        with self._lock:
            self._in_flight += 1
        self._jobs.put(Kv.TierJob.new(self, job))
        return True          # accepted: reported later by the worker

    # ---- worker thread -----------------------------------------------------

    def _run(self):
        while (tier_job := self._jobs.get()) is not None:
            self._copy(self.get_primary(), tier_job)
            # Report first, then count the job out, so that drain_jobs()
            # returns only once every result is queued.
            self._report(tier_job)
            with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()

    def _report(self, tier_job):
        tier_job.report()

    def _copy(self, primary, tier_job):
        job = tier_job.get_job()
        for i, (key, slot) in enumerate(zip(job.get_keys(), job.get_chunk_ids())):
            try:
                if job.is_promotion():
                    data = self.get_stored(key)
                    if data is None:
                        tier_job.mark_missing(i)
                        continue
                    primary.write_slot(slot, GLib.Bytes.new(data))
                else:
                    # get_data() copies: the slot is reused once the job is done.
                    data = primary.read_slot(slot).get_data()
                    with self._lock:
                        self._store[self._name(key)] = data
            except GLib.Error:
                tier_job.mark_failed(i, Kv.KeyFailureFlags.NONE, None)
                continue
            tier_job.mark_landed(i)
