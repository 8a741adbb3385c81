# SPDX-License-Identifier: LGPL-2.1-or-later
"""A Python tier that pushes its results: its worker reports each job with
complete_job(), from its own thread (contract_common.Mover)."""

import gi

gi.require_version('GObject', '2.0')
gi.require_version('Kv', '1')
from gi.repository import GObject, Kv  # noqa: E402

import contract_common  # noqa: E402


class ContractPushTier(Kv.SecondaryTier):
    __gtype_name__ = 'ContractPushTier'

    def __init__(self, **properties):
        super().__init__(**properties)
        self._mover = contract_common.Mover(self, self.complete_job)

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

    def do_drain_jobs(self):
        self._mover.wait_idle()
        return True

    def do_shutdown(self):
        self._mover.stop()
        return True
