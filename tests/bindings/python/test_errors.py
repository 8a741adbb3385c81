# SPDX-License-Identifier: LGPL-2.1-or-later
"""Exceptions in Python vfuncs: a GLib.Error reaches the caller as that
error; any other exception becomes a failed job or a MISS with a clear log
line, never a hang or a crash."""

import pytest
from gi.repository import GLib, Kv
from memtier import MemTier

NO_ROOM = 'no room left in the python tier'


def tier_error(code, message):
    return GLib.Error.new_literal(Kv.tier_error_quark(), message, code)


class RaisingTier(MemTier):
    """MemTier whose vfuncs raise what the test puts in `raises`."""

    __gtype_name__ = 'PyRaisingTier'

    def __init__(self, **properties):
        super().__init__(**properties)
        self.raises = {}

    def _maybe_raise(self, name):
        exc = self.raises.get(name)
        if exc is not None:
            raise exc

    def do_lookup(self, key, request):
        self._maybe_raise('lookup')
        return super().do_lookup(key, request)

    def do_on_new_request(self, request):
        self._maybe_raise('on_new_request')
        return Kv.OffloadPolicy.REQUEST_LEVEL

    def do_submit_store(self, job):
        self._maybe_raise('submit_store')
        return super().do_submit_store(job)

    def do_submit_load(self, job):
        self._maybe_raise('submit_load')
        return super().do_submit_load(job)

    def do_drain_jobs(self):
        self._maybe_raise('drain_jobs')
        return super().do_drain_jobs()

    def do_shutdown(self):
        self._maybe_raise('shutdown')
        return super().do_shutdown()


@pytest.fixture
def tier(engine):
    t = RaisingTier(primary=engine.buffer, tier_type='pyraise')
    engine.manager.add_tier(t)
    t.finished = []
    t.connect('job-finished', lambda _, r: t.finished.append((r.get_job_id(), r.get_success())))
    yield t
    t.raises.clear()


@pytest.fixture
def req(engine):
    r = Kv.Request.new('r1', None)
    engine.manager.on_new_request(r)
    yield r
    engine.manager.on_request_finished(r)


def one_job(engine, req, index=0, is_promotion=False):
    return Kv.TransferJob.new(99, [engine.keys[index]], [0], is_promotion, req)


# ---- through the invokers, called from Python ------------------------------

def test_glib_error_from_submit_store_reaches_invoker_caller(engine, tier, req):
    tier.raises['submit_store'] = tier_error(Kv.TierError.NO_SPACE, NO_ROOM)
    with pytest.raises(GLib.Error) as info:
        tier.submit_store(one_job(engine, req))
    assert info.value.matches(Kv.tier_error_quark(), Kv.TierError.NO_SPACE)
    assert info.value.message == NO_ROOM


def test_glib_error_of_another_domain_is_kept(engine, tier, req):
    tier.raises['submit_load'] = GLib.Error.new_literal(
        GLib.file_error_quark(), 'disk went away', GLib.FileError.IO)
    with pytest.raises(GLib.Error) as info:
        tier.submit_load(one_job(engine, req, is_promotion=True))
    assert info.value.matches(GLib.file_error_quark(), GLib.FileError.IO)
    assert info.value.message == 'disk went away'


def test_glib_error_from_drain_jobs(tier):
    tier.raises['drain_jobs'] = tier_error(Kv.TierError.TIMED_OUT, 'drain took too long')
    with pytest.raises(GLib.Error) as info:
        tier.drain_jobs()
    assert info.value.matches(Kv.tier_error_quark(), Kv.TierError.TIMED_OUT)


def test_other_exception_in_submit_store_is_failed_error(engine, tier, req, capfd):
    tier.raises['submit_store'] = RuntimeError('python bug in submit_store')
    with pytest.raises(GLib.Error) as info:
        tier.submit_store(one_job(engine, req))
    # The invoker turns "FALSE without a GError" into KV_TIER_ERROR_FAILED
    # naming the type and the vfunc ...
    assert info.value.matches(Kv.tier_error_quark(), Kv.TierError.FAILED)
    assert 'PyRaisingTier.submit_store failed without setting an error' in info.value.message
    # ... and PyGObject printed the exception itself.
    err = capfd.readouterr().err
    assert 'RuntimeError: python bug in submit_store' in err


def test_other_exception_in_lookup_is_miss(engine, tier, req, capfd):
    tier.raises['lookup'] = ValueError('python bug in lookup')
    assert tier.lookup(engine.keys[0], req) == Kv.LookupResult.MISS
    assert 'ValueError: python bug in lookup' in capfd.readouterr().err


def test_other_exception_in_on_new_request_is_chunk_level(engine, tier, capfd):
    tier.raises['on_new_request'] = KeyError('python bug in on_new_request')
    r = Kv.Request.new('r2', None)
    assert engine.manager.on_new_request(r) == Kv.OffloadPolicy.CHUNK_LEVEL
    assert "KeyError: 'python bug in on_new_request'" in capfd.readouterr().err
    engine.manager.on_request_finished(r)


# ---- through the manager ----------------------------------------------------

def test_manager_reports_refused_store_as_failed(engine, tier, req, capfd):
    tier.raises['submit_store'] = RuntimeError('python bug in submit_store')
    engine.store(req, range(2))
    engine.wait_idle()          # would time out if the job were never reported
    assert tier.finished == [(0, False)]
    err = capfd.readouterr().err
    assert 'RuntimeError: python bug in submit_store' in err
    assert 'refused store job 0' in err
    assert 'PyRaisingTier.submit_store failed without setting an error' in err
    # The chunks were unpinned: they are ready and evictable in the primary.
    for i in range(2):
        assert engine.primary.get_ref_count(engine.keys[i]) == (True, 0)
    assert not tier.contains(engine.keys[0])

    # The tier keeps working once the bug is gone.
    del tier.raises['submit_store']
    engine.store(req, [2])
    engine.wait_idle()
    assert tier.finished == [(0, False), (1, True)]
    assert tier.contains(engine.keys[2])


def test_manager_logs_glib_error_of_refused_store(engine, tier, req, capfd):
    tier.raises['submit_store'] = tier_error(Kv.TierError.NO_SPACE, NO_ROOM)
    engine.store(req, [0])
    engine.wait_idle()
    assert tier.finished == [(0, False)]
    err = capfd.readouterr().err
    assert 'refused store job 0: ' + NO_ROOM in err


def test_manager_reports_refused_load_as_failed(engine, tier, req, capfd):
    engine.store(req, range(4))
    engine.wait_idle()
    engine.store(req, range(4, 8))      # evicts 0-3 from the primary tier
    engine.wait_idle()
    tier.raises['submit_load'] = ZeroDivisionError('python bug in submit_load')
    assert engine.manager.lookup(engine.keys[0], req) == Kv.LookupResult.HIT_PENDING
    engine.step()
    engine.wait_idle()
    assert tier.finished[-1] == (2, False)
    err = capfd.readouterr().err
    assert 'ZeroDivisionError: python bug in submit_load' in err
    assert 'refused load job 2' in err
    # The failed promotion freed its slot: the key is a miss in the primary
    # and the next lookup asks the tier again.
    assert engine.primary.lookup(engine.keys[0]) == Kv.LookupResult.MISS
    del tier.raises['submit_load']
    assert engine.manager.lookup(engine.keys[0], req) == Kv.LookupResult.HIT_PENDING
    engine.step()
    engine.wait_idle()
    assert engine.manager.lookup(engine.keys[0], req) == Kv.LookupResult.HIT


def test_manager_lookup_exception_is_miss(engine, tier, req, capfd):
    engine.store(req, range(4))
    engine.wait_idle()
    engine.store(req, range(4, 8))
    engine.wait_idle()
    tier.raises['lookup'] = ValueError('python bug in lookup')
    assert engine.manager.lookup(engine.keys[0], req) == Kv.LookupResult.MISS
    assert not engine.manager.has_pending_work()
    assert 'ValueError: python bug in lookup' in capfd.readouterr().err


def test_manager_shutdown_error_names_tier(engine, tier, capfd):
    tier.raises['shutdown'] = tier_error(Kv.TierError.FAILED, 'worker refused to stop')
    with pytest.raises(GLib.Error) as info:
        engine.shutdown()
    assert info.value.matches(Kv.tier_error_quark(), Kv.TierError.FAILED)
    assert 'pyraise' in info.value.message
    assert 'worker refused to stop' in info.value.message
    assert 'failed to shut down' in capfd.readouterr().err
    # Stop the worker the test tier still runs.
    del tier.raises['shutdown']
    assert tier.shutdown()
