// SPDX-License-Identifier: LGPL-2.1-or-later
//
// A JavaScript tier (fileTier.js) driven by the C Kv.TieringManager from
// JS: cascade, eviction, promotion and loads with byte-exact checks, job
// completion from GIO callbacks, errors, and registration by name.

import GLib from 'gi://GLib';
import Gio from 'gi://Gio';
import GObject from 'gi://GObject';
import Kv from 'gi://Kv?version=1';

import {Engine, pattern} from './engine.js';
import {FileTier} from './fileTier.js';
import {
    assert, assertBytesEqual, assertDeepEqual, assertEqual, assertThrows, run, tempDirectory, test,
} from './harness.js';

const {HIT, HIT_PENDING, MISS} = Kv.LookupResult;

// A FileTier that records its vfunc calls and can be told to throw.
const TestTier = GObject.registerClass({GTypeName: 'JsTestTier'},
class TestTier extends FileTier {
    constructor(properties = {}) {
        super(properties);
        this.calls = [];
        this.throws = {};
        this.finished = [];
        this.connect('job-finished', (_, result) => {
            this.finished.push([result.get_job_id(), result.get_success()]);
        });
    }

    _call(name) {
        this.calls.push(name);
        if (this.throws[name])
            throw this.throws[name];
    }

    vfunc_lookup(key, request) {
        this._call('lookup');
        return super.vfunc_lookup(key, request);
    }

    vfunc_submit_store(job) {
        this._call('submit_store');
        return super.vfunc_submit_store(job);
    }

    vfunc_submit_load(job) {
        this._call('submit_load');
        return super.vfunc_submit_load(job);
    }

    vfunc_touch(keys, _request) {
        this._call('touch');
        this.touched = keys.length;
    }

    vfunc_drain_jobs() {
        this._call('drain_jobs');
        return super.vfunc_drain_jobs();
    }
});

function setup(nSlots = 4) {
    const engine = new Engine({nSlots});
    const tier = new TestTier({
        primary: engine.buffer,
        tier_type: 'jsfile',
        directory: tempDirectory(),
    });
    engine.manager.add_tier(tier);
    const request = Kv.Request.new('r1', null);
    engine.manager.on_new_request(request);
    return {engine, tier, request};
}

function teardown({engine, request}) {
    engine.manager.on_request_finished(request);
    engine.manager.shutdown();
}

function fileBytes(tier, key) {
    const [, contents] = GLib.file_get_contents(
        GLib.build_filenamev([tier.directory, `${key.to_string()}-${key.get_group()}`]));
    return contents;
}

async function promote(engine, request, indices) {
    assertDeepEqual(engine.lookupAll(request, indices), indices.map(() => HIT_PENDING),
        `first lookup of ${indices}`);
    engine.step();              // promotions are submitted at the end of a step
    await engine.waitIdle();
    assertDeepEqual(engine.lookupAll(request, indices), indices.map(() => HIT),
        `lookup of ${indices} after the promotion`);
}

test('a JS tier has the properties it was constructed with', () => {
    const s = setup();
    assertEqual(s.tier.get_tier_type(), 'jsfile', 'tier-type');
    assertEqual(s.tier.get_block_size_bytes(), 4096, 'block size');
    assert(s.tier.get_primary() === s.engine.buffer, 'primary');
    assert(s.engine.manager.get_tier(0) === s.tier, 'the manager holds the JS object');
    teardown(s);
});

test('read_slot().toArray() is a view of the slot, not a copy', () => {
    const buffer = Kv.HostBuffer.new(2, 4096);
    const view = buffer.read_slot(1).toArray();
    buffer.write_slot(1, new GLib.Bytes(new Uint8Array([7, 8, 9])));
    assertDeepEqual([view[0], view[1], view[2]], [7, 8, 9], 'later writes seen through the array');
    view[3] = 42;
    assertEqual(buffer.read_slot(1).toArray()[3], 42, 'writes through the array');
    assertEqual(buffer.read_slot(0).toArray()[3], 0, 'other slots untouched');
});

test('a cascade writes the exact slot bytes to files from GIO callbacks', async () => {
    const s = setup();
    s.engine.store(s.request, [0, 1, 2, 3]);
    // The job is reported from a GIO callback: not before the loop ran.
    assertDeepEqual(s.tier.finished, [], 'results before the main loop ran');
    assert(s.engine.manager.has_pending_work(), 'the store is in flight');
    await s.engine.waitIdle();
    assertDeepEqual(s.tier.finished, [[0, true]], 'job-finished');
    for (let i = 0; i < 4; i++)
        assertBytesEqual(fileBytes(s.tier, s.engine.keys[i]), pattern(i), `file of key ${i}`);
    teardown(s);
});

test('cascade, eviction, promotion and load cycles keep every byte', async () => {
    const s = setup();
    const {engine, tier, request} = s;

    for (let r = 0; r < 3; r++) {
        const indices = [0, 1, 2, 3].map(i => 4 * r + i);
        const prepared = engine.store(request, indices);
        const evicted = prepared.get_evicted_keys().map(k => engine.index(k)).sort((a, b) => a - b);
        assertDeepEqual(evicted, r === 0 ? [] : [0, 1, 2, 3].map(i => 4 * (r - 1) + i),
            `evicted in round ${r}`);
        // eslint-disable-next-line no-await-in-loop
        await engine.waitIdle();
        for (const i of indices)
            assertBytesEqual(engine.slotBytes(i), pattern(i), `slot of key ${i}`);
    }
    for (let i = 0; i < 12; i++) {
        assertEqual(engine.primary.lookup(engine.keys[i]), i >= 8 ? HIT : MISS,
            `primary lookup of key ${i}`);
    }

    let loads = 0;
    for (let round = 0; round < 2; round++) {
        for (let first = 0; first < 12; first += 2) {
            const pair = [first, first + 1];
            if (pair.every(i => engine.primary.lookup(engine.keys[i]) === HIT))
                continue;
            // eslint-disable-next-line no-await-in-loop
            await promote(engine, request, pair);
            loads++;
            engine.load(request, pair).forEach((bytes, n) => {
                assertBytesEqual(bytes, pattern(pair[n]), `loaded slot of key ${pair[n]}`);
            });
            engine.manager.touch(pair.map(i => engine.keys[i]), request);
            assertEqual(tier.touched, 2, 'keys passed to vfunc_touch');
        }
    }
    assertEqual(loads, 12, 'promotions');
    assertEqual(tier.calls.filter(c => c === 'submit_load').length, loads, 'submit_load calls');
    assertEqual(tier.finished.length, 3 + loads, 'reported jobs');
    assert(tier.finished.every(([, ok]) => ok), 'every job succeeded');
    teardown(s);
});

test('shutdown drains jobs still in flight', () => {
    const s = setup();
    s.engine.store(s.request, [0, 1]);
    assertDeepEqual(s.tier.finished, [], 'nothing reported yet');
    s.engine.manager.on_request_finished(s.request);
    s.engine.manager.shutdown();      // iterates the main context until reported
    assertDeepEqual(s.tier.finished, [[0, true]], 'reported by shutdown');
    assert(s.tier.calls.includes('drain_jobs'), 'shutdown drained the tier');
});

test('a GLib.Error thrown by a JS vfunc reaches the caller as that error', () => {
    const s = setup();
    s.tier.throws.submit_store = new GLib.Error(Kv.tier_error_quark(),
        Kv.TierError.NO_SPACE, 'no room in the JS tier');
    const job = Kv.TransferJob.new(99, [s.engine.keys[0]], [0], false, s.request);
    assertThrows(() => s.tier.submit_store(job), e => {
        assert(e.matches(Kv.tier_error_quark(), Kv.TierError.NO_SPACE), `error ${e}`);
        assertEqual(e.message, 'no room in the JS tier', 'message');
    }, 'submit_store');
    delete s.tier.throws.submit_store;
    teardown(s);
});

test('a JS exception in submit_store fails the job and the manager goes on', async () => {
    const s = setup();
    s.tier.throws.submit_store = new TypeError('JS bug in submit_store');
    s.engine.store(s.request, [0]);
    await s.engine.waitIdle();
    assertDeepEqual(s.tier.finished, [[0, false]], 'the refused job is reported failed');
    assertDeepEqual(s.engine.primary.get_ref_count(s.engine.keys[0]), [true, 0], 'unpinned');

    delete s.tier.throws.submit_store;
    s.engine.store(s.request, [1]);
    await s.engine.waitIdle();
    assertDeepEqual(s.tier.finished, [[0, false], [1, true]], 'the next job works');
    teardown(s);
});

test('a JS exception in lookup is a miss', () => {
    const s = setup();
    s.tier.throws.lookup = new RangeError('JS bug in lookup');
    assertEqual(s.engine.manager.lookup(s.engine.keys[5], s.request), MISS, 'lookup');
    assert(!s.engine.manager.has_pending_work(), 'nothing started');
    delete s.tier.throws.lookup;
    teardown(s);
});

test('a failed read fails the load job', async () => {
    const s = setup();
    const {engine, tier, request} = s;
    engine.store(request, [0, 1, 2, 3]);
    await engine.waitIdle();
    engine.store(request, [4, 5, 6, 7]);
    await engine.waitIdle();
    // Remove the file behind the tier's back: the GIO read fails.
    Gio.File.new_for_path(GLib.build_filenamev([tier.directory,
        `${engine.keys[0].to_string()}-0`])).delete(null);
    assertEqual(engine.manager.lookup(engine.keys[0], request), HIT_PENDING, 'lookup');
    engine.step();
    await engine.waitIdle();
    assertDeepEqual(tier.finished.at(-1), [2, false], 'the load is reported failed');
    assertEqual(engine.primary.lookup(engine.keys[0]), MISS, 'no half-loaded slot');
    teardown(s);
});

test('a JS tier registered by name is created from a config dict', async () => {
    const registry = Kv.TierRegistry.new();
    assert(registry.register_tier_type('jsfile', FileTier.$gtype), 'registered');
    assert(registry.list_tier_types().includes('jsfile'), 'listed');

    const directory = tempDirectory();
    const created = registry.create_tier('jsfile', Kv.HostBuffer.new(1, 4096), null,
        new GLib.Variant('a{sv}', {directory: new GLib.Variant('s', directory)}));
    assert(created instanceof FileTier, 'create_tier gives the JS class');
    assertEqual(created.directory, directory, 'directory property');
    assert(created.shutdown(), 'shutdown');

    const config = Kv.Config.new_from_variant(registry, new GLib.Variant('a{sv}', {
        primary: new GLib.Variant('a{sv}', {
            'size': new GLib.Variant('s', '16KiB'),
            'slot-size': new GLib.Variant('s', '4KiB'),
        }),
        tiers: new GLib.Variant('aa{sv}', [{
            name: new GLib.Variant('s', 'files'),
            type: new GLib.Variant('s', 'jsfile'),
            locality: new GLib.Variant('s', 'local'),
            directory: new GLib.Variant('s', directory),
        }]),
    }));
    const manager = config.create_manager();
    const engine = new Engine({manager});
    const tier = manager.get_tier(0);
    assert(tier instanceof FileTier, 'the configured tier is the JS class');
    assertEqual(tier.get_locality(), Kv.Locality.LOCAL, 'locality from the config');
    const request = Kv.Request.new('r1', null);
    manager.on_new_request(request);
    engine.store(request, [0, 1]);
    await engine.waitIdle();
    assertBytesEqual(fileBytes(tier, engine.keys[1]), pattern(1), 'stored file');
    manager.on_request_finished(request);
    manager.shutdown();
});

run();
