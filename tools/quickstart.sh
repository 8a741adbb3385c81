#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# One command from a fresh Debian 12 machine to a result:
#   tools/quickstart.sh bench   install, build, run `kvtier bench` (the main job)
#   tools/quickstart.sh test    install, build, run the whole test suite, then
#                               the core C suites again under valgrind, the
#                               whole suite again built with ASan and UBSan
#                               (./build-asan), an install into a temporary
#                               prefix used from there (./build-install,
#                               tests/install/test-install.sh), and each fuzz
#                               target for 20 s (./build-fuzz, clang and
#                               libFuzzer)
#   tools/quickstart.sh test ARGS...
#                               only `meson test` in ./build with those
#                               arguments (test names, --suite ...)
#
# It installs the Debian packages kvtier needs (apt-get, as root or through
# sudo), configures ./build with meson, builds with ninja and runs. The test
# command builds with -Dwerror=true and ends with the line
# "N passed, N failed, N skipped" over every run.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="${KVTIER_BUILD_DIR:-$here/build}"
build_asan="${KVTIER_ASAN_BUILD_DIR:-$here/build-asan}"
build_fuzz="${KVTIER_FUZZ_BUILD_DIR:-$here/build-fuzz}"
build_install="${KVTIER_INSTALL_BUILD_DIR:-$here/build-install}"

packages=(
  meson ninja-build pkgconf gcc
  libglib2.0-dev libglib2.0-dev-bin
  gobject-introspection libgirepository1.0-dev gir1.2-glib-2.0
  libjson-glib-dev gir1.2-json-1.0
  liburing-dev libxxhash-dev libcairo2-dev
  python3-gi python3-pytest python3-numpy gjs gi-docgen
  # kvtier.vllm's stats in a real Prometheus client, as vLLM exports them
  python3-prometheus-client
  # the gtk-doc reference and its undocumented-symbol check (-Dgtk_doc)
  gtk-doc-tools
  valgrind
  # the fuzz targets (tests/fuzz): clang's libFuzzer and sanitizer runtimes
  clang libclang-rt-14-dev libfuzzer-14-dev
  # the redis tier (plugins/redis) and its tests: servers, TLS, a test CA
  redis-server redis-tools libhiredis-dev glib-networking openssl
  # the peer tier and kvtier serve: libsoup 3 (TLS through glib-networking,
  # above); its tests use openssl (certificates) and curl (/metrics)
  libsoup-3.0-dev curl
  # doc/metrics.md, deploy/: a real Prometheus and promtool scrape and check
  # /metrics, the scrape configuration and the alert rules; systemd-analyze
  # verifies the unit (no running systemd needed)
  prometheus systemd
  # the s3 tier (plugins/s3): libcurl's multi interface (OpenSSL for
  # https); its tests and bench/s3-throughput run a real Ceph RADOS Gateway
  # on a one-node RADOS cluster (about 68 MB)
  libcurl4-openssl-dev radosgw ceph-mon ceph-osd
  # tier modules (plugins/loader-*): libpython 3 to embed, libgjs
  python3-dev libgjs-dev
)

install_packages() {
  local missing=()
  for p in "${packages[@]}"; do
    [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" == *"install ok installed"* ]] || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  echo "quickstart: installing ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# setup_build DIR [meson options...]: configure DIR once, then keep the
# given options on it (a tree first configured by `bench` gets -Dwerror=true
# when `test` runs).
setup_build() {
  local dir=$1
  shift
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$here" --buildtype=debugoptimized "$@"
  elif [ $# -gt 0 ]; then
    meson configure "$dir" "$@" >/dev/null
  fi
}

# a section header with the seconds since the script started
banner() {
  printf '\n=== %s (at %d s) ===\n' "$*" "$SECONDS"
}

have_libfuzzer() {
  command -v clang >/dev/null 2>&1 || return 1
  printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n);\nint LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }\n' |
    clang -x c -fsanitize=fuzzer,address -o /dev/null - >/dev/null 2>&1
}

run_tests() {
  local rc=0
  local jobs
  jobs=$(nproc)
  if [ $# -gt 0 ]; then
    meson test -C "$build" --print-errorlogs --num-processes "$jobs" "$@" || rc=$?
    /usr/bin/python3 "$here/tools/summarize-tests.py" "$build/meson-logs/testlog.json" || rc=1
    return $rc
  fi
  local logs=("$build/meson-logs/testlog.json" "$build/meson-logs/testlog-valgrind.json")

  banner "whole suite ($build)"
  meson test -C "$build" --print-errorlogs --num-processes "$jobs" || rc=$?

  # the library's own suites once more under valgrind: no invalid access,
  # no definite leak (the fs suite is left out: valgrind 3.19 cannot run
  # its io_uring engine)
  banner "core suites under valgrind"
  meson test -C "$build" --setup valgrind --suite core --print-errorlogs \
    --num-processes "$jobs" || rc=$?

  # the whole suite again, built with ASan and UBSan (gcc): memory errors,
  # leaks and undefined behaviour anywhere the tests reach, the Python and
  # GJS suites included (top meson.build, tests/lsan.supp)
  banner "whole suite under ASan and UBSan ($build_asan)"
  rm -f "$build_asan/meson-logs/testlog.json"
  if setup_build "$build_asan" -Dwerror=true -Db_sanitize=address,undefined -Db_lundef=false &&
     ninja -C "$build_asan"; then
    meson test -C "$build_asan" --print-errorlogs --num-processes "$jobs" || rc=$?
  else
    rc=1
  fi
  logs+=("$build_asan/meson-logs/testlog.json")

  # kvtier as installed: a build installed into a temporary prefix, used
  # from there in a clean environment (CLI, man, C, Python, pip, GJS)
  banner "installed into a temporary prefix ($build_install)"
  local install_result=OK
  "$here/tests/install/test-install.sh" "$build_install" || { install_result=FAIL; rc=1; }
  mkdir -p "$build_install"
  printf '{"name": "install", "result": "%s"}\n' "$install_result" >"$build_install/install-testlog.json"
  logs+=("$build_install/install-testlog.json")

  # each libFuzzer target for a fixed time (tests/fuzz/README.md); their
  # seed corpora also ran above, in both builds, as the fuzz-replay tests
  if have_libfuzzer; then
    banner "fuzz targets, ${KVTIER_FUZZ_SECONDS:-20} s each ($build_fuzz)"
    rm -f "$build_fuzz/meson-logs/testlog.json"
    if CC=clang setup_build "$build_fuzz" -Dfuzzing=enabled -Db_sanitize=address,undefined \
         -Db_lundef=false -Dintrospection=disabled -Ddocs=disabled &&
       ninja -C "$build_fuzz" fuzzers; then
      meson test -C "$build_fuzz" --no-rebuild --suite fuzz --print-errorlogs \
        --num-processes "$jobs" || rc=$?
    else
      rc=1
    fi
    logs+=("$build_fuzz/meson-logs/testlog.json")
  else
    echo "quickstart: clang with libFuzzer not found: the fuzz targets ran only as replay tests" >&2
  fi

  banner "summary"
  /usr/bin/python3 "$here/tools/summarize-tests.py" "${logs[@]}" || rc=1
  return $rc
}

cmd="${1:-}"
shift || true
case "$cmd" in
  bench)
    install_packages
    setup_build "$build"
    ninja -C "$build"
    # run from the build tree: point the registry at the built plugins
    export KVTIER_PLUGIN_PATH="$build/plugins/fs:$build/plugins/example${KVTIER_PLUGIN_PATH:+:$KVTIER_PLUGIN_PATH}"
    exec "$build/tools/kvtier" bench "$@"
    ;;
  test)
    install_packages
    # warnings are errors in the tree the tests run on; the gtk-doc build
    # checks that every public symbol of the headers is documented
    setup_build "$build" -Dwerror=true -Dgtk_doc=enabled
    ninja -C "$build"
    run_tests "$@"
    ;;
  *)
    echo "usage: $0 bench [kvtier bench options] | test [meson test options]" >&2
    exit 2
    ;;
esac
