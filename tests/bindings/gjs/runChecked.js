// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Runs a GJS test script in a child gjs with G_DEBUG *without*
// fatal-criticals and checks its stderr: GJS reports a JS callback or
// vfunc called from a thread other than the main thread with a
// Gjs-CRITICAL ("Attempting to run a JS callback on a different thread")
// and a zeroed return value, which under fatal-criticals would be an abort
// that hides which call it was. Here any such line, and any other
// CRITICAL not explicitly allowed, fails the test with the line quoted.
//
// Usage: gjs -m runChecked.js [--allow REGEX]... SCRIPT [ARGS...]
// Passes the child's TAP output through and adds a "Bail out!" line on a
// forbidden message; exits non-zero if the child failed or one was seen.

import GLib from 'gi://GLib';
import Gio from 'gi://Gio';
import System from 'system';

const args = [...System.programArgs];
const allowed = [];
while (args[0] === '--allow') {
    args.shift();
    allowed.push(new RegExp(args.shift()));
}
if (args.length === 0) {
    printerr('usage: runChecked.js [--allow REGEX]... SCRIPT [ARGS...]');
    System.exit(2);
}

const gjs = GLib.find_program_in_path('gjs');
const launcher = new Gio.SubprocessLauncher({
    flags: Gio.SubprocessFlags.STDOUT_PIPE | Gio.SubprocessFlags.STDERR_PIPE,
});
launcher.setenv('G_DEBUG', 'gc-friendly', true);
const child = launcher.spawnv([gjs, '-m', ...args]);
const [, stdout, stderr] = child.communicate_utf8(null, null);

print(stdout.trimEnd());
if (stderr.length > 0)
    printerr(stderr.trimEnd());

// A message is a "(prog:pid): Domain-LEVEL **: ..." line plus the lines that
// follow it up to the next blank line (GJS prints the JS stack there).
const forbidden = [];
const messages = stderr.split(/\n(?=\(\S+:\d+\): )/);
for (const message of messages) {
    const offThread = /on a different thread|from a different thread/.test(message);
    const critical = /-CRITICAL \*\*/.test(message);
    if (offThread || (critical && !allowed.some(re => re.test(message))))
        forbidden.push(message.split('\n').slice(0, 3).join(' | '));
}

for (const message of forbidden)
    print(`Bail out! forbidden message on stderr: ${message}`);

const status = child.get_if_exited() ? child.get_exit_status() : 1;
System.exit(status !== 0 || forbidden.length > 0 ? 1 : 0);
