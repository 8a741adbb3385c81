#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# One command from a fresh Debian 12 machine to a result:
#   tools/quickstart.sh bench   install, build, run `kvtier bench` (the main job)
#   tools/quickstart.sh test    install, build, run the whole test suite (then
#                               the core C suites again under valgrind)
#
# It installs the Debian packages kvtier needs (apt-get, as root or through
# sudo), configures ./build with meson, builds with ninja and runs.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="${KVTIER_BUILD_DIR:-$here/build}"

packages=(
  meson ninja-build pkgconf gcc
  libglib2.0-dev libglib2.0-dev-bin
  gobject-introspection libgirepository1.0-dev gir1.2-glib-2.0
  libjson-glib-dev gir1.2-json-1.0
  liburing-dev libxxhash-dev libcairo2-dev
  python3-gi python3-pytest python3-numpy gjs gi-docgen
  valgrind
)

install_packages() {
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  echo "quickstart: installing ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

build_tree() {
  if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "$here" --buildtype=debugoptimized
  fi
  ninja -C "$build"
}

run_tests() {
  local rc=0
  meson test -C "$build" --print-errorlogs --num-processes "$(nproc)" "$@" || rc=$?
  if [ $# -eq 0 ]; then
    # the library's own suites once more under valgrind: no invalid access,
    # no definite leak (the fs suite is left out: valgrind 3.19 cannot run
    # its io_uring engine)
    meson test -C "$build" --setup valgrind --suite core --print-errorlogs \
      --num-processes "$(nproc)" || rc=$?
    /usr/bin/python3 "$here/tools/summarize-tests.py" "$build/meson-logs/testlog.json" \
      "$build/meson-logs/testlog-valgrind.json" || rc=1
  else
    /usr/bin/python3 "$here/tools/summarize-tests.py" "$build/meson-logs/testlog.json" || rc=1
  fi
  return $rc
}

cmd="${1:-}"
shift || true
case "$cmd" in
  bench)
    install_packages
    build_tree
    # run from the build tree: point the registry at the built plugins
    export KVTIER_PLUGIN_PATH="$build/plugins/fs:$build/plugins/example${KVTIER_PLUGIN_PATH:+:$KVTIER_PLUGIN_PATH}"
    exec "$build/tools/kvtier" bench "$@"
    ;;
  test)
    install_packages
    build_tree
    run_tests "$@"
    ;;
  *)
    echo "usage: $0 bench [kvtier bench options] | test [meson test options]" >&2
    exit 2
    ;;
esac
