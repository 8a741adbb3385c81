#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Run one libFuzzer target for a bounded time, as a meson test.

usage: run-fuzzer.py FUZZER CORPUS-DIR ARTIFACT-DIR [SECONDS]

The seed corpus is read, never written: libFuzzer writes the inputs it
finds to the first directory it is given, so that is a fresh temporary
directory, removed afterwards. A crashing input is kept in ARTIFACT-DIR
(in the build tree) for `FUZZER ARTIFACT` or the replay test to reproduce.

KVTIER_FUZZ_SECONDS (default 20) bounds the time, KVTIER_FUZZ_RUNS (default
2000000) the number of inputs; whichever ends first ends the run. A
target given SECONDS (its 'seconds' in tests/fuzz/meson.build) runs that
long, with no bound on inputs, unless those variables are set.
"""
import os
import subprocess
import sys
import tempfile


def main():
    if len(sys.argv) not in (4, 5):
        print(__doc__, file=sys.stderr)
        return 2
    fuzzer, corpus, artifacts = sys.argv[1:4]
    if not os.path.isdir(corpus) or not os.listdir(corpus):
        print(f"{corpus}: no seed corpus", file=sys.stderr)
        return 1
    seconds = int(os.environ.get("KVTIER_FUZZ_SECONDS", "20"))
    runs = int(os.environ.get("KVTIER_FUZZ_RUNS", "2000000"))
    # a target's own time (its SECONDS argument) runs that long, unless
    # the environment says otherwise
    if len(sys.argv) == 5:
        seconds = int(os.environ.get("KVTIER_FUZZ_SECONDS", sys.argv[4]))
        runs = int(os.environ.get("KVTIER_FUZZ_RUNS", "-1"))
    os.makedirs(artifacts, exist_ok=True)
    env = dict(os.environ)
    # a UBSan report is a finding, not a line in the log
    env.setdefault("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
    name = os.path.basename(fuzzer)
    with tempfile.TemporaryDirectory(prefix=f"kvtier-{name}-") as new_inputs:
        cmd = [fuzzer, new_inputs, corpus,
               f"-max_total_time={seconds}", f"-runs={runs}",
               "-timeout=10", "-rss_limit_mb=2048", "-max_len=65536",
               "-print_final_stats=1",
               # libFuzzer's own exit codes for a finding (77 for a crash
               # or leak, 70 for a timeout) would read as "skipped" or pass
               # unnoticed in meson: any finding fails the test
               "-error_exitcode=1", "-timeout_exitcode=1",
               "-artifact_prefix=" + os.path.join(artifacts, name + "-")]
        print(" ".join(cmd), flush=True)
        return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main())
