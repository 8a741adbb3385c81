/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <kvtier.h>

G_BEGIN_DECLS

/**
 * KvFsLayoutKind:
 * @KV_FS_LAYOUT_KIND_KVTIER: kvtier's own format: a directory per namespace,
 *   sharded subdirectories, a checksummed 4096-byte header before each
 *   payload.
 * @KV_FS_LAYOUT_KIND_VLLM: vLLM's fs-tier naming and headerless files, so that
 *   kvtier and vLLM share one cache directory.
 * @KV_FS_LAYOUT_KIND_SLAB: chunks in fixed-size slots of a few large
 *   preallocated slab files (or a block device): one write and one read
 *   per chunk, no file created or renamed (see doc/on-disk-format.md).
 *
 * How chunk files are named and what they contain.
 */
typedef enum {
  KV_FS_LAYOUT_KIND_KVTIER,
  KV_FS_LAYOUT_KIND_VLLM,
  KV_FS_LAYOUT_KIND_SLAB,
} KvFsLayoutKind;

/**
 * KvFsDurability:
 * @KV_FS_DURABILITY_NONE: write, close, rename; no flush (the reference).
 *   A process crash never exposes a partial chunk; a power loss may lose
 *   recent chunks.
 * @KV_FS_DURABILITY_DATA: fdatasync() the file before it is renamed.
 * @KV_FS_DURABILITY_FULL: fdatasync() the file, rename it, fsync() its
 *   directory.
 *
 * How much a store waits for the disk before it is reported.
 */
typedef enum {
  KV_FS_DURABILITY_NONE,
  KV_FS_DURABILITY_DATA,
  KV_FS_DURABILITY_FULL,
} KvFsDurability;

/**
 * KvFsIoEngine:
 * @KV_FS_IO_ENGINE_AUTO: io_uring when the kernel and build allow it,
 *   otherwise the thread pool.
 * @KV_FS_IO_ENGINE_URING: io_uring (liburing) with the primary buffer
 *   registered as fixed buffers.
 * @KV_FS_IO_ENGINE_GIO: GIO asynchronous streams on the tier's own I/O
 *   thread and main context.
 * @KV_FS_IO_ENGINE_THREADS: a read pool and a write pool that steal from
 *   each other.
 *
 * Which engine moves the bytes.
 */
typedef enum {
  KV_FS_IO_ENGINE_AUTO,
  KV_FS_IO_ENGINE_URING,
  KV_FS_IO_ENGINE_GIO,
  KV_FS_IO_ENGINE_THREADS,
} KvFsIoEngine;

/**
 * KvFsODirect:
 * @KV_FS_O_DIRECT_AUTO: probe every root; use O_DIRECT where it works.
 * @KV_FS_O_DIRECT_ON: require O_DIRECT; construction fails on a root that
 *   does not support it.
 * @KV_FS_O_DIRECT_OFF: buffered I/O through the page cache.
 *
 * Whether chunk files bypass the page cache.
 */
typedef enum {
  KV_FS_O_DIRECT_AUTO,
  KV_FS_O_DIRECT_ON,
  KV_FS_O_DIRECT_OFF,
} KvFsODirect;

/**
 * KvFsEviction:
 * @KV_FS_EVICTION_LRU: evict the least recently used chunk first.
 * @KV_FS_EVICTION_CHAIN: evict chunks whose predecessor is gone first
 *   (they are unreachable), then the least recently used tails of prefix
 *   chains, so chains shrink from their ends.
 *
 * Which chunks go when the tier is over its size limit.
 */
typedef enum {
  KV_FS_EVICTION_LRU,
  KV_FS_EVICTION_CHAIN,
} KvFsEviction;

/**
 * KvFsCounter:
 * @KV_FS_COUNTER_STORED_CHUNKS: chunks written and published.
 * @KV_FS_COUNTER_SKIPPED_CHUNKS: chunks a store skipped because the tier
 *   already held them.
 * @KV_FS_COUNTER_STORE_FAILURES: chunks a store failed to write.
 * @KV_FS_COUNTER_LOADED_CHUNKS: chunks read into the primary tier.
 * @KV_FS_COUNTER_LOAD_FAILURES: chunks a load failed to read.
 * @KV_FS_COUNTER_CORRUPT_CHUNKS: chunk files that failed their check (short,
 *   bad header, wrong key, bad checksum) and were deleted.
 * @KV_FS_COUNTER_CHECKSUM_FAILURES: of those, payload or header checksum
 *   mismatches (in the vLLM layout, the file's `user.vllm.kv_crc32c`).
 * @KV_FS_COUNTER_MISSING_CHUNKS: chunks whose file had vanished.
 * @KV_FS_COUNTER_IO_ERRORS: transient I/O errors (EIO, EACCES, ELOOP...);
 *   the files were kept.
 * @KV_FS_COUNTER_NO_SPACE: stores that failed with ENOSPC.
 * @KV_FS_COUNTER_TIMEOUTS: jobs reported failed at their deadline.
 * @KV_FS_COUNTER_BREAKER_TRIPS: times the circuit breaker opened.
 * @KV_FS_COUNTER_EVICTED_CHUNKS: chunks deleted to stay within max-size or
 *   to make room after ENOSPC.
 * @KV_FS_COUNTER_REUSED_FILES: of those, chunks whose file a store took
 *   over and overwrote instead of deleting it and creating a new one.
 * @KV_FS_COUNTER_SPARE_FILES_CREATED: spare files written by
 *   [property@KvFsTier:preallocate].
 * @KV_FS_COUNTER_SPARE_FILES_USED: spare files a store took over instead of
 *   creating a file.
 * @KV_FS_COUNTER_TEMP_FILES_REMOVED: stale temporary files removed by the
 *   warm-restart scan.
 * @KV_FS_COUNTER_SCANNED_CHUNKS: chunks found by the warm-restart scan.
 * @KV_FS_COUNTER_BYTES_WRITTEN: payload bytes stored.
 * @KV_FS_COUNTER_BYTES_READ: payload bytes loaded.
 * @KV_FS_COUNTER_FOREIGN_FILES: files under a chunk's or temporary file's
 *   name (or shard directories) that are not the tier's user's, or not
 *   regular files, or writable by other users: never served (a lookup or
 *   load of one is a miss), never deleted.
 *
 * The fs tier's counters (see kv_fs_tier_get_counter()).
 */
typedef enum {
  KV_FS_COUNTER_STORED_CHUNKS,
  KV_FS_COUNTER_SKIPPED_CHUNKS,
  KV_FS_COUNTER_STORE_FAILURES,
  KV_FS_COUNTER_LOADED_CHUNKS,
  KV_FS_COUNTER_LOAD_FAILURES,
  KV_FS_COUNTER_CORRUPT_CHUNKS,
  KV_FS_COUNTER_CHECKSUM_FAILURES,
  KV_FS_COUNTER_MISSING_CHUNKS,
  KV_FS_COUNTER_IO_ERRORS,
  KV_FS_COUNTER_NO_SPACE,
  KV_FS_COUNTER_TIMEOUTS,
  KV_FS_COUNTER_BREAKER_TRIPS,
  KV_FS_COUNTER_EVICTED_CHUNKS,
  KV_FS_COUNTER_REUSED_FILES,
  KV_FS_COUNTER_SPARE_FILES_CREATED,
  KV_FS_COUNTER_SPARE_FILES_USED,
  KV_FS_COUNTER_TEMP_FILES_REMOVED,
  KV_FS_COUNTER_SCANNED_CHUNKS,
  KV_FS_COUNTER_BYTES_WRITTEN,
  KV_FS_COUNTER_BYTES_READ,
  KV_FS_COUNTER_FOREIGN_FILES,
} KvFsCounter;

#define KV_FS_N_COUNTERS (KV_FS_COUNTER_FOREIGN_FILES + 1)

G_END_DECLS
