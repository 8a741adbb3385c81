#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Fail when gtk-doc found a public symbol without documentation.

usage: check-undocumented.py MODULE-undocumented.txt

gtk-doc scans every public header, so this covers what the GIR (and so
gi-docgen check) does not: function-like macros, and symbols skipped for
introspection. Symbols incomplete (an undocumented parameter or return
value) fail too. Two kinds of entries do not:
- missing section descriptions: kvtier documents each type on its class,
  gi-docgen style, and has no SECTION blocks;
- the KV_TYPE_<NAME> macros (the GType of a documented type): gtk-doc
  itself files them as "Standard" boilerplate, which needs no
  documentation, for some types and not others, depending only on how the
  header declares the type.
"""
import re
import sys


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1], encoding="utf-8") as report:
        lines = report.read().splitlines()
    summary, listed = lines[:4], [line for line in lines[4:] if line.strip()]
    print("\n".join(summary))
    if not summary or "symbol docs coverage" not in summary[0]:
        print(f"{sys.argv[1]}: not a gtk-doc report", file=sys.stderr)
        return 1
    exempt = re.compile(r":(long|short)_description$|^KV_TYPE_[A-Z0-9_]+$")
    missing = [line for line in listed if not exempt.search(line)]
    for line in missing:
        print(f"undocumented: {line}")
    if missing:
        print(f"{len(missing)} public symbols are not (fully) documented", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
