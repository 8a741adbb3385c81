#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Checks a generated API reference (gi-docgen or gtk-doc HTML):

    check-reference.py [--descriptions] DIR

Fails on a link to a placeholder host (example.invalid, example.com), on a
gi-docgen link left as text (`[method@Kv.Foo.bar]` outside code: the tool
did not resolve it, or does not know the syntax), and with --descriptions
(gtk-doc) on a page whose Description section is empty. Prints each
problem with its page.
"""

import html
import os
import re
import sys

LINK = re.compile(r'\[(?:alias|callback|class|const|ctor|enum|error|flags|func|id|iface|method|'
                  r'property|signal|struct|type|vfunc)@[A-Za-z0-9_.:-]+\]')
PLACEHOLDER = re.compile(r'https?://(?:[a-z0-9.-]+\.)?(?:example\.(?:invalid|com|org|net))\b')
CODE = re.compile(r'<(pre|code)\b.*?</\1>', re.S)
TAG = re.compile(r'<[^>]+>')
# gtk-doc: <div class="refsect1"><a name="..."></a><h2>Description</h2> then
# the next refsect1
DESCRIPTION = re.compile(r'<h2>Description</h2>(.*?)(?=<div class="refsect1"|<div class="footer"|\Z)', re.S)


def check_page(path, descriptions):
    problems = []
    with open(path, encoding='utf-8', errors='replace') as f:
        text = f.read()
    for m in PLACEHOLDER.finditer(text):
        problems.append(f'links to the placeholder {m.group(0)}')
    prose = CODE.sub('', text)
    for m in LINK.finditer(html.unescape(TAG.sub('', prose))):
        problems.append(f'unresolved link {m.group(0)}')
    if descriptions:
        m = DESCRIPTION.search(text)
        if m and not html.unescape(TAG.sub('', m.group(1))).strip():
            problems.append('empty Description section')
    return problems


def main(argv):
    descriptions = '--descriptions' in argv
    args = [a for a in argv if a != '--descriptions']
    if len(args) != 1:
        sys.exit(__doc__)
    root = args[0]
    pages = 0
    failures = 0
    for directory, _, files in os.walk(root):
        for name in sorted(files):
            if not name.endswith('.html'):
                continue
            pages += 1
            path = os.path.join(directory, name)
            for problem in check_page(path, descriptions):
                failures += 1
                print(f'{os.path.relpath(path, root)}: {problem}')
    print(f'{pages} pages checked, {failures} problems')
    if pages == 0:
        print(f'no HTML page under {root}')
        return 1
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
