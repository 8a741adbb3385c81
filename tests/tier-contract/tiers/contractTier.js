// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The JavaScript tier of the contract suite. Every vfunc runs on the main
// thread (the owner thread); the bytes move in main-loop callbacks (an idle
// source per job), which report the job with complete_job(), as a JS tier
// doing GIO I/O does. Chunks are kept in memory with a checksum each.
//
// The hooks the suite drives from C are properties: `stalled` (no job
// starts while it is set), `damage` (a Kv.Key whose stored bytes change
// under their checksum) and `idle` (no job queued or being moved).

import GLib from 'gi://GLib';
import GObject from 'gi://GObject';
import Kv from 'gi://Kv?version=1';

function nameOf(key) {
    return `${key.to_string()}-${key.get_group()}`;
}

// FNV-1a over the bytes: what a stored chunk is checked against.
function checksum(bytes) {
    let h = 0x811c9dc5;
    for (let i = 0; i < bytes.length; i++)
        h = Math.imul(h ^ bytes[i], 0x01000193) >>> 0;
    return h;
}

export const ContractJsTier = GObject.registerClass({
    GTypeName: 'ContractJsTier',
    Properties: {
        'stalled': GObject.ParamSpec.boolean('stalled', 'Stalled',
            'No job starts while set', GObject.ParamFlags.READWRITE, false),
        'damage': GObject.ParamSpec.boxed('damage', 'Damage',
            'A key whose stored bytes change under their checksum',
            GObject.ParamFlags.WRITABLE, Kv.Key.$gtype),
        'idle': GObject.ParamSpec.boolean('idle', 'Idle',
            'No job queued or being moved', GObject.ParamFlags.READABLE, true),
    },
}, class ContractJsTier extends Kv.SecondaryTier {
    constructor(properties = {}) {
        super(properties);
        this._chunks = new Map();   // name -> {sum, bytes}
        this._queue = [];           // jobs not started
        this._running = 0;          // queued or being moved
        this._stalled = false;
        this._source = 0;
    }

    get stalled() {
        return this._stalled ?? false;
    }

    set stalled(value) {
        this._stalled = value;
        this._schedule();
    }

    set damage(key) {
        const chunk = this._chunks.get(nameOf(key));
        const flipped = chunk.bytes.slice();
        flipped[99] ^= 0x10;
        this._chunks.set(nameOf(key), {sum: chunk.sum, bytes: flipped});
    }

    get idle() {
        return (this._running ?? 0) === 0;
    }

    // ---- vfuncs: main thread only, never block ----------------------------

    vfunc_lookup(key, _request) {
        return this._chunks.has(nameOf(key)) ? Kv.LookupResult.HIT : Kv.LookupResult.MISS;
    }

    vfunc_on_new_request(_request) {
        return Kv.OffloadPolicy.CHUNK_LEVEL;
    }

    vfunc_submit_store(job) {
        return this._submit(job);
    }

    vfunc_submit_load(job) {
        return this._submit(job);
    }

    vfunc_drain_jobs() {
        const context = GLib.MainContext.default();
        while (this._running > 0 && !this._stalled)
            context.iteration(true);
        return true;
    }

    vfunc_shutdown() {
        this._stalled = false;
        this._schedule();
        return this.vfunc_drain_jobs();
    }

    // ---- the main loop moves the bytes --------------------------------------

    _submit(job) {
        this._queue.push(job);
        this._running++;
        this._schedule();
        return true;    // accepted: reported later from a main-loop callback
    }

    _schedule() {
        if (this._source !== 0 || this._stalled || this._queue.length === 0)
            return;
        this._source = GLib.idle_add(GLib.PRIORITY_DEFAULT, () => {
            this._source = 0;
            if (!this._stalled && this._queue.length > 0) {
                const job = this._queue.shift();
                this.complete_job(this._move(job));
                this._running--;
            }
            this._schedule();
            return GLib.SOURCE_REMOVE;
        });
    }

    _move(job) {
        const primary = this.get_primary();
        const size = primary.get_slot_size();
        const keys = job.get_keys();
        const slots = job.get_chunk_ids();
        if (!job.is_promotion()) {
            const cancellable = this.get_job_cancellable(job);
            // failed at its deadline: the slots hold other chunks by now
            if (cancellable !== null && cancellable.is_cancelled())
                return Kv.JobResult.new(job.get_id(), false);
            keys.forEach((key, i) => {
                const bytes = primary.read_slot(slots[i]).toArray().slice();
                this._chunks.set(nameOf(key), {sum: checksum(bytes), bytes});
            });
            const result = Kv.JobResult.new(job.get_id(), true);
            result.set_transfer_bytes(keys.length * size);
            return result;
        }
        const landed = [];
        keys.forEach((key, i) => {
            const chunk = this._chunks.get(nameOf(key));
            if (chunk === undefined)
                return;
            if (checksum(chunk.bytes) !== chunk.sum) {
                // damaged: forgotten, as the fs tier deletes a bad file
                this._chunks.delete(nameOf(key));
                return;
            }
            primary.write_slot(slots[i], new GLib.Bytes(chunk.bytes));
            landed.push(key);
        });
        // the partial-load rule: every landed key in the job's order, no
        // list when none landed, success when all did
        const result = Kv.JobResult.new(job.get_id(), landed.length === keys.length);
        if (landed.length > 0 && landed.length < keys.length)
            result.set_successful_keys(landed);
        result.set_transfer_bytes(landed.length * size);
        return result;
    }
});
