// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The pull model (issue #23): a JavaScript tier that reports only through
// its own vfunc_get_finished_jobs(), as vLLM's tiers do. Whatever waits for
// its jobs (drain_jobs, reset_cache, shutdown, with or without deadline-ms)
// collects what it finished: the job is reported with the tier's own
// result, once, with ::job-finished. Before the fix reset_cache waited for
// ever; meson's short timeout for this script turns that into a failure.

import GLib from 'gi://GLib';
import GObject from 'gi://GObject';
import Kv from 'gi://Kv?version=1';

import {assertDeepEqual, assertEqual, run, test} from './harness.js';

const SLOT_SIZE = 4096;

// Finishes each job in submit, or from a main-loop callback (later), and
// hands the result out when pulled.
const JsPullTier = GObject.registerClass({GTypeName: 'JsPullTier'},
class JsPullTier extends Kv.SecondaryTier {
    constructor(later, properties = {}) {
        super({completion_context: later ? GLib.MainContext.default() : null, ...properties});
        this.later = later;
        this.done = [];
    }

    vfunc_lookup(_key, _request) {
        return Kv.LookupResult.MISS;
    }

    vfunc_on_new_request(_request) {
        return Kv.OffloadPolicy.CHUNK_LEVEL;
    }

    vfunc_submit_store(job) {
        const result = Kv.JobResult.new(job.get_id(), true);
        if (this.later) {
            GLib.timeout_add(GLib.PRIORITY_DEFAULT, 100, () => {
                this.done.push(result);
                return GLib.SOURCE_REMOVE;
            });
        } else {
            this.done.push(result);
        }
        return true;
    }

    vfunc_submit_load(job) {
        return this.vfunc_submit_store(job);
    }

    vfunc_get_finished_jobs() {
        const done = this.done;
        this.done = [];
        return done;
    }

    // A tier whose jobs finish in main-loop callbacks lets them finish
    // before it stops (the default shutdown does nothing; the invoker then
    // fails whatever is still in flight).
    vfunc_shutdown() {
        if (this.later)
            this.wait_jobs();
        return true;
    }
});

function scenario(wait, deadlineMs, later) {
    const buffer = Kv.HostBuffer.new(4, SLOT_SIZE);
    const primary = Kv.PrimaryTier.new(buffer, null, true);
    const manager = Kv.TieringManager.new(primary);
    const tier = new JsPullTier(later, {primary: buffer, tier_type: 'jspull', deadline_ms: deadlineMs});
    manager.add_tier(tier);
    const finished = [];
    tier.connect('job-finished', (_, result) => finished.push([result.get_job_id(), result.get_success()]));

    const request = Kv.Request.new('r', null);
    const key = Kv.Key.new(new Uint8Array(16).fill(7), 0);
    manager.on_new_request(request);
    manager.prepare_store([key], request);
    manager.complete_store([key], request, true);
    assertEqual(manager.get_n_active_jobs(), 1, 'jobs in flight');

    if (wait === 'reset_cache') {
        manager.reset_cache();
    } else if (wait === 'drain') {
        tier.drain_jobs();
        assertEqual(tier.get_n_jobs_in_flight(), 0, 'jobs in flight after drain_jobs');
        manager.on_schedule_end(Kv.ScheduleEnd.new(null, null));
        manager.on_schedule_end(Kv.ScheduleEnd.new(null, null));
    } else {
        manager.shutdown();
    }

    assertEqual(finished.length, 1, 'jobs reported');
    assertEqual(finished[0][1], true, 'the tier\'s own result');
    assertEqual(manager.get_n_active_jobs(), 0, 'jobs left');
    assertEqual(tier.get_n_expired_jobs(), 0, 'jobs failed by their deadline');
    assertEqual(tier.get_n_late_completions(), 0, 'late completions');
    if (wait !== 'shutdown') {
        const before = JSON.stringify(finished);
        manager.shutdown();
        assertDeepEqual(JSON.stringify(finished), before, 'reports after shutdown');
    }
}

for (const wait of ['reset_cache', 'drain', 'shutdown']) {
    for (const deadlineMs of [0, 2000]) {
        for (const later of [false, true]) {
            test(`pull tier: ${wait}, deadline ${deadlineMs} ms, ${later ? 'finished from a callback' : 'finished in submit'}`,
                () => scenario(wait, deadlineMs, later));
        }
    }
}

run(20);
