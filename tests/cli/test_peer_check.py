# SPDX-License-Identifier: LGPL-2.1-or-later
"""`kvtier peer check HOST:PORT --config FILE` against a real `kvtier serve`
node (plain and TLS), a closed port, and two servers that are not kvtier
peers: each verdict line, the named cause of the failed step, and the exit
status (0 usable, 1 not, 2 usage).

Run by meson (tests/cli/meson.build) as
    test_peer_check.py KVTIER
with KVTIER_PLUGIN_PATH pointing into the build tree.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import unittest

KVTIER = None
STEPS = ['config', 'connect', 'tls', 'protocol', 'secret', 'chunk-size', 'namespace', 'limits']


def run(args, timeout=60):
    return subprocess.run([KVTIER] + args, capture_output=True, text=True, timeout=timeout)


def verdicts(stdout):
    """{step: (verdict, rest)} of the report's step lines."""
    found = {}
    for line in stdout.splitlines():
        m = re.match(r'^  (\S+)\s+(ok|FAIL|-)\s+(.*)$', line)
        if m and m.group(1) in STEPS:
            found[m.group(1)] = (m.group(2), m.group(3))
    return found


class Node:
    """A `kvtier serve` node with a listening peer tier."""

    def __init__(self, test, directory, extra=''):
        config = os.path.join(directory, 'node.conf')
        with open(config, 'w') as f:
            f.write('[primary]\nsize = 1MiB\nslot-size = 64KiB\n\n'
                    '[tier peer]\ntype = peer\nlisten = 127.0.0.1:0\n'
                    f'secret-file = {test.secret}\nnamespace = model-a\n'
                    # a TLS handshake under a sanitizer on a loaded machine
                    # takes longer than the 2 s default
                    'handshake-timeout-ms = 30000\n' + extra)
        self.proc = subprocess.Popen([KVTIER, 'serve', '--config', config, '--http', ''],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready = self.proc.stdout.readline()
        if not ready.startswith('ready'):
            self.proc.kill()
            raise AssertionError(f'no ready line: {ready!r}\n{self.proc.communicate()[1]}')
        self.address = re.search(r'peer=(\S+)', ready).group(1)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.communicate(timeout=60)


class OneShotServer:
    """A TCP server that answers each connection with @answer and closes."""

    def __init__(self, answer):
        self.sock = socket.socket()
        self.sock.bind(('127.0.0.1', 0))
        self.sock.listen(4)
        self.address = '127.0.0.1:%d' % self.sock.getsockname()[1]
        self.answer = answer
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn:
            conn.recv(64)
            if self.answer:
                conn.sendall(self.answer)

    def stop(self):
        self.sock.close()
        self.thread.join(timeout=10)


class PeerCheckTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix='kvtier-peer-check-')
        cls.secret = cls.write_secret('secret')
        cls.wrong = cls.write_secret('wrong')
        cls.node = Node(cls, cls.dir)

    @classmethod
    def tearDownClass(cls):
        cls.node.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def write_secret(cls, name):
        path = os.path.join(cls.dir, name)
        with open(path, 'w') as f:
            f.write(os.urandom(24).hex())
        os.chmod(path, 0o600)
        return path

    def client_config(self, name, peer, secret=None, slot='64KiB', namespace='model-a',
                      extra=''):
        path = os.path.join(self.dir, name)
        with open(path, 'w') as f:
            f.write(f'[primary]\nsize = 1MiB\nslot-size = {slot}\n\n'
                    f'[tier peer]\ntype = peer\npeers = {peer}\n'
                    f'secret-file = {secret or self.secret}\nnamespace = {namespace}\n'
                    'io-timeout-ms = 30000\n' + extra)
        return path

    def check(self, address, config, rc, failed=None, cause=None):
        result = run(['peer', 'check', address, '--config', config])
        where = f'exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}'
        self.assertEqual(result.returncode, rc, where)
        self.assertNotIn('CRITICAL', result.stderr)
        found = verdicts(result.stdout)
        self.assertEqual(list(found), STEPS, where)
        if failed is None:
            self.assertTrue(all(v == 'ok' for v, _ in found.values()), where)
            self.assertIn(f'peer {address}: usable', result.stdout)
            return found
        at = STEPS.index(failed)
        for step in STEPS[:at]:
            self.assertEqual(found[step][0], 'ok', where)
        self.assertEqual(found[failed][0], 'FAIL', where)
        self.assertTrue(found[failed][1].startswith(cause + ': '), where)
        for step in STEPS[at + 1:]:
            self.assertEqual(found[step], ('-', 'not checked'), where)
        self.assertIn(f'peer {address}: not usable ({failed})', result.stdout)
        return found

    def test_usable(self):
        found = self.check(self.node.address, self.client_config('ok.conf', self.node.address), 0)
        self.assertEqual(found['chunk-size'][1], '65536 bytes')
        self.assertEqual(found['namespace'][1], "'model-a'")
        self.assertIn('not used (tls = false)', found['tls'][1])

    def test_wrong_secret(self):
        self.check(self.node.address,
                   self.client_config('wrong.conf', self.node.address, secret=self.wrong),
                   1, 'secret', 'wrong-secret')

    def test_other_chunk_size(self):
        found = self.check(self.node.address,
                           self.client_config('chunk.conf', self.node.address, slot='128KiB'),
                           1, 'chunk-size', 'chunk-size-mismatch')
        self.assertIn('131072', found['chunk-size'][1])
        self.assertIn('65536', found['chunk-size'][1])

    def test_other_namespace(self):
        self.check(self.node.address,
                   self.client_config('ns.conf', self.node.address, namespace='model-b'),
                   1, 'namespace', 'namespace-mismatch')

    def test_refused(self):
        # a port that was free a moment ago
        with socket.socket() as s:
            s.bind(('127.0.0.1', 0))
            address = '127.0.0.1:%d' % s.getsockname()[1]
        self.check(address, self.client_config('refused.conf', address), 1, 'connect', 'refused')

    def test_not_kvtier(self):
        server = OneShotServer(b'HTTP/1.1 400 Bad Request\r\n\r\n')
        self.addCleanup(server.stop)
        self.check(server.address, self.client_config('http.conf', server.address), 1,
                   'protocol', 'not-kvtier')

    def test_closed_without_hello(self):
        server = OneShotServer(b'')
        self.addCleanup(server.stop)
        found = self.check(server.address, self.client_config('closed.conf', server.address), 1,
                           'protocol', 'closed')
        self.assertIn('expects TLS', found['protocol'][1])

    def test_tls_against_plain_peer(self):
        config = self.client_config('tls.conf', self.node.address, extra='tls = true\n')
        result = run(['peer', 'check', self.node.address, '--config', config])
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        found = verdicts(result.stdout)
        self.assertEqual(found['connect'][0], 'ok')
        self.assertEqual(found['tls'][0], 'FAIL', result.stdout)
        self.assertEqual(found['protocol'], ('-', 'not checked'))

    def test_bad_config(self):
        missing = os.path.join(self.dir, 'no-such-secret')
        config = self.client_config('nosecret.conf', self.node.address, secret=missing)
        self.check(self.node.address, config, 1, 'config', 'bad-secret-file')
        config = os.path.join(self.dir, 'nopeer.conf')
        with open(config, 'w') as f:
            f.write('[primary]\nsize = 1MiB\n')
        found = self.check(self.node.address, config, 1, 'config', 'bad-config')
        self.assertIn('no peer tier', found['config'][1])

    def test_usage(self):
        self.assertEqual(run(['peer', 'check', self.node.address]).returncode, 2)
        self.assertEqual(run(['peer', 'probe', self.node.address, '--config', 'x']).returncode, 2)
        self.assertEqual(run(['peer', 'check', '--config', 'x']).returncode, 2)


@unittest.skipUnless(shutil.which('openssl'), 'openssl is not installed')
class PeerCheckTlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix='kvtier-peer-check-tls-')
        cls.secret = PeerCheckTest.write_secret.__func__(cls, 'secret')
        cls.cert = os.path.join(cls.dir, 'node.pem')
        cls.key = os.path.join(cls.dir, 'node.key')
        subprocess.run(['openssl', 'req', '-x509', '-newkey', 'ec', '-pkeyopt',
                        'ec_paramgen_curve:P-256', '-nodes', '-days', '1', '-subj', '/CN=127.0.0.1',
                        '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', cls.key,
                        '-out', cls.cert], check=True, capture_output=True)
        cls.node = Node(cls, cls.dir, f'tls = true\ntls-cert-file = {cls.cert}\n'
                                      f'tls-key-file = {cls.key}\n')

    @classmethod
    def tearDownClass(cls):
        cls.node.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    client_config = PeerCheckTest.client_config
    check = PeerCheckTest.check

    def test_tls_usable(self):
        config = self.client_config('tls.conf', self.node.address,
                                    extra=f'tls = true\ntls-ca-file = {self.cert}\n')
        found = self.check(self.node.address, config, 0)
        self.assertIn('peer certificate trusted', found['tls'][1])

    def test_untrusted_certificate(self):
        other = os.path.join(self.dir, 'other.pem')
        subprocess.run(['openssl', 'req', '-x509', '-newkey', 'ec', '-pkeyopt',
                        'ec_paramgen_curve:P-256', '-nodes', '-days', '1', '-subj', '/CN=other',
                        '-keyout', os.path.join(self.dir, 'other.key'), '-out', other],
                       check=True, capture_output=True)
        config = self.client_config('untrusted.conf', self.node.address,
                                    extra=f'tls = true\ntls-ca-file = {other}\n')
        self.check(self.node.address, config, 1, 'tls', 'untrusted-certificate')

    def test_plain_against_tls_peer(self):
        found = self.check(self.node.address, self.client_config('plain.conf', self.node.address),
                           1, 'protocol', 'closed')
        self.assertIn('expects TLS', found['protocol'][1])


def main():
    global KVTIER
    KVTIER = os.path.abspath(sys.argv[1])
    del sys.argv[1]
    unittest.main(verbosity=2)


if __name__ == '__main__':
    main()
