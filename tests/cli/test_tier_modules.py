# SPDX-License-Identifier: LGPL-2.1-or-later
"""Tier modules through the kvtier command: `module = FILE` in a [tier NAME]
section and --tier-module FILE, with a Python and a JavaScript tier, for
`kvtier bench`, `kvtier serve` and `kvtier config check`; and the errors a
bad module gets (each names the file and the cause, exit status 1).

Run by meson (tests/cli/meson.build) as
    test_tier_modules.py KVTIER MEMTIER_PY FILETIER_JS
with KVTIER_PLUGIN_PATH and KVTIER_LOADER_PATH pointing into the build tree.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

KVTIER = MEMTIER = FILETIER = None
LOADERS = os.environ.get('KVTIER_TEST_LOADERS', 'python gjs').split()
needs_python = unittest.skipUnless('python' in LOADERS, 'the Python loader is not built')
needs_gjs = unittest.skipUnless('gjs' in LOADERS, 'the GJS loader is not built')
needs_both = unittest.skipUnless('python' in LOADERS and 'gjs' in LOADERS,
                                 'the Python or the GJS loader is not built')

# Small chunks, a device and a primary tier that hold a few of them: the
# workload's repeated prefixes come back from the module's tier.
BENCH_ARGS = ['--conversations', '12', '--turns', '4', '--gpu-size', '2MiB',
              '--primary-size', '2MiB', '--chunk-size', '64KiB', '--layers', '4',
              '--sync', '--no-progress']


def run(args, timeout=120, **kwargs):
    return subprocess.run([KVTIER] + args, capture_output=True, text=True, timeout=timeout,
                          **kwargs)


class TierModuleTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix='kvtier-tier-modules-')
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, 'w') as f:
            f.write(text)
        return path

    def assert_ok(self, result):
        self.assertEqual(result.returncode, 0,
                         f'exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}')
        # no critical or warning from GLib, GJS or a Python traceback
        for marker in ('CRITICAL', 'Traceback', 'JS ERROR', 'WARNING'):
            self.assertNotIn(marker, result.stderr)

    def assert_fails(self, result, *needles):
        self.assertEqual(result.returncode, 1,
                         f'exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}')
        for needle in needles:
            self.assertIn(needle, result.stderr)
        self.assertNotIn('CRITICAL', result.stderr)

    # ---- kvtier bench ---------------------------------------------------

    def bench(self, tier_section, extra=()):
        config = self.write('bench.conf', '[primary]\nsize = 2MiB\nslot-size = 64KiB\n\n'
                            + tier_section)
        out = os.path.join(self.dir, 'bench.json')
        result = run(['bench', '--config', config, '--json', out] + BENCH_ARGS + list(extra))
        self.assert_ok(result)
        with open(out) as f:
            return result, json.load(f)

    def check_tier_served(self, report, name, type_name):
        tiers = {t['name']: t for t in report['setup']['tiers']}
        self.assertIn(name, tiers, report['setup'])
        self.assertEqual(tiers[name]['type'], type_name)
        # stores reached the tier and loads came back from it, byte for byte
        self.assertGreater(report['hits'][name], 0, report['hits'])
        self.assertGreater(report['verify']['chunks'], 0)
        self.assertEqual(report['verify']['mismatches'], 0)

    @needs_python
    def test_bench_python_module(self):
        result, report = self.bench(f'[tier mem]\nmodule = {MEMTIER}\n')
        self.assertIn('mem (memtier)', result.stdout)
        self.check_tier_served(report, 'mem', 'memtier')

    @needs_gjs
    def test_bench_gjs_module(self):
        store = os.path.join(self.dir, 'js-chunks')
        os.mkdir(store)
        result, report = self.bench(f'[tier files]\nmodule = {FILETIER}\ndirectory = {store}\n')
        self.check_tier_served(report, 'files', 'fileTier')
        # the JavaScript tier wrote its chunks where it was told
        self.assertTrue(os.listdir(store))

    @needs_python
    def test_bench_module_relative_to_config(self):
        shutil.copy(MEMTIER, os.path.join(self.dir, 'mytier.py'))
        result, report = self.bench('[tier mine]\nmodule = mytier.py\n', extra=[])
        self.check_tier_served(report, 'mine', 'mytier')

    @needs_python
    def test_bench_tier_module_option(self):
        result, report = self.bench('[tier mem]\ntype = memtier\n',
                                    extra=['--tier-module', MEMTIER])
        self.check_tier_served(report, 'mem', 'memtier')

    # ---- kvtier config check --------------------------------------------

    @needs_both
    def test_config_check(self):
        store = os.path.join(self.dir, 'js-chunks')
        config = self.write('check.conf', f'[tier mem]\nmodule = {MEMTIER}\n\n'
                            f'[tier files]\nmodule = {FILETIER}\ndirectory = {store}\n')
        result = run(['config', 'check', config])
        self.assert_ok(result)
        self.assertIn(f'[tier mem]  type memtier → PyMemTier ({os.path.realpath(MEMTIER)})',
                      result.stdout)
        self.assertIn(f'[tier files]  type fileTier → JsFileTier ({os.path.realpath(FILETIER)})',
                      result.stdout)
        self.assertRegex(result.stdout, rf'module\s+= {re.escape(MEMTIER)}')
        # checking constructs nothing that writes
        self.assertFalse(os.path.exists(store))

    @needs_python
    def test_config_check_tier_module_option(self):
        config = self.write('check.conf', '[tier mem]\ntype = memtier\n')
        self.assert_fails(run(['config', 'check', config]), "Unknown secondary tier type: 'memtier'")
        result = run(['config', 'check', '--tier-module', MEMTIER, config])
        self.assert_ok(result)
        self.assertIn('type memtier → PyMemTier', result.stdout)

    @needs_both
    def test_plugins_lists_module_types(self):
        result = run(['plugins', '--tier-module', MEMTIER, '--tier-module', FILETIER])
        self.assert_ok(result)
        self.assertIn(f'memtier  (PyMemTier, {os.path.realpath(MEMTIER)})', result.stdout)
        self.assertIn(f'fileTier  (JsFileTier, {os.path.realpath(FILETIER)})', result.stdout)
        self.assertRegex(result.stdout, r'\n\s+directory\s')

    # ---- kvtier serve ---------------------------------------------------

    def serve(self, tier_section):
        config = self.write('node.conf', '[primary]\nsize = 1MiB\nslot-size = 64KiB\n\n'
                            + tier_section)
        proc = subprocess.Popen([KVTIER, 'serve', '--config', config, '--http', '127.0.0.1:0',
                                 '--synthetic-chunks', '8'],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            ready = proc.stdout.readline()
            if not ready.startswith('ready'):
                proc.kill()
                self.fail(f'no ready line: {ready!r}\n{proc.communicate()[1]}')
            http = re.search(r'http=(\S+)', ready).group(1)
            with urllib.request.urlopen(f'http://{http}/metrics', timeout=30) as response:
                metrics = response.read().decode()
        finally:
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 0, err)
        self.assertNotIn('CRITICAL', err)
        return metrics

    def check_metrics_wrote(self, metrics, name, type_name):
        # the 8 synthetic chunks cascaded into the module's tier
        pattern = (r'^vllm:kv_offload_tiering_write_bytes_total\{[^}]*(%s|%s)[^}]*\} (\S+)$'
                   % (re.escape(name), re.escape(type_name)))
        found = re.findall(pattern, metrics, re.M)
        self.assertTrue(found, metrics)
        self.assertEqual(float(found[0][1]), 8 * 65536)

    @needs_python
    def test_serve_python_module(self):
        metrics = self.serve(f'[tier mem]\nmodule = {MEMTIER}\n')
        self.check_metrics_wrote(metrics, 'mem', 'memtier')

    @needs_gjs
    def test_serve_gjs_module(self):
        store = os.path.join(self.dir, 'js-chunks')
        os.mkdir(store)
        metrics = self.serve(f'[tier files]\nmodule = {FILETIER}\ndirectory = {store}\n')
        self.check_metrics_wrote(metrics, 'files', 'fileTier')
        self.assertEqual(len(os.listdir(store)), 8)

    # ---- errors ---------------------------------------------------------

    def check_module_error(self, name, text, *needles, commands=('config',)):
        module = self.write(name, text)
        config = self.write('bad.conf', f'[tier t]\nmodule = {name}\n')
        where = f"bad.conf:2: [tier t] key 'module': Tier module “{module}”"
        if 'config' in commands:
            self.assert_fails(run(['config', 'check', config]), where, *needles)
        if 'bench' in commands:
            self.assert_fails(run(['bench', '--config', config] + BENCH_ARGS), where, *needles)
            self.assert_fails(run(['bench', '--tier-module', module] + BENCH_ARGS),
                              f'kvtier: Tier module “{module}”', *needles)
        if 'serve' in commands:
            self.assert_fails(run(['serve', '--config', config, '--http', '']), where, *needles)
            self.assert_fails(run(['serve', '--tier-module', module, '--config', config]),
                              f'kvtier serve: Tier module “{module}”', *needles)

    @needs_python
    def test_error_missing_file(self):
        config = self.write('bad.conf', '[tier t]\nmodule = nowhere.py\n')
        self.assert_fails(run(['config', 'check', config]),
                          os.path.join(self.dir, 'nowhere.py'), 'No such file or directory')
        self.assert_fails(run(['serve', '--config', config, '--http', '']),
                          'nowhere.py', 'No such file or directory')

    @needs_python
    def test_error_python_syntax(self):
        self.check_module_error('syntax.py', 'class Broken(:\n    pass\n',
                                'Python: SyntaxError:', 'syntax.py, line 1')

    @needs_python
    def test_error_python_exception(self):
        self.check_module_error('raises.py', 'import os\n\nraise RuntimeError("no tier today")\n',
                                'Python: RuntimeError: no tier today', 'raises.py:3)',
                                commands=('config', 'bench', 'serve'))

    @needs_python
    def test_error_python_no_tier(self):
        self.check_module_error('plain.py', 'from gi.repository import GObject\n\n'
                                'class NotATier(GObject.Object):\n    pass\n',
                                'defines no tier type')

    @needs_gjs
    def test_error_gjs_syntax(self):
        self.check_module_error('syntax.js', 'export const x = ;\n',
                                'JavaScript: SyntaxError:', 'syntax.js:1')

    @needs_gjs
    def test_error_gjs_exception(self):
        self.check_module_error('throws.js', '\nthrow new Error("no tier tonight");\n',
                                'JavaScript: Error: no tier tonight', 'throws.js:2',
                                commands=('config', 'bench', 'serve'))

    @needs_gjs
    def test_error_gjs_no_tier(self):
        self.check_module_error('plain.js', 'export const answer = 42;\n', 'defines no tier type')

    def test_error_no_loader(self):
        self.check_module_error('tier.rb', 'class Tier; end\n', "no loader for '.rb' files")

    @needs_python
    def test_error_several_types_need_type(self):
        module = self.write('two.py', 'from gi.repository import Kv\n\n'
                            'class TierA(Kv.SecondaryTier):\n    pass\n\n'
                            'class TierB(Kv.SecondaryTier):\n    pass\n')
        config = self.write('two.conf', f'[tier t]\nmodule = {module}\n')
        self.assert_fails(run(['config', 'check', config]), "missing key 'type'",
                          'two.TierA', 'two.TierB')
        config = self.write('two.conf', f'[tier t]\nmodule = {module}\ntype = fs\n')
        self.assert_fails(run(['config', 'check', config]),
                          "'fs' is not a tier type of module")
        config = self.write('two.conf', f'[tier t]\nmodule = {module}\ntype = two.TierB\n')
        result = run(['config', 'check', config])
        self.assert_ok(result)
        self.assertIn("type two.TierB → two+TierB", result.stdout)


def main():
    global KVTIER, MEMTIER, FILETIER
    KVTIER, MEMTIER, FILETIER = (os.path.abspath(p) for p in sys.argv[1:4])
    del sys.argv[1:4]
    # a module whose Python name is taken must still load: run from the
    # build directory, where nothing is called memtier
    unittest.main(verbosity=2)


if __name__ == '__main__':
    main()
