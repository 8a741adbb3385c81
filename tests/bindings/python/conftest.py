# SPDX-License-Identifier: LGPL-2.1-or-later
"""Shared fixtures of the Python suite: a primary tier, a manager and the
engine side of the protocol (store, step, wait for completions)."""

import faulthandler
import os
import random
import select
import sys

import gi
import pytest

gi.require_version('GLib', '2.0')
gi.require_version('Kv', '1')
from gi.repository import GLib, Kv  # noqa: E402

SLOT_SIZE = 4096

# KVTIER_VLLM_SOURCE: a vLLM source tree; its vllm package goes first on the
# path before any test imports kvtier.vllm, so that the kvtier.vllm tests run
# with vLLM's own classes (and test_vllm_upstream.py with vLLM's manager).
VLLM_SOURCE = os.environ.get('KVTIER_VLLM_SOURCE') or None
if VLLM_SOURCE:
    sys.path.insert(0, os.path.abspath(VLLM_SOURCE))

# A hang is a failure, not a stuck CI job: every test gets a watchdog that
# dumps all thread stacks and exits.
WATCHDOG_SECONDS = 120

# Where the watchdog writes: the test run's own stderr, copied before pytest
# captures it. During a test, fd 2 is pytest's capture file, which is lost
# when the watchdog ends the process (a hang then showed as a bare exit 1).
_watchdog_out = None


def pytest_configure(config):
    global _watchdog_out
    _watchdog_out = os.fdopen(os.dup(2), 'w')      # pytest captures only around tests


def pytest_unconfigure(config):
    if _watchdog_out is not None:
        _watchdog_out.close()


@pytest.fixture(autouse=True)
def watchdog():
    out = _watchdog_out if _watchdog_out is not None else sys.__stderr__
    faulthandler.dump_traceback_later(WATCHDOG_SECONDS, exit=True, file=out)
    yield
    faulthandler.cancel_dump_traceback_later()


def make_key(i, group=0):
    """A 32-byte block hash unique to i."""
    return Kv.Key.new(bytes([i & 0xff, i >> 8]) + bytes((i * 31 + b) & 0xff for b in range(30)),
                      group)


def key_name(key):
    return (key.to_string(), key.get_group())


def pattern(i):
    """Slot-sized bytes unique to key i, so byte-exact checks catch a slot
    mix-up as well as a partial copy."""
    return random.Random(i).randbytes(SLOT_SIZE)


class Engine:
    """Plays the inference engine: owns the manager and drives it from the
    test's (owner) thread."""

    def __init__(self, n_slots=4, manager=None, n_keys=32):
        if manager is None:
            buffer = Kv.HostBuffer.new(n_slots, SLOT_SIZE)
            manager = Kv.TieringManager.new(Kv.PrimaryTier.new(buffer, None, True))
        self.manager = manager
        self.primary = manager.get_primary()
        self.buffer = self.primary.get_buffer()
        self.keys = [make_key(i) for i in range(n_keys)]
        self._index = {key_name(k): i for i, k in enumerate(self.keys)}
        self._shut_down = False

    def index(self, key):
        return self._index[key_name(key)]

    def step(self):
        self.manager.on_schedule_end(Kv.ScheduleEnd.new(None, None))

    def wait_idle(self, timeout=30.0):
        """Ends the current step, then steps until no job is in flight,
        sleeping on the manager's wake-up fd in between (no polling loop, no
        fixed sleeps). Each step consumes results at its first call, at most
        once, so results that arrived later wait for the next step."""
        fd = self.manager.get_wakeup_fd()
        self.step()
        while self.manager.has_pending_work():
            readable, _, _ = select.select([fd], [], [], timeout)
            assert readable, 'no job completed within %.0f s' % timeout
            self.step()

    def store(self, request, indices, success=True):
        """GPU → primary: allocates slots, writes each key's pattern and
        completes the store, which cascades to every tier."""
        keys = [self.keys[i] for i in indices]
        prepared = self.manager.prepare_store(keys, request)
        to_store = prepared.get_keys_to_store()
        for key, slot in zip(to_store, prepared.get_chunk_ids()):
            self.buffer.write_slot(slot, GLib.Bytes.new(pattern(self.index(key))))
        if to_store:
            self.manager.complete_store(to_store, request, success)
        return prepared

    def load(self, request, indices):
        """Primary → GPU: pins the keys' slots, reads them and unpins them,
        as the engine does for a prefix hit. Returns the bytes of each."""
        keys = [self.keys[i] for i in indices]
        slots = self.manager.prepare_load(keys, request)
        try:
            for key, slot in zip(keys, slots):
                assert self.primary.get_ref_count(key) == (True, 1)
            return [self.buffer.read_slot(slot).get_data() for slot in slots]
        finally:
            self.manager.complete_load(keys, request)

    def slot_bytes(self, i):
        """The bytes of key i's primary slot (the key must be stored)."""
        found, slot = self.primary.get_chunk_id(self.keys[i])
        assert found, 'key %d is not in the primary tier' % i
        return self.buffer.read_slot(slot).get_data()

    def shutdown(self):
        if not self._shut_down:
            self._shut_down = True
            self.manager.shutdown()


@pytest.fixture
def engine():
    e = Engine(n_slots=4)
    yield e
    e.shutdown()
