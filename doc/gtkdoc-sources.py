#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The library's sources as gtk-doc reads them:

    gtkdoc-sources.py GIR OUTDIR SOURCE...   (also writes OUTDIR/kvtier-doc-sections.c)

kvtier's doc comments are written for gi-docgen. gtk-doc does not know its
links (`[method@Kv.TieringManager.add_tier]`), which it printed as text, and
finds no SECTION blocks, so every page's Description was empty and its title
was the file's name. This copies each SOURCE into OUTDIR with:

- every gi-docgen link turned into gtk-doc's form, using the GIR for the C
  names: `kv_tiering_manager_add_tier()`, `#KvTieringManager`,
  `#KvTieringManager:property`, `#KvTieringManager::signal`, `%KV_ERROR_X`;
- for each header, a SECTION block titled with the type it declares (the
  header's name in CamelCase when the GIR has that type), whose description
  is that type's own doc comment.

A link it cannot map is an error (exit 1), so that the gtk-doc reference
never shows one as text.
"""

import os
import re
import sys
import xml.etree.ElementTree as ET

NS = {'core': 'http://www.gtk.org/introspection/core/1.0',
      'c': 'http://www.gtk.org/introspection/c/1.0'}
C_ID = '{%s}identifier' % NS['c']
C_TYPE = '{%s}type' % NS['c']
GLIB_PREFIX = {'GLib': ('G', 'g_'), 'GObject': ('G', 'g_'), 'Gio': ('G', 'g_')}
LINK = re.compile(r'\[(alias|callback|class|const|ctor|enum|error|flags|func|id|iface|method|'
                  r'property|signal|struct|type|vfunc)@([A-Za-z0-9_.:-]+)\]')


def snake(name):
    return re.sub(r'(?<=[a-z0-9])([A-Z])', r'_\1', name).lower()


def read_gir(path):
    """{(kind, 'Kv.Name[.member]'): gtk-doc text} for the namespace's symbols."""
    table = {}
    root = ET.parse(path).getroot()
    ns = root.find('core:namespace', NS)
    prefix = ns.get('name')
    for element in ns:
        tag = element.tag.split('}')[1]
        name = element.get('name')
        if name is None:
            continue
        full = f'{prefix}.{name}'
        ctype = element.get(C_TYPE) or element.get('{http://www.gtk.org/introspection/glib/1.0}type-name')
        if tag in ('class', 'interface', 'record', 'enumeration', 'bitfield', 'callback', 'alias', 'union'):
            if ctype:
                for kind in ('class', 'iface', 'struct', 'enum', 'flags', 'error', 'callback', 'alias', 'type'):
                    table[(kind, full)] = f'#{ctype}'
        if tag in ('function', 'constant') and element.get(C_ID or ''):
            table[('func', full)] = f'{element.get(C_ID)}()'
        if tag == 'constant':
            table[('const', full)] = f'%{element.get(C_TYPE) or name}'
        if tag == 'function':
            table[('func', full)] = f'{element.get(C_ID)}()'
        for member in element:
            mtag = member.tag.split('}')[1]
            mname = member.get('name')
            if mname is None:
                continue
            if mtag in ('method', 'constructor', 'function'):
                text = f'{member.get(C_ID)}()'
                for kind in ('method', 'ctor', 'func'):
                    table[(kind, f'{full}.{mname}')] = text
            elif mtag == 'virtual-method' and ctype:
                table[('vfunc', f'{full}.{mname}')] = f'#{ctype}Class.{mname}()'
            elif mtag == 'property' and ctype:
                table[('property', f'{full}:{mname}')] = f'#{ctype}:{mname}'
            elif mtag == 'signal' and ctype:
                table[('signal', f'{full}::{mname}')] = f'#{ctype}::{mname}'
            elif mtag == 'member' and member.get(C_ID):
                for kind in ('enum', 'flags', 'error'):
                    table[(kind, f'{full}.{mname}')] = f'%{member.get(C_ID)}'
    return prefix, table


def other_namespace(kind, target):
    """A link into GLib, GObject or Gio, by their naming rules."""
    namespace, _, rest = target.partition('.')
    if namespace not in GLIB_PREFIX:
        return None
    type_prefix, func_prefix = GLIB_PREFIX[namespace]
    if kind in ('property', 'signal'):
        sep = '::' if kind == 'signal' else ':'
        type_name, _, member = rest.partition(sep)
        return f'#{type_prefix}{type_name}{sep}{member}'
    if kind in ('method', 'ctor', 'vfunc') or (kind == 'func' and '.' in rest):
        type_name, _, member = rest.rpartition('.')
        return f'{func_prefix}{snake(type_name)}_{member}()'
    if kind == 'func':
        return f'{func_prefix}{rest}()'
    return f'#{type_prefix}{rest}'


def convert(text, table, missing, where):
    def replace(m):
        kind, target = m.group(1), m.group(2)
        found = table.get((kind, target)) or other_namespace(kind, target)
        if found is None:
            missing.append(f'{where}: {m.group(0)}')
            return m.group(0)
        return found
    # `[text][kind@target]` (a link with its own text): gtk-doc has no such
    # form, the symbol stands for itself
    text = re.sub(r'\[[^\]\n]*\](\[[a-z]+@[A-Za-z0-9_.:-]+\])', r'\1', text)
    return LINK.sub(replace, text)


def type_doc(sources, ctype):
    """The body of the `ctype:` doc comment, as comment lines."""
    pattern = re.compile(r'/\*\*\n \* ' + re.escape(ctype) + r':\n((?: \*.*\n)*?) \*/', re.M)
    for text in sources:
        m = pattern.search(text)
        if m:
            lines = m.group(1).splitlines()
            # drop the annotation lines (@field:) and leading blank lines
            body = [line for line in lines if not re.match(r'^ \* @[a-z_]+:', line)]
            while body and body[0].strip() == '*':
                body.pop(0)
            return body
    return []


def section_block(stem, table, prefix, sources):
    camel = ''.join(part.capitalize() for part in stem.split('-'))
    ctype = None
    for kind in ('class', 'struct', 'iface', 'enum'):
        found = table.get((kind, f'{prefix}.{camel[len(prefix):]}'))
        if found:
            ctype = found[1:]
            break
    body = type_doc(sources, ctype) if ctype else []
    title = ctype or stem
    short = ''
    text = ' '.join(line[3:].strip() for line in body if line.startswith(' * '))
    if text:
        short = re.split(r'(?<=[.:;])\s', text, maxsplit=1)[0].rstrip('.:;')
    if not body:
        body = [f' * The declarations of {stem}.h.']
    lines = ['/**', f' * SECTION:{stem}', f' * @title: {title}']
    if short:
        lines.append(f' * @short_description: {short}')
    lines.append(f' * @include: kvtier.h')
    lines.append(' *')
    lines += body
    lines.append(' */')
    return '\n'.join(lines) + '\n'


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    gir, outdir, paths = argv[0], argv[1], argv[2:]
    prefix, table = read_gir(gir)
    os.makedirs(outdir, exist_ok=True)
    texts = {}
    for path in paths:
        with open(path, encoding='utf-8') as f:
            texts[path] = f.read()
    missing = []
    for path, text in texts.items():
        out = convert(text, table, missing, os.path.basename(path))
        name = os.path.basename(path)
        if name.endswith('.h') and not re.search(r'^\s*\*\s*SECTION:', text, re.M) and name not in ('kvtier.h',):
            stem = name[:-2]
            related = [t for p, t in texts.items() if os.path.basename(p)[:-2] == stem]
            out += '\n' + convert(section_block(stem, table, prefix, related), table, missing, name)
        with open(os.path.join(outdir, name), 'w', encoding='utf-8') as f:
            f.write(out)
    # the generated version header is read from the build tree as it is
    with open(os.path.join(outdir, 'kvtier-doc-sections.c'), 'w', encoding='utf-8') as f:
        f.write('/**\n * SECTION:kv-version\n * @title: Version information\n'
                ' * @short_description: The kvtier version a program is built against\n'
                ' * @include: kvtier.h\n *\n'
                ' * The version of the kvtier headers a program is compiled against\n'
                ' * (%KVTIER_MAJOR_VERSION, %KVTIER_MINOR_VERSION, %KVTIER_MICRO_VERSION),\n'
                ' * and KVTIER_CHECK_VERSION() to compare it at compile time.\n */\n')
    for m in missing:
        print(f'gtkdoc-sources: no C name for {m}', file=sys.stderr)
    return 1 if missing else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
