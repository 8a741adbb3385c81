#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# tests/gpu/bundle.sh DEST
#
# Packs the CUDA device's GPU check into DEST, one folder (at most 64 MiB)
# that runs on a GPU machine with its own NVIDIA driver and nothing else:
# no Debian packages, no network, no build tree.
#
#   DEST/run.sh        the check: host and GPU tests, bench/cuda-copy, then
#                      `kvtier bench --device cuda` on the trace excerpt
#   DEST/bin/          kvtier, cuda-copy and the test programs
#   DEST/plugins/      libkvtier-cuda.so, libkvtier-fs.so (KVTIER_PLUGIN_PATH)
#   DEST/lib/          libkvtier-1 and every shared library the above load
#                      (GLib, GIO, json-glib, xxhash, liburing, cairo's, the
#                      CUDA runtime), except glibc's own and libcuda: the
#                      target's driver brings libcuda
#   DEST/glibc/        the build machine's glibc (loader, libc, libm, ...),
#                      used by run.sh only where the target's glibc is older
#                      than the bundle's libraries need
#   DEST/data/         the Mooncake trace excerpt
#   DEST/MANIFEST      commit, build options, the glibc the binaries need
#
# Builds with -Dcuda=enabled in its own directory (KVTIER_GPU_BUILD_DIR,
# default ./build-gpu), release mode, no introspection or docs.
#
# For the device tool of a session lent a GPU: make the bundle in an
# ignored folder of the tree, e.g. `tests/gpu/bundle.sh build-gpu-bundle`,
# then run `bash build-gpu-bundle/run.sh` there with carry:
# ["build-gpu-bundle"]; its logs land in $OUT.

set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 DEST" >&2
  exit 2
fi

src=$(cd "$(dirname "$0")/../.." && pwd)
dest=$(realpath -m "$1")
build=${KVTIER_GPU_BUILD_DIR:-$src/build-gpu}
limit=$((64 * 1024 * 1024))

if [ -e "$dest" ] && [ -n "$(ls -A "$dest" 2>/dev/null)" ]; then
  echo "bundle: $dest exists and is not empty; give a new or empty folder" >&2
  exit 2
fi

# glibc's libraries and the driver's: the target has its own.
system_lib() {
  case "$1" in
    linux-vdso.so.*|ld-linux*.so.*|libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|\
    librt.so.*|libresolv.so.*|libutil.so.*|libanl.so.*|libcuda.so.*|libnvidia-*.so.*)
      return 0 ;;
  esac
  return 1
}

echo "bundle: building in $build"
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" "$src" --buildtype=release -Dcuda=enabled -Dintrospection=disabled \
    -Ddocs=disabled -Dgtk_doc=disabled -Dfuzzing=disabled
else
  meson configure "$build" -Dcuda=enabled >/dev/null
fi
ninja -C "$build" tools/kvtier bench/cuda-copy tests/gpu/test-cuda-device \
  tests/cuda/test-cuda-plugin tests/cuda/test-cuda-layout \
  plugins/cuda/libkvtier-cuda.so plugins/fs/libkvtier-fs.so

mkdir -p "$dest/bin" "$dest/lib" "$dest/plugins" "$dest/data" "$dest/glibc"
for exe in tools/kvtier bench/cuda-copy tests/gpu/test-cuda-device \
           tests/cuda/test-cuda-plugin tests/cuda/test-cuda-layout; do
  cp "$build/$exe" "$dest/bin/"
done
cp "$build/plugins/cuda/libkvtier-cuda.so" "$build/plugins/fs/libkvtier-fs.so" "$dest/plugins/"
cp "$src/tests/data/mooncake-excerpt.jsonl" "$src/tests/data/README.md" "$dest/data/"
cp "$src/tests/gpu/run.sh" "$dest/run.sh"
chmod +x "$dest/run.sh"

# Every library the binaries and plugins load, and the libraries those
# load, copied under the name the loader asks for.
copy_deps() {
  local file=$1 line name path
  while IFS= read -r line; do
    case "$line" in
      *" => not found"*)
        name=${line%% =>*}; name=${name//[[:space:]]/}
        if ! system_lib "$name"; then
          echo "bundle: $file needs $name, which is not found" >&2
          exit 1
        fi ;;
      *" => "*)
        name=${line%% =>*}; name=${name//[[:space:]]/}
        path=${line#*=> }; path=${path%% (*}
        if ! system_lib "$name" && [ ! -e "$dest/lib/$name" ]; then
          cp -L "$path" "$dest/lib/$name"
          copy_deps "$dest/lib/$name"
        elif system_lib "$name" && [ -e "$path" ] && [ ! -e "$dest/glibc/$name" ] &&
             [[ "$name" != libcuda* && "$name" != libnvidia-* ]]; then
          cp -L "$path" "$dest/glibc/$name"
        fi ;;
      *ld-linux*)
        path=${line%% (*}; path=${path//[[:space:]]/}
        [ -e "$dest/glibc/$(basename "$path")" ] || cp -L "$path" "$dest/glibc/$(basename "$path")" ;;
    esac
  done < <(LD_LIBRARY_PATH="$build/kvtier:${CUDA_LIBDIR:-/usr/local/cuda/lib64}" ldd "$file")
}
for f in "$dest"/bin/* "$dest"/plugins/*.so; do
  copy_deps "$f"
done

# Prove the bundle stands alone: with only DEST/lib on the library path,
# every library resolves there or to glibc.
[ -x "$dest/glibc/ld-linux-x86-64.so.2" ] || [ -n "$(ls "$dest"/glibc/ld-linux* 2>/dev/null)" ] || {
  echo "bundle: the loader (ld-linux) was not found" >&2
  exit 1
}
for f in "$dest"/bin/* "$dest"/plugins/*.so "$dest"/lib/*; do
  while IFS= read -r line; do
    case "$line" in
      *" => "*)
        name=${line%% =>*}; name=${name//[[:space:]]/}
        path=${line#*=> }; path=${path%% (*}
        if ! system_lib "$name" && [ "$(dirname "$path")" != "$dest/lib" ] &&
           [ "$(cd "$(dirname "$path")" 2>/dev/null && pwd -P)" != "$(cd "$dest/lib" && pwd -P)" ]; then
          echo "bundle: $f loads $name from $path, outside the bundle" >&2
          exit 1
        fi ;;
    esac
  done < <(env -i LD_LIBRARY_PATH="$dest/lib" /usr/bin/ldd "$f")
done

# The newest glibc symbol version any file needs: the target's must be as new.
glibc_needed=$(for f in "$dest"/bin/* "$dest"/plugins/*.so "$dest"/lib/*; do
                 objdump -T "$f" 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' || true
               done | sed 's/GLIBC_//' | sort -V | tail -n 1)

{
  echo "kvtier GPU check bundle"
  echo "commit: $(git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$src" diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $(ldd --version | head -n 1)"
  echo "cuda: $("${NVCC:-/usr/local/cuda/bin/nvcc}" --version | tail -n 2 | head -n 1)"
  echo "glibc-needed: $glibc_needed"
  echo "files:"
  (cd "$dest" && find . -type f | sort | sed 's/^/  /')
} > "$dest/MANIFEST"

size=$(du -sb "$dest" | cut -f1)
echo "bundle: $dest: $((size / 1024)) KiB in $(find "$dest" -type f | wc -l) files, glibc ≥ $glibc_needed"
if [ "$size" -gt "$limit" ]; then
  echo "bundle: $size bytes is over the 64 MiB limit" >&2
  exit 1
fi
