// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Control for runChecked.js: makes GIO call a JS vfunc on a worker thread
// (Gio.InputStream's default skip_async() runs vfunc_skip() in a GTask
// thread), which GJS refuses with a "different thread" critical. Run
// through runChecked.js this must FAIL (the meson test has
// should_fail: true); if it passed, the checker would not catch a tier
// whose vfuncs are called off the main thread.

import GLib from 'gi://GLib';
import GObject from 'gi://GObject';
import Gio from 'gi://Gio';

const ThreadedStream = GObject.registerClass({GTypeName: 'JsOffThreadControlStream'},
class ThreadedStream extends Gio.InputStream {
    vfunc_read_fn(_buffer, _count, _cancellable) {
        return 0;
    }

    vfunc_skip(count, _cancellable) {
        return count;
    }

    vfunc_close_fn(_cancellable) {
        return true;
    }
});

const loop = new GLib.MainLoop(null, false);
const stream = new ThreadedStream();
stream.skip_async(16, GLib.PRIORITY_DEFAULT, null, (_, result) => {
    try {
        print(`# skip_finish returned ${stream.skip_finish(result)}`);
    } catch (e) {
        print(`# skip_finish threw ${e}`);
    }
    loop.quit();
});
loop.run();
print('1..1');
print('ok 1 - the off-thread call happened; runChecked.js must report it');
