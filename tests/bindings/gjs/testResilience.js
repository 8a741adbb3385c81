// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Liveness a JavaScript tier inherits from Kv.SecondaryTier: a job whose
// completion callback never runs (as when GJS refuses a callback during
// garbage collection) fails at its deadline and drain_jobs returns; a late
// answer is dropped; a healthy tier's main-loop completions still arrive
// during drain_jobs; the breaker opens and a JavaScript probe closes it.

import GLib from 'gi://GLib';
import GObject from 'gi://GObject';
import Kv from 'gi://Kv?version=1';

import {Engine} from './engine.js';
import {assert, assertEqual, idle, run, test} from './harness.js';

const {HIT, HIT_PENDING, MISS} = Kv.LookupResult;

// Reports its jobs from main-loop callbacks, or never (hang = true). Its
// completions run on the owner's main context, which it names so that the
// inherited drain iterates it.
const JsLiveTier = GObject.registerClass({GTypeName: 'JsLiveTier'},
class JsLiveTier extends Kv.SecondaryTier {
    constructor(properties = {}) {
        super({completion_context: GLib.MainContext.default(), ...properties});
        this.jobs = [];
        this.calls = [];
        this.present = new Set();
        this.hang = false;
        this.fail = false;
        this.healthy = false;
    }

    vfunc_lookup(key, _request) {
        this.calls.push('lookup');
        return this.present.has(key.to_string()) ? HIT : MISS;
    }

    vfunc_on_new_request(_request) {
        return Kv.OffloadPolicy.CHUNK_LEVEL;
    }

    _accept(job) {
        this.jobs.push(job);
        if (this.hang)
            return true;    // the callback that would report it never runs
        GLib.idle_add(GLib.PRIORITY_DEFAULT, () => {
            this.complete_job(Kv.JobResult.new(job.get_id(), !this.fail));
            return GLib.SOURCE_REMOVE;
        });
        return true;
    }

    vfunc_submit_store(job) {
        this.calls.push('submit_store');
        return this._accept(job);
    }

    vfunc_submit_load(job) {
        this.calls.push('submit_load');
        return this._accept(job);
    }

    vfunc_probe(probeId, _cancellable) {
        this.calls.push('probe');
        GLib.idle_add(GLib.PRIORITY_DEFAULT, () => {
            this.complete_probe(probeId, this.healthy);
            return GLib.SOURCE_REMOVE;
        });
        return true;
    }
});

function addTier(engine, properties) {
    const tier = new JsLiveTier({
        primary: engine.buffer, medium: Kv.Medium.CPU, tier_type: 'jslive', ...properties,
    });
    engine.manager.add_tier(tier);
    return tier;
}

test('a JS tier that never answers: failed at the deadline, drain returns, no pin left', () => {
    const engine = new Engine();
    const tier = addTier(engine, {deadline_ms: 80});
    tier.hang = true;
    const req = Kv.Request.new('r', null);
    engine.manager.on_new_request(req);
    const start = GLib.get_monotonic_time();
    engine.store(req, [0]);
    engine.step();
    assertEqual(tier.calls.filter(c => c === 'submit_store').length, 1, 'stores submitted');
    assertEqual(engine.primary.get_ref_count(engine.keys[0])[1], 1, 'pinned by the cascade');

    assert(tier.drain_jobs(), 'drain_jobs');
    assert(GLib.get_monotonic_time() - start >= 80 * 1000, 'drain returned before the deadline');
    assertEqual(tier.get_n_expired_jobs(), 1, 'jobs failed at the deadline');
    engine.step();
    engine.step();
    assertEqual(engine.primary.get_ref_count(engine.keys[0])[1], 0, 'pin after the deadline');
    assertEqual(engine.manager.get_n_active_jobs(), 0, 'jobs in flight');

    // the callback runs after all: dropped and counted
    tier.complete_job(Kv.JobResult.new(tier.jobs[0].get_id(), true));
    engine.step();
    engine.step();
    assertEqual(tier.get_n_late_completions(), 1, 'late completions');

    // the next lookup reaches the tier
    tier.present.add(engine.keys[3].to_string());
    assertEqual(engine.manager.lookup(engine.keys[3], req), HIT_PENDING, 'next lookup');
    engine.manager.on_request_finished(req);
    engine.manager.shutdown();
});

test('a healthy JS tier: drain_jobs runs its main-loop completions, nothing expires', () => {
    const engine = new Engine();
    const tier = addTier(engine, {deadline_ms: 10000});
    const req = Kv.Request.new('r', null);
    engine.manager.on_new_request(req);
    engine.store(req, [0, 1]);
    engine.step();
    assert(tier.drain_jobs(), 'drain_jobs');
    assertEqual(tier.get_n_jobs_in_flight(), 0, 'jobs in flight');
    assertEqual(tier.get_n_expired_jobs(), 0, 'expired jobs');
    engine.step();
    engine.step();
    assertEqual(engine.manager.get_n_active_jobs(), 0, 'active jobs');
    engine.manager.on_request_finished(req);
    engine.manager.shutdown();
});

test('failures open the breaker; a JS probe closes it', async () => {
    const engine = new Engine();
    const clock = Kv.Clock.new_manual(0);
    const tier = addTier(engine, {clock, breaker_threshold: 2, breaker_open_ms: 50});
    const breaker = tier.get_circuit_breaker();
    const req = Kv.Request.new('r', null);
    engine.manager.on_new_request(req);
    tier.fail = true;
    engine.store(req, [0]);
    engine.store(req, [1]);
    engine.step();
    await idle();
    assertEqual(breaker.get_state(), Kv.CircuitState.OPEN, 'state after two failures');

    tier.present.add(engine.keys[0].to_string());
    tier.calls = [];
    assertEqual(tier.lookup(engine.keys[0], req), MISS, 'lookup while open');
    engine.store(req, [2]);
    assertEqual(tier.calls.length, 0, 'calls reaching the tier while open');

    clock.advance(50 * 1000);
    tier.lookup(engine.keys[0], req);        // starts the probe
    await idle();
    assertEqual(breaker.get_state(), Kv.CircuitState.OPEN, 'after a failed probe');
    tier.healthy = true;
    clock.advance(50 * 1000);
    tier.lookup(engine.keys[0], req);
    await idle();
    assertEqual(breaker.get_state(), Kv.CircuitState.CLOSED, 'after a healthy probe');
    assertEqual(tier.calls.filter(c => c === 'probe').length, 2, 'probes');
    assertEqual(tier.lookup(engine.keys[0], req), HIT, 'lookup once closed');
    engine.manager.on_request_finished(req);
    engine.manager.shutdown();
});

run();
