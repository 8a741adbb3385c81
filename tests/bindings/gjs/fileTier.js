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
// - each GIO callback marks its key of the job's Kv.TierJob (landed,
//   missing or failed), and the last one reports the Kv.TierJob, which
//   builds the job's result;
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
        this._start(job, (tierJob, i, key, slot, done) => {
            // read_slot() does not copy: the slot stays pinned until the job
            // is reported, so GIO may write straight from it.
            const file = this._file(key);
            file.replace_contents_bytes_async(primary.read_slot(slot), null, false,
                Gio.FileCreateFlags.PRIVATE | Gio.FileCreateFlags.REPLACE_DESTINATION,
                tierJob.get_cancellable(), (_, result) => {
                    try {
                        file.replace_contents_finish(result);
                        this._stored.add(file.get_basename());
                        tierJob.mark_landed(i);
                    } catch (e) {
                        logError(e, `FileTier: cannot write ${file.get_path()}`);
                        tierJob.mark_failed(i, Kv.KeyFailureFlags.NONE, null);
                    }
                    done();
                });
        });
        return true;    // accepted: reported later from the callbacks
    }

    vfunc_submit_load(job) {
        const primary = this.get_primary();
        this._start(job, (tierJob, i, key, slot, done) => {
            const file = this._file(key);
            file.load_bytes_async(tierJob.get_cancellable(), (_, result) => {
                try {
                    const [bytes] = file.load_bytes_finish(result);
                    primary.write_slot(slot, bytes);
                    tierJob.mark_landed(i);
                } catch (e) {
                    if (e.matches(Gio.IOErrorEnum, Gio.IOErrorEnum.NOT_FOUND)) {
                        // gone: the data's failure, not the tier's
                        tierJob.mark_missing(i);
                    } else {
                        logError(e, `FileTier: cannot read ${file.get_path()}`);
                        tierJob.mark_failed(i, Kv.KeyFailureFlags.NONE, null);
                    }
                }
                done();
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

    // Runs copy(tierJob, i, key, slot, done) for every key of @job, which
    // marks key i of the Kv.TierJob, and reports it once every copy called
    // done().
    _start(job, copy) {
        const tierJob = Kv.TierJob.new(this, job);
        const keys = job.get_keys();
        const slots = job.get_chunk_ids();
        let pending = keys.length;

        this._inFlight++;
        const done = () => {
            if (--pending > 0)
                return;
            tierJob.report();
            this._inFlight--;
        };
        if (pending === 0) {
            pending = 1;
            done();
        }
        keys.forEach((key, i) => copy(tierJob, i, key, slots[i], done));
    }
});
