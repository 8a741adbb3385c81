#!/usr/bin/env -S gjs -m
// SPDX-License-Identifier: LGPL-2.1-or-later
//
// kvtier from JavaScript: a tier written in JS, registered by name, used by
// a manager built from a configuration dictionary, and driven from the main
// loop through the manager's GSource.
//
// Run it against a build tree with
//   GI_TYPELIB_PATH=build/kvtier LD_LIBRARY_PATH=build/kvtier gjs -m bindings/gjs/example.js
//
// It stores eight chunks through a primary tier of four slots, so the first
// four are evicted to the JS tier, then looks one of them up again: the
// manager promotes it back from the JS tier, and the example checks that
// the primary slot holds the bytes that were stored.

import GLib from 'gi://GLib';
import GObject from 'gi://GObject';
import Kv from 'gi://Kv?version=1';
import System from 'system';

const SLOT_SIZE = 4096;

// A tier that keeps chunks in a Map and finishes every job from an idle
// callback: its vfuncs return at once and it reports from the main loop,
// the way a tier doing GIO I/O does.
const MapTier = GObject.registerClass({GTypeName: 'ExampleJsMapTier'},
class MapTier extends Kv.SecondaryTier {
    constructor(properties = {}) {
        super(properties);
        this._chunks = new Map();
        this._inFlight = 0;
    }

    vfunc_lookup(key, _request) {
        return this._chunks.has(key.to_string()) ? Kv.LookupResult.HIT : Kv.LookupResult.MISS;
    }

    vfunc_on_new_request(_request) {
        return Kv.OffloadPolicy.CHUNK_LEVEL;
    }

    vfunc_submit_store(job) {
        return this._later(job, (key, slot, primary) => {
            // read_slot() and toArray() do not copy: the array is a view of
            // the slot, which is reused once the job is reported. Keep a copy.
            this._chunks.set(key.to_string(), primary.read_slot(slot).toArray().slice());
        });
    }

    vfunc_submit_load(job) {
        return this._later(job, (key, slot, primary) => {
            primary.write_slot(slot, new GLib.Bytes(this._chunks.get(key.to_string())));
        });
    }

    vfunc_drain_jobs() {
        while (this._inFlight > 0)
            GLib.MainContext.default().iteration(true);
        return true;
    }

    _later(job, copy) {
        this._inFlight++;
        GLib.idle_add(GLib.PRIORITY_DEFAULT, () => {
            const primary = this.get_primary();
            let success = true;
            job.get_keys().forEach((key, i) => {
                try {
                    copy(key, job.get_chunk_ids()[i], primary);
                } catch (e) {
                    logError(e, `job ${job.get_id()}`);
                    success = false;
                }
            });
            this.complete_job(Kv.JobResult.new(job.get_id(), success));
            this._inFlight--;
            return GLib.SOURCE_REMOVE;
        });
        return true;
    }
});

function chunk(i) {
    return new Uint8Array(SLOT_SIZE).fill(0x41 + i);
}

function key(i) {
    return Kv.Key.new(new Uint8Array(32).fill(i), 0);
}

// Configuration files name tiers by type; so does the dictionary form.
Kv.TierRegistry.get_default().register_tier_type('js-map', MapTier.$gtype);
const config = Kv.Config.new_from_variant(null, new GLib.Variant('a{sv}', {
    primary: new GLib.Variant('a{sv}', {
        'size': new GLib.Variant('s', '16KiB'),
        'slot-size': new GLib.Variant('s', '4KiB'),
    }),
    tiers: new GLib.Variant('aa{sv}', [{
        name: new GLib.Variant('s', 'memory'),
        type: new GLib.Variant('s', 'js-map'),
    }]),
}));
const manager = config.create_manager();
const buffer = manager.get_primary().get_buffer();
const request = Kv.Request.new('example-request', null);

// One engine step: the first manager call of a step consumes the results
// that tiers reported since the previous step.
function step() {
    manager.on_schedule_end(Kv.ScheduleEnd.new(null, null));
}

// Resolves when no job is in flight, stepping each time the manager's
// source says a tier reported something.
function settle() {
    step();
    return new Promise(resolve => {
        if (!manager.has_pending_work()) {
            resolve();
            return;
        }
        const source = manager.create_source();
        source.set_callback(() => {
            step();
            if (manager.has_pending_work())
                return GLib.SOURCE_CONTINUE;
            resolve();
            return GLib.SOURCE_REMOVE;
        });
        source.attach(null);
    });
}

function store(indices) {
    const prepared = manager.prepare_store(indices.map(key), request);
    const slots = prepared.get_chunk_ids();
    prepared.get_keys_to_store().forEach((k, n) => {
        buffer.write_slot(slots[n], new GLib.Bytes(chunk(k.get_hash_bytes().toArray()[0])));
    });
    manager.complete_store(prepared.get_keys_to_store(), request, true);
    return prepared.get_evicted_keys().length;
}

async function main() {
    manager.on_new_request(request);
    store([0, 1, 2, 3]);
    await settle();
    const evicted = store([4, 5, 6, 7]);
    await settle();
    print(`stored 8 chunks in 4 slots; ${evicted} evicted to the JS tier`);

    const first = manager.lookup(key(0), request);
    print(`lookup of chunk 0: ${Kv.lookup_result_to_string(first)}`);
    await settle();
    const second = manager.lookup(key(0), request);
    print(`lookup of chunk 0 after the promotion: ${Kv.lookup_result_to_string(second)}`);

    const [, slot] = manager.get_primary().get_chunk_id(key(0));
    const bytes = buffer.read_slot(slot).toArray();
    const intact = bytes.every(b => b === 0x41);
    print(`slot ${slot} holds the stored bytes: ${intact}`);

    manager.on_request_finished(request);
    manager.shutdown();
    return second === Kv.LookupResult.HIT && intact;
}

const loop = new GLib.MainLoop(null, false);
let ok = false;
main().then(result => {
    ok = result;
}).catch(e => {
    logError(e);
}).finally(() => loop.quit());
loop.run();
System.exit(ok ? 0 : 1);
