#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Expands the include lines of a documentation page.

A line of the form

    @include path/from/the/source/root@

is replaced by the whole file as a code block, so that the code on a page
is the code the tests build and run. With --check, verifies that an already
generated page contains every included file verbatim.

The block uses gtk-doc's |[ ... ]| syntax rather than a Markdown fence:
gi-docgen resolves [class@...] links everywhere except in those blocks, and
the included sources have gi-docgen comments of their own.
"""

import argparse
import os
import re
import sys

INCLUDE = re.compile(r'^@include\s+(\S+)@\s*$')
# gi-docgen 2023.1 highlights only these; anything else is a plain block.
LANGUAGES = {'.c': 'c', '.h': 'c', '.js': 'javascript'}
BLOCK_DELIMITER = re.compile(r'^\s*(\|\[|\]\|)')


def included_files(lines):
    for line in lines:
        m = INCLUDE.match(line)
        if m:
            yield m.group(1)


def read_source(root, rel):
    path = os.path.join(root, rel)
    try:
        with open(path, encoding='utf-8') as f:
            text = f.read()
    except OSError as e:
        sys.exit(f'{rel}: cannot include: {e.strerror}')
    for number, line in enumerate(text.splitlines(), 1):
        if BLOCK_DELIMITER.match(line):
            sys.exit(f'{rel}:{number}: starts with a code block delimiter, cannot include it')
    return text


def expand(root, lines):
    out = []
    for line in lines:
        m = INCLUDE.match(line)
        if not m:
            out.append(line)
            continue
        rel = m.group(1)
        lang = LANGUAGES.get(os.path.splitext(rel)[1])
        text = read_source(root, rel)
        out.append(f'|[<!-- language="{lang}" -->\n' if lang else '|[\n')
        out.append(text if text.endswith('\n') else text + '\n')
        out.append(']|\n')
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--root', required=True, help='the source tree root')
    parser.add_argument('--check', metavar='GENERATED',
                        help='check GENERATED instead of writing OUTPUT')
    parser.add_argument('input')
    parser.add_argument('output', nargs='?')
    args = parser.parse_args()

    with open(args.input, encoding='utf-8') as f:
        lines = f.readlines()

    if args.check:
        with open(args.check, encoding='utf-8') as f:
            generated = f.read()
        missing = [rel for rel in included_files(lines)
                   if read_source(args.root, rel) not in generated]
        for rel in missing:
            print(f'{args.check}: does not include the current {rel}; rebuild it')
        n = len(list(included_files(lines)))
        if n == 0:
            sys.exit(f'{args.input}: includes no source file')
        print(f'{n - len(missing)} of {n} included sources up to date')
        sys.exit(1 if missing else 0)

    if args.output is None:
        parser.error('OUTPUT is required without --check')
    text = ''.join(expand(args.root, lines))
    with open(args.output, 'w', encoding='utf-8') as f:
        f.write(text)


if __name__ == '__main__':
    main()
