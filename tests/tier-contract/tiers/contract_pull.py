# SPDX-License-Identifier: LGPL-2.1-or-later
"""A Python tier that is pulled, as vLLM's tiers are: its worker keeps the
results, and do_get_finished_jobs() hands them over (after the ones the
base class queued: jobs its watchdog failed at their deadline)."""

import threading

import gi

gi.require_version('GObject', '2.0')
gi.require_version('Kv', '1')
from gi.repository import GObject, Kv  # noqa: E402

import contract_common  # noqa: E402


class ContractPullTier(Kv.SecondaryTier):
    __gtype_name__ = 'ContractPyPullTier'

    def __init__(self, **properties):
        super().__init__(**properties)
        self._finished_lock = threading.Lock()
        self._finished = []
        self._mover = contract_common.Mover(self, self._keep)

    def _keep(self, result):
        with self._finished_lock:
            self._finished.append(result)

    @GObject.Property(type=bool, default=False)
    def stalled(self):
        return self._mover._stalled

    @stalled.setter
    def stalled(self, value):
        self._mover.set_stalled(value)

    @GObject.Property(type=Kv.Key, flags=GObject.ParamFlags.WRITABLE)
    def damage(self):
        return None

    @damage.setter
    def damage(self, key):
        self._mover.damage(key)

    @GObject.Property(type=bool, default=True, flags=GObject.ParamFlags.READABLE)
    def idle(self):
        return self._mover.is_idle()

    def do_lookup(self, key, request):
        return Kv.LookupResult.HIT if self._mover.has(key) else Kv.LookupResult.MISS

    def do_on_new_request(self, request):
        return Kv.OffloadPolicy.CHUNK_LEVEL

    def do_submit_store(self, job):
        return self._mover.submit(job)

    def do_submit_load(self, job):
        return self._mover.submit(job)

    def do_get_finished_jobs(self):
        with self._finished_lock:
            mine, self._finished = self._finished, []
        return Kv.SecondaryTier.do_get_finished_jobs(self) + mine

    def do_drain_jobs(self):
        # waits for its own worker; the results stay to be pulled
        self._mover.wait_idle()
        return True

    def do_shutdown(self):
        self._mover.stop()
        return True
