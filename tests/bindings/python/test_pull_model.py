# SPDX-License-Identifier: LGPL-2.1-or-later
"""The pull model (issue #23): a Python tier that reports only through its
own do_get_finished_jobs(), as vLLM's tiers do. Whatever waits for its jobs
(drain_jobs, reset_cache, shutdown, with or without deadline-ms) collects
what it finished: the job is reported with the tier's own result, once,
with ::job-finished. Each case runs on its own thread with a time limit, so
that a hang (reset_cache waited for ever before the fix) fails the case."""

import threading

import pytest
from conftest import SLOT_SIZE, make_key
from gi.repository import Kv

CASE_TIMEOUT = 20.0


class PullTier(Kv.SecondaryTier):
    """Finishes each job in submit and hands the result out when pulled."""

    __gtype_name__ = 'PyPullTier'

    def __init__(self, finish_later=False, **properties):
        super().__init__(**properties)
        self._lock = threading.Lock()
        self._done = []
        self._threads = []
        self._finish_later = finish_later

    def do_lookup(self, key, request):
        return Kv.LookupResult.MISS

    def do_on_new_request(self, request):
        return Kv.OffloadPolicy.CHUNK_LEVEL

    def _finish(self, job):
        with self._lock:
            self._done.append(Kv.JobResult.new(job.get_id(), True))

    def do_submit_store(self, job):
        if self._finish_later:
            thread = threading.Timer(0.1, self._finish, (job,))
            self._threads.append(thread)
            thread.start()
        else:
            self._finish(job)
        return True

    def do_submit_load(self, job):
        return self.do_submit_store(job)

    def do_get_finished_jobs(self):
        with self._lock:
            done, self._done = self._done, []
        return done

    def do_drain_jobs(self):
        for thread in self._threads:
            thread.join()
        return True

    def do_shutdown(self):
        return self.do_drain_jobs()


def scenario(wait, deadline_ms, finish_later, outcome):
    buffer = Kv.HostBuffer.new(4, SLOT_SIZE)
    primary = Kv.PrimaryTier.new(buffer, None, True)
    manager = Kv.TieringManager.new(primary)
    tier = PullTier(finish_later=finish_later, primary=buffer, tier_type='pypull',
                    deadline_ms=deadline_ms)
    manager.add_tier(tier)
    finished = []
    tier.connect('job-finished', lambda t, r: finished.append((r.get_job_id(), r.get_success())))

    request = Kv.Request.new('r', None)
    key = make_key(1)
    manager.on_new_request(request)
    manager.prepare_store([key], request)
    manager.complete_store([key], request, True)
    assert manager.get_n_active_jobs() == 1

    if wait == 'reset_cache':
        manager.reset_cache()
    elif wait == 'drain':
        tier.drain_jobs()
        assert tier.get_n_jobs_in_flight() == 0
        manager.on_schedule_end(Kv.ScheduleEnd.new(None, None))
        manager.on_schedule_end(Kv.ScheduleEnd.new(None, None))
    else:
        manager.shutdown()

    outcome['finished'] = list(finished)
    outcome['active'] = manager.get_n_active_jobs()
    outcome['expired'] = tier.get_n_expired_jobs()
    outcome['late'] = tier.get_n_late_completions()
    if wait != 'shutdown':
        manager.shutdown()
        outcome['after_shutdown'] = list(finished)


@pytest.mark.parametrize('finish_later', [False, True], ids=['in-submit', 'later'])
@pytest.mark.parametrize('deadline_ms', [0, 2000], ids=['no-deadline', 'deadline'])
@pytest.mark.parametrize('wait', ['reset_cache', 'drain', 'shutdown'])
def test_pulled_results_are_collected(wait, deadline_ms, finish_later):
    outcome = {}
    errors = []

    def run():
        try:
            scenario(wait, deadline_ms, finish_later, outcome)
        except BaseException as e:  # reported on the test's thread
            errors.append(e)

    # The whole scenario runs on one thread, which owns the manager.
    thread = threading.Thread(target=run, name='owner', daemon=True)
    thread.start()
    thread.join(CASE_TIMEOUT)
    assert not thread.is_alive(), f'{wait} did not return within {CASE_TIMEOUT:.0f} s'
    if errors:
        raise errors[0]

    job_ids = [job_id for job_id, _ in outcome['finished']]
    assert len(job_ids) == 1, outcome
    assert outcome['finished'][0][1] is True, 'reported failed instead of with the tier\'s result'
    assert outcome['active'] == 0
    assert outcome['expired'] == 0
    assert outcome['late'] == 0
    if wait != 'shutdown':
        assert outcome['after_shutdown'] == outcome['finished']
