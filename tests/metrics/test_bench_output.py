#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""What `kvtier bench` shows while it runs (issue #25): the header before
the run, progress as a bar on a terminal and as plain lines elsewhere
(--progress=auto|always|never), log lines above the bar and never inside
it, and, with redis killed and started again mid-run, lines naming the
tier, the server and the cause, and a table whose breaker openings count
every breaker (the servers' own included) as the log lines do.

Usage: test_bench_output.py KVTIER   (KVTIER_PLUGIN_PATH as the suite sets)
Servers are started on free loopback ports and stopped by PID."""

import os
import pty
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

KVTIER = None
# a short run: 60 requests of small chunks
SMALL = ["--synthetic", "--conversations", "20", "--turns", "3", "--chunk-size", "16KiB",
         "--layers", "2", "--gpu-size", "1MiB", "--primary-size", "2MiB"]


def bench(*args, **kwargs):
    return subprocess.run([KVTIER, "bench", *SMALL, *args], capture_output=True, text=True,
                          timeout=120, **kwargs)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Header(unittest.TestCase):
    def test_header_comes_before_the_run(self):
        # a run of a few seconds (simulated prefill): the header must be
        # on stdout while it is still running
        proc = subprocess.Popen([KVTIER, "bench", *SMALL, "--prefill-rate", "20000",
                                 "--progress=never"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            first = proc.stdout.readline()
            running = proc.poll() is None
            # the file objects, not communicate(): it would skip what
            # readline() buffered
            rest = proc.stdout.read()
            err = proc.stderr.read()
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        self.assertEqual(proc.returncode, 0, err)
        self.assertTrue(first.startswith("kvtier bench: synthetic chats"), first)
        self.assertTrue(running, "the header came only when the run had ended")
        head = first + rest
        # what it runs on, then the results
        self.assertLess(head.index("  device "), head.index("  requests 60"))
        self.assertLess(head.index("  tiers "), head.index("prefix chunks looked up"))
        self.assertIn("  steps ", rest)
        self.assertEqual(err, "")


class Progress(unittest.TestCase):
    LINE = re.compile(r"^kvtier bench: (done at )?\d+ s: +\d+ %  \d+/60 requests  \d+ req/s  "
                      r"hit rate \d+\.\d %$")

    def test_plain_lines_off_a_terminal(self):
        r = bench()
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stderr.splitlines()
        self.assertGreaterEqual(len(lines), 2, r.stderr)
        for line in lines:
            self.assertRegex(line, self.LINE)
        self.assertIn(" 0 %  0/60 requests", lines[0])
        self.assertTrue(lines[-1].startswith("kvtier bench: done at "), lines[-1])
        self.assertIn("100 %  60/60 requests", lines[-1])
        self.assertNotIn("\r", r.stderr)
        self.assertNotIn("\033", r.stderr)

    def test_never_and_quiet(self):
        for args in (["--progress=never"], ["--no-progress"], ["--quiet"],
                     ["--quiet", "--progress=auto"]):
            r = bench(*args)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stderr, "", args)
        r = bench("--quiet", "--progress=always")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "")
        self.assertIn("kvtier bench: done at ", r.stderr)

    def test_bad_values(self):
        r = bench("--progress=sometimes")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--progress must be auto, always or never, not 'sometimes'", r.stderr)
        r = bench("--no-progress", "--progress=always")
        self.assertEqual(r.returncode, 2)
        self.assertIn("contradict", r.stderr)

    def test_log_lines_go_above_the_bar(self):
        # stderr on a terminal: a bar redrawn in place; the debug lines of
        # every step (G_MESSAGES_DEBUG) are written above it
        master, slave = pty.openpty()
        env = dict(os.environ, G_MESSAGES_DEBUG="kvtier")
        proc = subprocess.Popen([KVTIER, "bench", *SMALL, "--prefill-rate", "20000"],
                                stdout=subprocess.DEVNULL, stderr=slave, env=env)
        os.close(slave)
        out = b""
        try:
            while True:
                ready, _, _ = select.select([master], [], [], 60)
                if not ready:
                    break
                try:
                    chunk = os.read(master, 65536)
                except OSError:   # EIO: the other end closed
                    break
                if not chunk:
                    break
                out += chunk
        finally:
            proc.wait(timeout=120)
            os.close(master)
        self.assertEqual(proc.returncode, 0)
        text = out.decode("utf-8", "replace").replace("\r\n", "\n")
        bar = re.compile(r"  \[[#.]{30}\] +\d+%  \d+/60 requests")
        # GLib colours the level on a terminal
        log = re.compile(r"\(kvtier bench:\d+\): kvtier-(?:\033\[[0-9;]*m)?DEBUG")
        self.assertRegex(text, bar)
        n_logs = n_redrawn = 0
        lines = text.split("\n")
        for i, line in enumerate(lines):
            m = log.search(line)
            if m is None:
                continue
            n_logs += 1
            # what the bar left on this screen line was erased first
            self.assertEqual(line[:m.start()].split("\r\033[K")[-1], "", repr(line))
            # and the log line holds no bar
            self.assertIsNone(bar.search(line[m.start():]), repr(line))
            # the bar comes back under it
            if i + 1 < len(lines) and bar.match(lines[i + 1]):
                n_redrawn += 1
        self.assertGreater(n_logs, 3, text[:2000])
        self.assertGreater(n_redrawn, 0, text[:2000])
        # the bar is erased at the end
        self.assertIn("\r\033[K", text)


class RedisKilled(unittest.TestCase):
    def setUp(self):
        if shutil.which("redis-server") is None:
            self.skipTest("redis-server is not installed")
        self.dir = tempfile.mkdtemp(prefix="kvtier-bench-redis-")
        self.port = free_port()
        self.redis = None

    def tearDown(self):
        if self.redis is not None and self.redis.poll() is None:
            self.redis.kill()
            self.redis.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def start_redis(self):
        self.redis = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir, "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        until = time.monotonic() + 10
        while time.monotonic() < until:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        self.fail("redis-server did not start")

    def test_lines_and_table_agree(self):
        self.start_redis()
        conf = os.path.join(self.dir, "bench.conf")
        with open(conf, "w") as f:
            f.write("[primary]\nsize = 8MiB\nslot-size = 256KiB\n\n"
                    f"[tier cache]\ntype = redis\nservers = 127.0.0.1:{self.port}\n"
                    "breaker-open-ms = 300\n")
        proc = subprocess.Popen([KVTIER, "bench", "--config", conf, "--conversations", "40",
                                 "--turns", "3", "--prefill-rate", "30000", "--progress=always"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            # the run started (its first progress line): redis goes for 2 s
            err = ""
            while "kvtier bench: 0 s:" not in err:
                line = proc.stderr.readline()
                self.assertNotEqual(line, "", "bench ended before it started")
                err += line
            os.kill(self.redis.pid, signal.SIGKILL)
            self.redis.wait()
            time.sleep(2)
            self.start_redis()
            out, rest = proc.communicate(timeout=300)
            err += rest
        finally:
            if proc.poll() is None:
                proc.kill()
        self.assertEqual(proc.returncode, 0, err)
        server = f"127.0.0.1:{self.port}"
        # the loss: tier, server and cause; the return
        self.assertRegex(err, rf"redis tier 1:redis: server {server} unreachable: .*{server}.*\n")
        self.assertIn(f"redis tier 1:redis: server {server} answers again after ", err)
        # the table counts every breaker's openings, as many as the lines
        opened = re.findall(r"[^\n]*circuit breaker opened[^\n]*", err)
        in_all = sum(int(n) - 1 for n in re.findall(r"; (\d+) openings in all", err))
        m = re.search(r"failures +cache: .* (\d+) breaker openings", out)
        self.assertIsNotNone(m, out)
        self.assertGreaterEqual(len(opened), 1, err)
        self.assertEqual(int(m.group(1)), len(opened) + in_all, err + out)
        self.assertTrue(any(f"server {server}: circuit breaker opened" in o for o in opened), err)


if __name__ == "__main__":
    KVTIER = sys.argv.pop(1)
    unittest.main(verbosity=2)
