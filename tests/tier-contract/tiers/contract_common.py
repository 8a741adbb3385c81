# SPDX-License-Identifier: LGPL-2.1-or-later
"""What the Python tiers of the contract suite share: chunks kept in
memory with a checksum each, and one worker thread that moves the bytes of
the jobs it is given and reports each once, through the tier's choice of
report (complete_job for a pushing tier, a list for a pulling one).

The hooks the suite drives from C are GObject properties of the tiers:
``stalled`` (the worker takes no job while it is set), ``damage`` (a
Kv.Key whose stored bytes change under their checksum) and ``idle`` (no
job queued or being moved)."""

import threading
import zlib

import gi

gi.require_version('GLib', '2.0')
gi.require_version('Kv', '1')
from gi.repository import GLib, Kv  # noqa: E402


def name_of(key):
    return (key.to_string(), key.get_group())


class Mover:
    """The store and the worker of one tier. Not a GObject: only the tier
    classes are (the loader registers every tier class a module defines)."""

    def __init__(self, tier, report):
        self._tier = tier
        self._report = report
        self._lock = threading.Condition()
        self._chunks = {}             # name -> (crc32, bytes)
        self._jobs = []
        self._running = 0             # queued or being moved
        self._stalled = False
        self._quit = False
        self._worker = threading.Thread(target=self._run, name='contract-mover', daemon=True)
        self._worker.start()

    # ---- owner thread ------------------------------------------------------

    def has(self, key):
        with self._lock:
            return name_of(key) in self._chunks

    def submit(self, job):
        with self._lock:
            self._jobs.append(job)
            self._running += 1
            self._lock.notify_all()
        return True

    def set_stalled(self, stalled):
        with self._lock:
            self._stalled = stalled
            self._lock.notify_all()

    def damage(self, key):
        with self._lock:
            crc, data = self._chunks[name_of(key)]
            flipped = bytearray(data)
            flipped[99] ^= 0x10
            self._chunks[name_of(key)] = (crc, bytes(flipped))

    def is_idle(self):
        with self._lock:
            return self._running == 0

    def wait_idle(self):
        with self._lock:
            self._lock.wait_for(lambda: self._running == 0)

    def stop(self):
        with self._lock:
            self._quit = True
            self._stalled = False
            self._lock.notify_all()
        self._worker.join()

    # ---- worker thread -----------------------------------------------------

    def _run(self):
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self._quit or (self._jobs and not self._stalled))
                if not self._jobs:
                    return
                job = self._jobs.pop(0)
            try:
                result = self._move(job)
            except GLib.Error:
                result = Kv.JobResult.new(job.get_id(), False)
            # report first, then count the job out: drain_jobs returns once
            # every result is there
            self._report(result)
            with self._lock:
                self._running -= 1
                self._lock.notify_all()

    def _move(self, job):
        primary = self._tier.get_primary()
        size = primary.get_slot_size()
        keys = job.get_keys()
        slots = job.get_chunk_ids()
        if not job.is_promotion():
            cancellable = self._tier.get_job_cancellable(job)
            # failed at its deadline: the slots hold other chunks by now
            if cancellable is not None and cancellable.is_cancelled():
                return Kv.JobResult.new(job.get_id(), False)
            for key, slot in zip(keys, slots):
                data = primary.read_slot(slot).get_data()
                with self._lock:
                    self._chunks[name_of(key)] = (zlib.crc32(data), data)
            result = Kv.JobResult.new(job.get_id(), True)
            result.set_transfer_bytes(len(keys) * size)
            return result
        landed = []
        for key, slot in zip(keys, slots):
            with self._lock:
                record = self._chunks.get(name_of(key))
            if record is None:
                continue
            if zlib.crc32(record[1]) != record[0]:
                # damaged: forgotten, as the fs tier deletes a bad file
                with self._lock:
                    self._chunks.pop(name_of(key), None)
                continue
            primary.write_slot(slot, GLib.Bytes.new(record[1]))
            landed.append(key)
        # the partial-load rule: every landed key in the job's order, no
        # list when none landed, success when all did
        result = Kv.JobResult.new(job.get_id(), len(landed) == len(keys))
        if 0 < len(landed) < len(keys):
            result.set_successful_keys(landed)
        result.set_transfer_bytes(len(landed) * size)
        return result
