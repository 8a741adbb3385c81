// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The engine side of the protocol for the GJS tests: a primary tier, a
// manager, keys with slot-sized byte patterns, and steps driven by the
// manager's GSource on the main loop.

import GLib from 'gi://GLib';
import Kv from 'gi://Kv?version=1';

import {assert, withTimeout} from './harness.js';

export const SLOT_SIZE = 4096;

export function makeKey(i, group = 0) {
    const hash = new Uint8Array(32);
    hash[0] = i & 0xff;
    hash[1] = i >> 8;
    for (let b = 2; b < hash.length; b++)
        hash[b] = (i * 31 + b) & 0xff;
    return Kv.Key.new(hash, group);
}

// Slot-sized bytes unique to key i (a xorshift stream seeded by i).
export function pattern(i) {
    const out = new Uint8Array(SLOT_SIZE);
    let x = (i + 1) * 0x9e3779b1 >>> 0;
    for (let b = 0; b < out.length; b++) {
        x ^= x << 13;
        x >>>= 0;
        x ^= x >>> 17;
        x ^= x << 5;
        x >>>= 0;
        out[b] = x & 0xff;
    }
    return out;
}

export class Engine {
    constructor({nSlots = 4, manager = null, nKeys = 32} = {}) {
        if (manager === null) {
            const buffer = Kv.HostBuffer.new(nSlots, SLOT_SIZE);
            manager = Kv.TieringManager.new(Kv.PrimaryTier.new(buffer, null, true));
        }
        this.manager = manager;
        this.primary = manager.get_primary();
        this.buffer = this.primary.get_buffer();
        this.keys = [];
        this._index = new Map();
        for (let i = 0; i < nKeys; i++) {
            const key = makeKey(i);
            this.keys.push(key);
            this._index.set(key.to_string(), i);
        }
    }

    index(key) {
        return this._index.get(key.to_string());
    }

    step() {
        this.manager.on_schedule_end(Kv.ScheduleEnd.new(null, null));
    }

    // Ends the current step, then resolves once no job is in flight. The
    // manager's GSource wakes the main loop when a tier completed work; each
    // wake-up runs a step, whose first call consumes the results (at most
    // once per step, so results that arrived after the current step's first
    // call wait for the next step).
    waitIdle(seconds = 30) {
        this.step();
        if (!this.manager.has_pending_work())
            return Promise.resolve();
        const source = this.manager.create_source();
        const idle = new Promise(resolve => {
            source.set_callback(() => {
                this.step();
                if (this.manager.has_pending_work())
                    return GLib.SOURCE_CONTINUE;
                resolve();
                return GLib.SOURCE_REMOVE;
            });
        });
        source.attach(null);
        return withTimeout(idle, seconds, 'waiting for jobs').finally(() => source.destroy());
    }

    store(request, indices, success = true) {
        const keys = indices.map(i => this.keys[i]);
        const prepared = this.manager.prepare_store(keys, request);
        const toStore = prepared.get_keys_to_store();
        const slots = prepared.get_chunk_ids();
        toStore.forEach((key, n) => {
            this.buffer.write_slot(slots[n], new GLib.Bytes(pattern(this.index(key))));
        });
        if (toStore.length > 0)
            this.manager.complete_store(toStore, request, success);
        return prepared;
    }

    // Primary → GPU: pins the keys' slots, copies them out and unpins them,
    // as the engine does for a prefix hit.
    load(request, indices) {
        const keys = indices.map(i => this.keys[i]);
        const slots = this.manager.prepare_load(keys, request);
        try {
            return slots.map(slot => this.buffer.read_slot(slot).toArray().slice());
        } finally {
            this.manager.complete_load(keys, request);
        }
    }

    slotBytes(i) {
        const [found, slot] = this.primary.get_chunk_id(this.keys[i]);
        assert(found, `key ${i} is not in the primary tier`);
        return this.buffer.read_slot(slot).toArray();
    }

    lookupAll(request, indices) {
        return indices.map(i => this.manager.lookup(this.keys[i], request));
    }
}
