// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The manager never calls JavaScript off the main thread.
//
// The example tier (plugins/example) completes its jobs on a pool of
// worker threads. Next to it runs a JS tier, and JS handlers are connected
// to ::job-finished of both. All JS must run on the main thread: GJS
// refuses a call from any other thread with a "different thread" critical
// and a zeroed result. runChecked.js runs this script without
// fatal-criticals and fails on any such message, so a violation shows up
// as a failure naming the call instead of an abort.

import GLib from 'gi://GLib';
import GObject from 'gi://GObject';
import Kv from 'gi://Kv?version=1';

import {Engine, pattern} from './engine.js';
import {FileTier} from './fileTier.js';
import {assert, assertBytesEqual, assertEqual, run, tempDirectory, test} from './harness.js';

const N_SLOTS = 16;
const N_KEYS = 96;

// A JS tier that checks, on every vfunc call, that it runs on the thread
// that owns the default main context (the main thread).
const CheckedTier = GObject.registerClass({GTypeName: 'JsCheckedTier'},
class CheckedTier extends FileTier {
    constructor(properties = {}) {
        super(properties);
        this.nCalls = 0;
        this.nOffThread = 0;
    }

    _check() {
        this.nCalls++;
        if (!GLib.MainContext.default().is_owner())
            this.nOffThread++;
    }

    vfunc_lookup(key, request) {
        this._check();
        return super.vfunc_lookup(key, request);
    }

    vfunc_submit_store(job) {
        this._check();
        return super.vfunc_submit_store(job);
    }

    vfunc_submit_load(job) {
        this._check();
        return super.vfunc_submit_load(job);
    }

    vfunc_on_new_request(request) {
        this._check();
        return super.vfunc_on_new_request(request);
    }

    vfunc_on_request_finished(_request) {
        this._check();
    }

    vfunc_on_schedule_end(_scheduleEnd) {
        this._check();
    }

    vfunc_has_pending_work() {
        this._check();
        return this._inFlight > 0;
    }
});

function exampleTier(buffer) {
    const registry = Kv.TierRegistry.new();
    registry.load_plugins();
    return registry.create_tier('example', buffer, null, new GLib.Variant('a{sv}', {
        'n-workers': new GLib.Variant('u', 4),
    }));
}

test('worker-thread completions reach JS only on the main thread', async () => {
    // Tests run inside the main loop, so the main thread owns the default
    // context and is_owner() is false on any other thread.
    const engine = new Engine({nSlots: N_SLOTS, nKeys: N_KEYS});
    const example = exampleTier(engine.buffer);
    const jsTier = new CheckedTier({
        primary: engine.buffer,
        tier_type: 'jschecked',
        directory: tempDirectory(),
    });
    engine.manager.add_tier(example);
    engine.manager.add_tier(jsTier);

    const seen = {example: 0, js: 0, offThread: 0};
    const onFinished = name => (_, result) => {
        seen[name]++;
        if (!GLib.MainContext.default().is_owner())
            seen.offThread++;
        assert(result.get_success(), `${name} job ${result.get_job_id()} failed`);
    };
    example.connect('job-finished', onFinished('example'));
    jsTier.connect('job-finished', onFinished('js'));

    // Many small requests: every store cascades to both tiers, the example
    // tier's workers complete concurrently with the main loop.
    const requests = [];
    for (let first = 0; first < N_KEYS; first += 4) {
        const request = Kv.Request.new(`r${first}`, null);
        requests.push(request);
        engine.manager.on_new_request(request);
        engine.store(request, [first, first + 1, first + 2, first + 3]);
        if (first % 16 === 12)
            // eslint-disable-next-line no-await-in-loop
            await engine.waitIdle();
    }
    await engine.waitIdle();
    const nStores = N_KEYS / 4;
    assertEqual(seen.example, nStores, 'example tier jobs reported');
    assertEqual(seen.js, nStores, 'JS tier jobs reported');

    // Promote evicted keys: the manager asks both tiers; the example tier
    // (first) serves them from its workers.
    const request = requests[0];
    for (let i = 0; i < 8; i += 2) {
        if (engine.primary.lookup(engine.keys[i]) === Kv.LookupResult.HIT)
            continue;
        assertEqual(engine.manager.lookup(engine.keys[i], request), Kv.LookupResult.HIT_PENDING,
            `lookup of key ${i}`);
        // eslint-disable-next-line no-await-in-loop
        await engine.waitIdle();
        assertEqual(engine.manager.lookup(engine.keys[i], request), Kv.LookupResult.HIT,
            `lookup of key ${i} after promotion`);
        assertBytesEqual(engine.slotBytes(i), pattern(i), `promoted slot of key ${i}`);
    }

    for (const r of requests)
        engine.manager.on_request_finished(r);
    assert(engine.manager.shutdown(), 'shutdown');

    assert(seen.example > nStores, 'the example tier served promotions');
    assertEqual(seen.offThread, 0, 'job-finished handlers run off the main thread');
    assert(jsTier.nCalls > 0, 'the JS tier was called');
    assertEqual(jsTier.nOffThread, 0, 'JS vfunc calls off the main thread');
});

run();
