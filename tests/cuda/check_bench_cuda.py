#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""`kvtier bench --device cuda` end to end, on the CUDA runtime's test double
(KVTIER_PLUGIN_PATH starts with the fake `kvtier-cuda` module): a device
small enough that chunks come back from the primary tier and the fs tier,
each computed by the device's fill-blocks and every loaded one checked by
its check-blocks. --sync makes every step wait for its transfers, so the
loaded chunks do not depend on how busy the machine is. Usage: check_bench_cuda.py KVTIER TRACE"""

import re
import subprocess
import sys

kvtier, trace = sys.argv[1], sys.argv[2]
args = [kvtier, 'bench', '--device', 'cuda', '--trace', trace, '--requests', '120',
        '--gpu-size', '8MiB', '--primary-size', '16MiB', '--prefill-rate', '1e9',
        '--no-progress', '--sync']
run = subprocess.run(args, capture_output=True, text=True, timeout=240)
sys.stdout.write(run.stdout)
sys.stderr.write(run.stderr)
if run.returncode != 0:
    sys.exit('kvtier bench exited %d' % run.returncode)
if not re.search(r'device\s+cuda:', run.stdout):
    sys.exit('the bench did not run on the cuda device')
m = re.search(r'verified\s+(\d+) loaded chunks checked byte for byte, (\d+) mismatches', run.stdout)
if m is None:
    sys.exit('no verification line')
verified, mismatches = int(m.group(1)), int(m.group(2))
if verified == 0 or mismatches != 0:
    sys.exit('%d chunks verified, %d mismatches' % (verified, mismatches))
print('ok: %d loaded chunks verified on the device' % verified)
