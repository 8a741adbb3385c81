// SPDX-License-Identifier: LGPL-2.1-or-later
//
// FileTier: a complete secondary tier written in JavaScript.
//
// It writes each chunk to a file of its directory with GIO's asynchronous
// file API and reports every job from the GIO callbacks, which run on the
// main loop:
//
// - every vfunc runs on the main thread (the owner thread of the
//   Kv.TieringManager) and returns at once;
// - vfunc_submit_store() writes the job's primary slots to files and
//   vfunc_submit_load() reads them back into the slots, without blocking;
// - the last GIO callback of a job reports it with complete_job();
// - vfunc_drain_jobs() iterates the main context until every job is
//   reported, because that is where the callbacks run.
//
// The GJS test suite runs this class; doc/writing-a-tier.md includes this
// file as it is.

import GLib from 'gi://GLib';
import GObject from 'gi://GObject';
import Gio from 'gi://Gio';
import Kv from 'gi://Kv?version=1';

export const FileTier = GObject.registerClass({
    GTypeName: 'JsFileTier',
    Properties: {
        'directory': GObject.ParamSpec.string('directory', 'Directory',
            'Where the chunk files are written (a new temporary directory if null)',
            GObject.ParamFlags.READWRITE | GObject.ParamFlags.CONSTRUCT_ONLY,
            null),
    },
}, class FileTier extends Kv.SecondaryTier {
    constructor(properties = {}) {
        super(properties);
        this._stored = new Set();   // names of the chunks written completely
        this._inFlight = 0;         // accepted jobs not reported yet
    }

    get directory() {
        // A tier created by name without a directory gets a private one.
        if (this._directory === undefined || this._directory === null)
            this._directory = GLib.Dir.make_tmp('kvtier-js-XXXXXX');
        return this._directory;
    }

    set directory(value) {
        this._directory = value;
    }

    _file(key) {
        return Gio.File.new_for_path(
            GLib.build_filenamev([this.directory, `${key.to_string()}-${key.get_group()}`]));
    }

    // ---- vfuncs: main thread only, never block ----------------------------

    vfunc_lookup(key, _request) {
        return this._stored.has(this._file(key).get_basename())
            ? Kv.LookupResult.HIT : Kv.LookupResult.MISS;
    }

    vfunc_on_new_request(_request) {
        return Kv.OffloadPolicy.CHUNK_LEVEL;
    }

    vfunc_submit_store(job) {
        const primary = this.get_primary();
        this._start(job, (key, slot, done) => {
            // read_slot() does not copy: the slot stays pinned until the job
            // is reported, so GIO may write straight from it.
            const file = this._file(key);
            file.replace_contents_bytes_async(primary.read_slot(slot), null, false,
                Gio.FileCreateFlags.PRIVATE | Gio.FileCreateFlags.REPLACE_DESTINATION,
                null, (_, result) => {
                    try {
                        file.replace_contents_finish(result);
                        this._stored.add(file.get_basename());
                        done(true);
                    } catch (e) {
                        logError(e, `FileTier: cannot write ${file.get_path()}`);
                        done(false);
                    }
                });
        });
        return true;    // accepted: reported later from the callbacks
    }

    vfunc_submit_load(job) {
        const primary = this.get_primary();
        this._start(job, (key, slot, done) => {
            const file = this._file(key);
            file.load_bytes_async(null, (_, result) => {
                try {
                    const [bytes] = file.load_bytes_finish(result);
                    primary.write_slot(slot, bytes);
                    done(true);
                } catch (e) {
                    logError(e, `FileTier: cannot read ${file.get_path()}`);
                    done(false);
                }
            });
        });
        return true;
    }

    vfunc_drain_jobs() {
        const context = GLib.MainContext.default();
        while (this._inFlight > 0)
            context.iteration(true);
        return true;
    }

    vfunc_shutdown() {
        return this.vfunc_drain_jobs();
    }

    // Runs copy(key, slot, done) for every key of @job and reports the job
    // once every copy called done(success).
    _start(job, copy) {
        const keys = job.get_keys();
        const slots = job.get_chunk_ids();
        let pending = keys.length;
        let success = true;

        this._inFlight++;
        const done = ok => {
            success &&= ok;
            if (--pending > 0)
                return;
            this.complete_job(Kv.JobResult.new(job.get_id(), success));
            this._inFlight--;
        };
        if (pending === 0) {
            pending = 1;
            done(true);
        }
        keys.forEach((key, i) => copy(key, slots[i], done));
    }
});
