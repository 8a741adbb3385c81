#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Round-trip cost of tier vfuncs implemented in Python, called by the C
manager.

    GI_TYPELIB_PATH=build/kvtier LD_LIBRARY_PATH=build/kvtier \\
    KVTIER_PLUGIN_PATH=build/plugins/example \\
        /usr/bin/python3 bench/python-vfunc-cost.py [--iterations N]

lookup: the C loop of kv_tiering_manager_lookup_many() (called once, through
ctypes, for N keys) asks one secondary tier per key. Measured with a Python
tier (do_lookup answers MISS) and with no secondary tier; the difference
per key is the C → Python → C round trip of one vfunc call plus the
manager's per-tier work.

submit_store: one complete_store() of one key cascades to every tier, one
store job each, from a C loop. Measured with K Python tiers (do_submit_store
keeps the job and returns TRUE) and with no tier; (difference) / K is the
cost per job. The same with K C tiers (the example tier, whose
submit_store() hands the job to its thread pool, waking a worker) is printed
for comparison: it measures a C tier's real hand-off, not a bare C call.
Jobs are completed and consumed outside the timed region.

Each figure is the best of several repeats (the machine is shared).
"""

import argparse
import ctypes
import gc
import os
import sys
import time

import gi

gi.require_version('GLib', '2.0')
gi.require_version('Kv', '1')
from gi.repository import GLib, Kv  # noqa: E402

SLOT = 4096


class LookupTier(Kv.SecondaryTier):
    __gtype_name__ = 'BenchLookupTier'

    def do_lookup(self, key, request):
        return Kv.LookupResult.MISS

    def do_on_new_request(self, request):
        return Kv.OffloadPolicy.CHUNK_LEVEL

    def do_submit_store(self, job):
        return False

    def do_submit_load(self, job):
        return False

    def do_drain_jobs(self):
        return True


class StoreTier(LookupTier):
    __gtype_name__ = 'BenchStoreTier'

    def __init__(self, **properties):
        super().__init__(**properties)
        self.jobs = []

    def do_submit_store(self, job):
        self.jobs.append(job)
        return True

    def finish(self):
        for job in self.jobs:
            self.complete_job(Kv.JobResult.new(job.get_id(), True))
        self.jobs.clear()


def key(i):
    return Kv.Key.new(i.to_bytes(8, 'little') * 4, 0)


def best(repeats, fn):
    times = []
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        try:
            times.append(fn())
        finally:
            gc.enable()
    return min(times)


def manager_with(n_slots, tiers):
    buffer = Kv.HostBuffer.new(n_slots, SLOT)
    manager = Kv.TieringManager.new(Kv.PrimaryTier.new(buffer, None, False))
    for make in tiers:
        manager.add_tier(make(buffer))
    return manager, buffer


# ---- lookup ----------------------------------------------------------------

def lookup_many_function():
    lib = ctypes.CDLL('libkvtier-1.so.0')
    fn = lib.kv_tiering_manager_lookup_many
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint,
                   ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    capsule = ctypes.pythonapi.PyCapsule_GetPointer
    capsule.restype = ctypes.c_void_p
    capsule.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return fn, lambda obj: capsule(obj.__gpointer__, None)


def time_lookups(n_keys, with_tier, repeats):
    manager, _ = manager_with(4, [lambda b: LookupTier(primary=b)] if with_tier else [])
    request = Kv.Request.new('bench', None)
    manager.on_new_request(request)
    keys = [key(i) for i in range(n_keys)]
    # PyGObject hashes a boxed wrapper by the address of its C struct.
    c_keys = (ctypes.c_void_p * n_keys)(*[hash(k) for k in keys])
    results = (ctypes.c_int * n_keys)()
    lookup_many, address = lookup_many_function()

    def run():
        start = time.perf_counter_ns()
        lookup_many(address(manager), c_keys, n_keys, address(request), results)
        return time.perf_counter_ns() - start

    elapsed = best(repeats, run)
    assert all(r == int(Kv.LookupResult.MISS) for r in results)
    manager.on_request_finished(request)
    manager.shutdown()
    return elapsed / n_keys / 1000.0


def time_python_lookup_calls(n_keys, repeats):
    """Python → C invoker → Python vfunc, for reference."""
    buffer = Kv.HostBuffer.new(1, SLOT)
    tier = LookupTier(primary=buffer)
    request = Kv.Request.new('bench', None)
    keys = [key(i) for i in range(n_keys)]

    def run():
        lookup = tier.lookup
        start = time.perf_counter_ns()
        for k in keys:
            lookup(k, request)
        return time.perf_counter_ns() - start

    return best(repeats, run) / n_keys / 1000.0


# ---- submit_store ----------------------------------------------------------------

def time_stores(n_stores, make_tiers, repeats):
    manager, buffer = manager_with(n_stores + 1, make_tiers)
    tiers = [manager.get_tier(i) for i in range(manager.get_n_tiers())]
    request = Kv.Request.new('bench', None)
    manager.on_new_request(request)
    next_key = [0]

    def drain():
        for t in tiers:
            if isinstance(t, StoreTier):
                t.finish()
        manager.on_schedule_end(Kv.ScheduleEnd.new(None, None))
        while manager.has_pending_work():
            # C tiers complete on their own threads: sleep on the wake-up fd.
            import select
            select.select([manager.get_wakeup_fd()], [], [], 10)
            manager.on_schedule_end(Kv.ScheduleEnd.new(None, None))
        manager.reset_cache()

    def run():
        batches = []
        for _ in range(n_stores):
            k = [key(next_key[0])]
            next_key[0] += 1
            prepared = manager.prepare_store(k, request)
            batches.append(prepared.get_keys_to_store())
        start = time.perf_counter_ns()
        for keys in batches:
            manager.complete_store(keys, request, True)
        elapsed = time.perf_counter_ns() - start
        drain()
        return elapsed

    elapsed = best(repeats, run)
    manager.on_request_finished(request)
    manager.shutdown()
    return elapsed / n_stores / 1000.0


def example_tier_factory():
    registry = Kv.TierRegistry.new()
    try:
        registry.load_plugins()
        registry.lookup_tier_type('example')
    except GLib.Error as e:
        print(f'# example tier not available ({e.message}); set KVTIER_PLUGIN_PATH',
              file=sys.stderr)
        return None
    return lambda b: registry.create_tier('example', b, None, None)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--iterations', type=int, default=20000)
    parser.add_argument('--tiers', type=int, default=8)
    parser.add_argument('--repeats', type=int, default=5)
    args = parser.parse_args()
    n, k, r = args.iterations, args.tiers, args.repeats

    with_py = time_lookups(n, True, r)
    without = time_lookups(n, False, r)
    direct = time_python_lookup_calls(n, r)
    print(f'lookup, C manager -> Python tier:  {with_py:7.2f} us/key '
          f'(no secondary tier: {without:.2f} us/key)')
    print(f'  => Python lookup vfunc round trip: {with_py - without:.2f} us/call (target <= 20)')
    print(f'  (for reference, Python -> C invoker -> Python vfunc: {direct:.2f} us/call)')

    n_stores = max(n // (4 * k), 100)
    py_stores = time_stores(n_stores, [lambda b: StoreTier(primary=b)] * k, r)
    no_tier = time_stores(n_stores, [], r)
    print(f'complete_store of 1 key, {k} Python tiers: {py_stores:7.2f} us '
          f'(no tier: {no_tier:.2f} us)')
    per_py = (py_stores - no_tier) / k
    print(f'  => Python submit_store round trip incl. job bookkeeping: {per_py:.2f} us/job '
          f'(target <= 20)')
    example = example_tier_factory()
    if example is not None:
        c_stores = time_stores(n_stores, [example] * k, r)
        per_c = (c_stores - no_tier) / k
        print(f'complete_store of 1 key, {k} C example tiers: {c_stores:7.2f} us '
              f'=> {per_c:.2f} us/job (for comparison: C vfunc + thread-pool hand-off)')


if __name__ == '__main__':
    os.environ.setdefault('G_SLICE', 'always-malloc')
    main()
