// SPDX-License-Identifier: LGPL-2.1-or-later
//
// A small TAP harness for the GJS suite: tests are async functions run one
// after the other on a running main loop; a test that throws or times out
// fails, and the process exits non-zero if any did.

import GLib from 'gi://GLib';
import Gio from 'gi://Gio';
import System from 'system';

const tests = [];
const directories = [];

// A new directory, removed with its contents when the run ends.
export function tempDirectory() {
    const path = GLib.Dir.make_tmp('kvtier-gjs-test-XXXXXX');
    directories.push(path);
    return path;
}

function removeTree(file) {
    const children = file.enumerate_children('standard::name,standard::type',
        Gio.FileQueryInfoFlags.NOFOLLOW_SYMLINKS, null);
    for (let info; (info = children.next_file(null)) !== null;) {
        const child = file.get_child(info.get_name());
        if (info.get_file_type() === Gio.FileType.DIRECTORY)
            removeTree(child);
        else
            child.delete(null);
    }
    children.close(null);
    file.delete(null);
}

export function test(name, fn) {
    tests.push({name, fn});
}

export class AssertionError extends Error {}

export function assert(condition, message = 'assertion failed') {
    if (!condition)
        throw new AssertionError(message);
}

export function assertEqual(got, want, what = 'value') {
    if (got !== want)
        throw new AssertionError(`${what}: got ${got}, expected ${want}`);
}

export function assertDeepEqual(got, want, what = 'value') {
    const g = JSON.stringify(got), w = JSON.stringify(want);
    if (g !== w)
        throw new AssertionError(`${what}: got ${g}, expected ${w}`);
}

// Byte-exact comparison that names the first differing byte.
export function assertBytesEqual(got, want, what = 'bytes') {
    if (got.length !== want.length)
        throw new AssertionError(`${what}: ${got.length} bytes, expected ${want.length}`);
    for (let i = 0; i < want.length; i++) {
        if (got[i] !== want[i]) {
            throw new AssertionError(
                `${what}: byte ${i} is ${got[i]}, expected ${want[i]}`);
        }
    }
}

export function assertThrows(fn, check, what = 'call') {
    try {
        fn();
    } catch (e) {
        check(e);
        return;
    }
    throw new AssertionError(`${what} did not throw`);
}

// Resolves after the main loop dispatched everything that is ready now.
export function idle() {
    return new Promise(resolve => {
        GLib.idle_add(GLib.PRIORITY_LOW, () => {
            resolve();
            return GLib.SOURCE_REMOVE;
        });
    });
}

export function withTimeout(promise, seconds, what) {
    let id = 0;
    const timeout = new Promise((_, reject) => {
        id = GLib.timeout_add_seconds(GLib.PRIORITY_DEFAULT, seconds, () => {
            id = 0;
            reject(new AssertionError(`${what}: nothing happened within ${seconds} s`));
            return GLib.SOURCE_REMOVE;
        });
    });
    return Promise.race([promise, timeout]).finally(() => {
        if (id !== 0)
            GLib.source_remove(id);
    });
}

export function run(timeoutSeconds = 60) {
    const loop = new GLib.MainLoop(null, false);
    let failed = 0;

    const all = async () => {
        print(`1..${tests.length}`);
        for (const [i, t] of tests.entries()) {
            try {
                // eslint-disable-next-line no-await-in-loop
                await withTimeout(Promise.resolve().then(t.fn), timeoutSeconds, t.name);
                print(`ok ${i + 1} - ${t.name}`);
            } catch (e) {
                failed++;
                print(`not ok ${i + 1} - ${t.name}`);
                for (const line of `${e}\n${e.stack ?? ''}`.split('\n'))
                    print(`# ${line}`);
            }
        }
    };
    all().finally(() => loop.quit());
    loop.run();
    for (const path of directories)
        removeTree(Gio.File.new_for_path(path));
    System.exit(failed > 0 ? 1 : 0);
}
