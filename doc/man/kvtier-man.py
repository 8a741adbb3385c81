#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Man pages of the kvtier command, made from its own --help.

    kvtier-man.py KVTIER VERSION OUTDIR COMMAND...
        writes OUTDIR/kvtier.1 and OUTDIR/kvtier-COMMAND.1 for each COMMAND
    kvtier-man.py --check KVTIER PAGEDIR
        fails unless every command `kvtier --help` lists has a page, every
        option of its --help is in it, and every page renders without a
        warning from groff (-ww) and has a NAME line that lexgrog reads

Generated, so that a page cannot disagree with the options it documents; the
check makes a command added without a page fail CI.
"""

import os
import re
import subprocess
import sys

SEE_ALSO_DOCS = ('doc/config.md (configuration files), doc/bench.md, doc/protocol.md, '
                 'doc/overview.md, and the API reference installed under '
                 'share/doc/Kv-1')


def kvtier_help(kvtier, *args):
    result = subprocess.run([kvtier, *args, '--help'], capture_output=True, text=True,
                            env=dict(os.environ, LC_ALL='C.UTF-8'), check=True)
    return result.stdout


def parse_help(text):
    """(usage, summary lines, [(option, description)], commands, description lines)."""
    lines = text.splitlines()
    usage = ''
    summary, options, commands, tail = [], [], [], []
    section = None
    for line in lines:
        if line == 'Usage:':
            section = 'usage'
            continue
        if line in ('Help Options:', 'Application Options:'):
            section = 'options'
            continue
        if line == 'Commands:':
            section = 'commands'
            continue
        if section == 'usage':
            if line.strip() and not usage:
                usage = line.strip()
                section = 'summary'
            continue
        if section == 'summary':
            if line.strip() or summary:
                summary.append(line)
            continue
        if section == 'options':
            m = re.match(r'^  (\S.*?)\s{2,}(\S.*)$', line)
            if m:
                options.append([m.group(1), m.group(2)])
            elif line.startswith('    ') and options:
                options[-1][1] += ' ' + line.strip()
            elif line.strip():
                section = 'tail'
                tail.append(line)
            continue
        if section == 'commands':
            m = re.match(r'^  (\S+)\s+(\S.*)$', line)
            if m:
                commands.append((m.group(1), m.group(2)))
            elif line.strip():
                section = 'tail'
                tail.append(line)
            continue
        if section == 'tail':
            tail.append(line)
    while summary and not summary[-1].strip():
        summary.pop()
    return usage, summary, options, commands, tail


def roff_escape(text):
    text = text.replace('\\', '\\e')
    text = text.replace('-', '\\-')
    # groff reads ASCII: anything else as its Unicode escape (…, →, “ ”)
    text = ''.join(c if ord(c) < 128 else '\\[u%04X]' % ord(c) for c in text)
    lines = []
    for line in text.split('\n'):
        if line.startswith(('.', "'")):
            line = '\\&' + line
        lines.append(line)
    return '\n'.join(lines)


def paragraphs(lines):
    """Lines of --help text as roff paragraphs (a blank line separates)."""
    out, current = [], []
    for line in lines + ['']:
        if line.strip():
            current.append(line.strip())
        elif current:
            out.append('.PP\n' + roff_escape(' '.join(current)))
            current = []
    return '\n'.join(out)


def page(name, version, title, usage, summary, options, commands=(), tail=(), see_also=()):
    out = [f'.TH {name.upper()} 1 "" "kvtier {version}" "kvtier manual"',
           '.SH NAME',
           f'{roff_escape(name)} \\- {roff_escape(title)}',
           '.SH SYNOPSIS',
           '.B ' + roff_escape(usage.split(' - ')[0]),
           '.SH DESCRIPTION']
    out.append(paragraphs(summary) if summary else '.PP\n' + roff_escape(title))
    if commands:
        out.append('.SH COMMANDS')
        for command, what in commands:
            out.append(f'.TP\n.B {roff_escape(command)}\n{roff_escape(what.rstrip("."))}.\n'
                       f'See \\fBkvtier\\-{roff_escape(command)}\\fR(1).')
    out.append('.SH OPTIONS')
    for option, what in options:
        out.append(f'.TP\n.B {roff_escape(option)}\n{roff_escape(what)}')
    if tail:
        out.append(paragraphs(list(tail)))
    out.append('.SH EXIT STATUS\n0 success, 1 failure, 2 usage error.')
    out.append('.SH ENVIRONMENT\n.TP\n.B KVTIER_PLUGIN_PATH\n'
               'Directories (colon\\-separated) searched for plugins before the installed ones.\n'
               '.TP\n.B KVTIER_LOADER_PATH\n'
               'Directories searched for the tier module loaders before the installed ones.')
    refs = ', '.join(f'\\fB{roff_escape(p)}\\fR(1)' for p in see_also)
    out.append('.SH SEE ALSO\n' + (refs + '.\n.PP\n' if refs else '') + roff_escape(SEE_ALSO_DOCS) + '.')
    return '\n'.join(out) + '\n'


def generate(kvtier, version, outdir, commands):
    os.makedirs(outdir, exist_ok=True)
    usage, summary, options, listed, tail = parse_help(kvtier_help(kvtier))
    listed = [(c, w) for c, w in listed if c in commands]
    tail = [t for t in tail if not t.startswith('Exit status')]
    with open(os.path.join(outdir, 'kvtier.1'), 'w') as f:
        f.write(page('kvtier', version, 'tiered KV-cache offloading for LLM inference engines',
                     usage, summary, options, listed, tail,
                     [f'kvtier-{c}' for c, _ in listed]))
    for command, what in listed:
        usage, summary, options, _, tail = parse_help(kvtier_help(kvtier, command))
        with open(os.path.join(outdir, f'kvtier-{command}.1'), 'w') as f:
            f.write(page(f'kvtier-{command}', version, what, usage, summary, options, (), tail,
                         ['kvtier']))
    missing = set(commands) - {c for c, _ in listed}
    if missing:
        sys.exit(f'kvtier --help does not list {", ".join(sorted(missing))}')


def check(kvtier, pagedir):
    failures = []
    _, _, _, listed, _ = parse_help(kvtier_help(kvtier))
    pages = {'kvtier': None} | {f'kvtier-{c}': c for c, _ in listed}
    for name, command in pages.items():
        path = os.path.join(pagedir, name + '.1')
        if not os.path.exists(path):
            failures.append(f'{name}: no man page (add the command to doc/man/meson.build)')
            continue
        text = open(path).read()
        _, _, options, _, _ = parse_help(kvtier_help(kvtier, *([command] if command else [])))
        for option, _ in options:
            if roff_escape(option) not in text:
                failures.append(f'{name}.1 does not document {option}')
        rendered = subprocess.run(['groff', '-man', '-Tutf8', '-ww', '-z', path],
                                  capture_output=True, text=True)
        if rendered.returncode != 0 or rendered.stderr.strip():
            failures.append(f'{name}.1: groff: {rendered.stderr.strip()}')
        whatis = subprocess.run(['lexgrog', path], capture_output=True, text=True)
        if whatis.returncode != 0 or f'"{name} - ' not in whatis.stdout:
            failures.append(f'{name}.1: lexgrog finds no NAME line: {whatis.stdout.strip()}')
    for failure in failures:
        print(failure, file=sys.stderr)
    print(f'{len(pages)} pages checked, {len(failures)} problems')
    return 1 if failures else 0


if __name__ == '__main__':
    if len(sys.argv) >= 2 and sys.argv[1] == '--check':
        sys.exit(check(sys.argv[2], sys.argv[3]))
    generate(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
