#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# kvtier as installed: configures BUILD with --prefix=a temporary directory
# (BUILD-prefix, removed at exit),
# runs `meson install`, and uses the prefix the way a user would, with a
# clean environment (no LD_LIBRARY_PATH, no KVTIER_*_PATH, nothing of the
# build tree):
#   - the CLI: kvtier --version, plugins (the installed plugins), bench, and
#     bench with a Python and a JavaScript tier module (the installed loaders);
#   - man kvtier and man kvtier-bench, found from PATH as man-db does;
#   - C: a program built with `pkg-config --cflags --libs kvtier-1` that loads
#     the plugins from `pkg-config --variable=plugindir kvtier-1`;
#   - Python: `import kvtier` and gi.repository.Kv, with PYTHONPATH and
#     GI_TYPELIB_PATH naming the prefix (doc/overview.md, "Installing"),
#     and the package installed again with pip from bindings/python;
#   - GJS: bindings/gjs/example.js with GI_TYPELIB_PATH.
#
#   tests/install/test-install.sh [BUILD]     (default: ./build-install;
#                                              the prefix is BUILD-prefix)
#
# Run by tools/quickstart.sh test (CI). Prints "install: N checks passed"
# and exits 0, or names the failed check and exits 1.
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$src/build-install}
work=$(mktemp -d "${TMPDIR:-/tmp}/kvtier-install-XXXXXX")
# a fixed prefix next to BUILD, emptied first: a new prefix each run would
# reconfigure BUILD and rebuild all of it (the plugin directory is compiled in)
prefix=$build-prefix
trap 'rm -rf "$work" "$prefix"' EXIT
rm -rf "$prefix"
checks=0

fail() {
  echo "install: FAILED: $*" >&2
  exit 1
}

pass() {
  checks=$((checks + 1))
  echo "install: ok: $*"
}

# A clean environment: what a user of the prefix has.
clean_env=(env -i HOME="$work" PATH="$prefix/bin:/usr/bin:/bin" LANG=C.UTF-8 TMPDIR="$work")

if [ -f "$build/build.ninja" ]; then
  meson configure "$build" --prefix="$prefix" >/dev/null
elif [ -e "$build" ]; then
  fail "$build exists but is not a meson build directory"
else
  # what the check needs; the docs and sanitizers are built elsewhere
  meson setup "$build" "$src" --prefix="$prefix" --buildtype=debugoptimized \
    -Ddocs=disabled -Dgtk_doc=disabled -Dcuda=disabled -Dfuzzing=disabled >/dev/null
fi
# build what is installed (not the tests and benchmarks), then install it
mapfile -t installed < <(meson introspect "$build" --targets | /usr/bin/python3 -c '
import json, os, sys
build = sys.argv[1]
for target in json.load(sys.stdin):
    if target["installed"]:
        for f in target["filename"]:
            print(os.path.relpath(f, build))' "$build")
ninja -C "$build" "${installed[@]}" >/dev/null
meson install -C "$build" --no-rebuild --quiet >/dev/null
multiarch=$(meson introspect "$build" --buildoptions |
  /usr/bin/python3 -c 'import json, sys; print([o["value"] for o in json.load(sys.stdin) if o["name"] == "libdir"][0])')
libdir=$prefix/$multiarch
typelibdir=$libdir/girepository-1.0
pythondir=$(dirname "$(dirname "$(find "$prefix" -path '*/kvtier/__init__.py' | head -n 1)")")
[ -d "$pythondir" ] || fail "the kvtier Python package is not installed under $prefix"

# ---- the CLI ---------------------------------------------------------------
# (output is taken whole before grep -q reads it: under pipefail, a writer
# that grep -q leaves early dies of SIGPIPE and fails the pipeline)
version=$("${clean_env[@]}" kvtier --version) || fail "kvtier --version"
grep -q '^kvtier ' <<<"$version" || fail "kvtier --version printed: $version"
libs=$(ldd "$prefix/bin/kvtier")
grep -q "libkvtier-1.so.0 => $libdir/libkvtier-1.so.0" <<<"$libs" ||
  fail "kvtier does not find $libdir/libkvtier-1.so.0 by itself: $(grep kvtier <<<"$libs")"
pass "kvtier runs from the prefix without LD_LIBRARY_PATH"

plugins=$("${clean_env[@]}" kvtier plugins)
for type in fs example peer; do
  grep -q "^  $type  " <<<"$plugins" || fail "kvtier plugins does not list the installed '$type' tier:
$plugins"
done
grep -q "$libdir/kvtier-1/plugins" <<<"$plugins" || fail "kvtier plugins names no plugin of $libdir/kvtier-1/plugins"
pass "kvtier plugins lists the installed plugins"

bench=(kvtier bench --conversations 6 --turns 3 --chunk-size 64KiB --layers 4
       --gpu-size 1MiB --primary-size 1MiB --sync --no-progress)
"${clean_env[@]}" "${bench[@]}" --json "$work/bench.json" >"$work/bench.out" 2>&1 ||
  fail "kvtier bench: $(cat "$work/bench.out")"
pass "kvtier bench (host device, primary, fs tier)"

for module in "$src/tests/bindings/python/memtier.py" "$src/tests/bindings/gjs/fileTier.js"; do
  name=$(basename "${module%.*}")
  mkdir -p "$work/$name-store"
  printf '[primary]\nsize = 1MiB\nslot-size = 64KiB\n\n[tier mine]\nmodule = %s\ndirectory = %s\n' \
    "$module" "$work/$name-store" >"$work/$name.conf"
  [ "$name" = memtier ] && sed -i '/^directory/d' "$work/$name.conf"
  "${clean_env[@]}" "${bench[@]}" --config "$work/$name.conf" --json "$work/$name.json" \
    >"$work/$name.out" 2>&1 || fail "kvtier bench with module = $module: $(cat "$work/$name.out")"
  /usr/bin/python3 - "$work/$name.json" "$name" <<'EOF' || fail "kvtier bench with module = $module: the tier served nothing"
import json, sys
report = json.load(open(sys.argv[1]))
tiers = {t['name']: t for t in report['setup']['tiers']}
assert tiers['mine']['type'] == sys.argv[2], tiers
assert report['hits']['mine'] > 0, report['hits']
assert report['verify']['mismatches'] == 0
EOF
  pass "kvtier bench with a tier module ($name, the installed loader)"
done

# ---- man pages ---------------------------------------------------------------
for page in kvtier kvtier-bench kvtier-config kvtier-peer; do
  found=$("${clean_env[@]}" man -w "$page" 2>&1) || fail "man $page: $found"
  [ "$found" = "$prefix/share/man/man1/$page.1" ] || fail "man $page found $found"
done
man_text=$("${clean_env[@]}" MANWIDTH=100 man -P cat kvtier-bench 2>/dev/null) || fail "man kvtier-bench"
grep -q -- '--chunk-size' <<<"$man_text" || fail "man kvtier-bench does not document --chunk-size"
pass "man kvtier, kvtier-bench, kvtier-config, kvtier-peer"

# ---- C, through pkg-config -------------------------------------------------------
pc=("${clean_env[@]}" PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config)
plugindir=$("${pc[@]}" --variable=plugindir kvtier-1)
[ "$plugindir" = "$libdir/kvtier-1/plugins" ] || fail "kvtier-1.pc plugindir is '$plugindir'"
cat >"$work/use-kvtier.c" <<'EOF'
#include <stdio.h>
#include <kvtier.h>

int
main (void)
{
  g_autoptr(KvTierRegistry) registry = kv_tier_registry_new ();
  g_autoptr(GError) error = NULL;

  if (!kv_tier_registry_load_plugins (registry, &error))
    {
      fprintf (stderr, "%s\n", error->message);
      return 1;
    }
  if (kv_tier_registry_lookup_tier_type (registry, "fs", &error) == G_TYPE_INVALID)
    {
      fprintf (stderr, "%s\n", error->message);
      return 2;
    }
  printf ("kvtier %u.%u.%u\n", kv_get_major_version (), kv_get_minor_version (),
          kv_get_micro_version ());
  return 0;
}
EOF
# shellcheck disable=SC2046
"${clean_env[@]}" cc -o "$work/use-kvtier" "$work/use-kvtier.c" \
  $("${pc[@]}" --cflags --libs kvtier-1) -Wl,-rpath,"$("${pc[@]}" --variable=libdir kvtier-1)" ||
  fail "a C program does not build with pkg-config kvtier-1"
ran=$("${clean_env[@]}" "$work/use-kvtier") || fail "the C program failed"
grep -q '^kvtier ' <<<"$ran" || fail "the C program did not run: $ran"
pass "C: pkg-config kvtier-1 (cflags, libs, plugindir), plugins from the prefix"

# ---- Python ------------------------------------------------------------------------
py_env=("${clean_env[@]}" PYTHONPATH="$pythondir" GI_TYPELIB_PATH="$typelibdir")
"${py_env[@]}" /usr/bin/python3 - "$libdir" <<'EOF' || fail "Python: import kvtier from the prefix"
import os, sys
import kvtier
from gi.repository import Kv
assert kvtier.__file__.startswith(os.environ['PYTHONPATH']), kvtier.__file__
assert Kv.get_major_version() == 0 or Kv.get_major_version() > 0
manager = kvtier.config_from_dict({'primary': {'size': '256KiB', 'slot-size': '64KiB'}}).create_manager()
manager.shutdown()
maps = open('/proc/self/maps').read()
assert sys.argv[1] + '/libkvtier-1.so.0' in maps, 'libkvtier-1 was not loaded from the prefix'
EOF
pass "Python: import kvtier, gi.repository.Kv, a manager (PYTHONPATH, GI_TYPELIB_PATH only)"

cp -r "$src/bindings/python" "$work/pysrc"
"${clean_env[@]}" /usr/bin/python3 -m pip install --quiet --no-build-isolation --no-index \
  --prefix "$work/pip" "$work/pysrc" >"$work/pip.out" 2>&1 || fail "pip install bindings/python: $(cat "$work/pip.out")"
pipdir=$(dirname "$(dirname "$(find "$work/pip" -path '*/kvtier/__init__.py' | head -n 1)")")
"${clean_env[@]}" PYTHONPATH="$pipdir" GI_TYPELIB_PATH="$typelibdir" /usr/bin/python3 -c \
  'import kvtier, kvtier.vllm; assert kvtier.__file__.startswith("'"$pipdir"'"), kvtier.__file__' ||
  fail "Python: the package pip installed from bindings/python does not import"
pass "Python: pip install bindings/python (pyproject.toml, the system's PyGObject)"

# ---- GJS ----------------------------------------------------------------------------
"${clean_env[@]}" GI_TYPELIB_PATH="$typelibdir" gjs -m "$src/bindings/gjs/example.js" >"$work/gjs.out" 2>&1 ||
  fail "GJS: bindings/gjs/example.js: $(cat "$work/gjs.out")"
pass "GJS: bindings/gjs/example.js (GI_TYPELIB_PATH only)"

echo "install: $checks checks passed"
