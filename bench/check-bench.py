#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Runs one benchmark at a small size, as a test: it must exit 0 and print
every line the patterns describe (its result next to its ceiling), so a
benchmark that crashes, hangs (meson's timeout) or silently measures
nothing fails the build.

    check-bench.py [--expect REGEX]... -- COMMAND [ARGS...]
"""

import argparse
import re
import subprocess
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--expect', action='append', default=[],
                        help='a regular expression some stdout line must match')
    parser.add_argument('command', nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ['--'] else args.command
    if not command:
        parser.error('no benchmark command given')

    run = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    sys.stdout.write(run.stdout)
    if run.returncode != 0:
        print(f'check-bench: {command[0]} exited with {run.returncode}', file=sys.stderr)
        return 1
    missing = [p for p in args.expect if not re.search(p, run.stdout, re.MULTILINE)]
    for p in missing:
        print(f'check-bench: {command[0]} printed no line matching {p!r}', file=sys.stderr)
    return 1 if missing else 0


if __name__ == '__main__':
    sys.exit(main())
