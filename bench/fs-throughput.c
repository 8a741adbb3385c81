/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <glib/gstdio.h>
#include <kvtier.h>

#include "bench-stack.h"
#include "bench-util.h"
#include "kv-fs-config.h"
#include "kv-chunk-format.h"
#include "kv-fs-tier.h"
#include "fs-memory-ceiling.h"
#if KV_FS_HAVE_URING
# include <liburing.h>
#endif

/*
 * fs-throughput: how close the fs tier gets to the device.
 *
 * For each chunk size it first sweeps the ceiling in the same run, on the
 * same directory: raw O_DIRECT io_uring writes, then reads, of the same
 * I/O size and the same total bytes, into files written once beforehand
 * (so the timed writes allocate nothing: the device's own speed, no
 * filesystem work, no page cache), with registered buffers, in several
 * layouts, ring counts and queue depths (see ceiling_configs;
 * --ceiling-details prints each). The sweep keeps the best configuration
 * for writes and the best for reads, with their files, rings and buffer,
 * until the chunk size is done.
 *
 * Then, for each engine, with a KvTieringManager whose fs tier has
 * max-size = N chunk files (N = total / chunk size):
 *
 *  - store-cold: stores chunks 0..N-1 into the empty tier (the cascade
 *    path): every store creates a file and allocates its blocks;
 *  - store: stores chunks N..2N-1 into the now full tier, so every store
 *    evicts one old chunk, as in a bounded cache's steady state (the tier
 *    may reuse the victim's file instead of creating one; a `#` line gives
 *    the counters);
 *  - load: loads chunks N..2N-1 back into a fresh primary (the promotion
 *    path), through a new stack on the same directory.
 *
 * The disk of the test VM drifts by ±20% within seconds, so each timed
 * tier pass is paired with one more pass of the sweep's best configuration
 * (write before a store, read before the load) run right before it, and
 * the tier is reported against that pass:
 *
 *   store 2MiB uring: <x> GB/s = <y>% of ceiling <z> GB/s, cpu <c> s/GB
 *
 * With --rounds R each engine repeats the three passes, each paired, R
 * times (each round in a fresh directory, since store-cold needs an empty
 * tier) and every line reports the median round by ratio; the rounds are
 * printed as `#` lines. CPU time is the whole process's (user + system,
 * all threads, io_uring workers included) per GB moved.
 *
 * On a memory-backed root (tmpfs, ramfs) the ceiling is a plain memcpy
 * of the same chunks by 1 to n-CPUs threads instead, swept and paired the
 * same way (see fs-memory-ceiling.c).
 *
 * The baseline lines (one file per chunk without kvtier or a checksum:
 * created by 16 threads; taken over by 16 threads; taken over by linked
 * io_uring chains) are compared with the sweep's write ceiling.
 *
 * With --layouts kvtier,slab each engine runs again with layout=slab (max-size
 * = N slots in preallocated slab files, made before the timed passes):
 * store-cold fills the empty slabs, store overwrites the slots of the
 * chunks it evicts, load reads them back through a new stack (after its
 * restart scan); the lines name the engine "<engine> slab":
 *
 *   store 256KiB uring slab: <x> GB/s = <y>% of ceiling <z> GB/s, cpu <c> s/GB
 *
 * followed by a `#` line with the store's cpu (less the checksum floor
 * with --no-carried-checksum, as if the checksum had been carried).
 *
 *   fs-throughput [--dir DIR] [--total SIZE] [--engines uring,gio,threads]
 *                 [--chunk-sizes 256KiB,2MiB] [--primary SIZE]
 *                 [--layouts kvtier,slab] [--rounds R] [--ceiling-details]
 *                 [--no-carried-checksum]
 *
 * Stored slots carry their checksum, as KvHostDevice's copy into the
 * primary leaves it (kv_host_buffer_set_slot_checksum()): the tier writes
 * it into the header without reading the payload. --no-carried-checksum
 * measures the tier computing it instead.
 */

static char *opt_dir;
static guint64 opt_total = 1ULL << 30;
static char *opt_engines;
static char *opt_chunks;
static guint64 opt_primary = 256ULL << 20;
static gboolean opt_baseline = TRUE;
static guint64 opt_inflight;   /* --inflight, or the tier's default; 0: no limit */
static gint opt_queue_depth = -1;   /* --queue-depth, or the tier's default */
static guint opt_rounds = 1;
static gboolean opt_ceiling_details;
static char *opt_layouts;
/* the layout of the stacks stack_init() makes now */
static KvFsLayoutKind stack_layout = KV_FS_LAYOUT_KIND_KVTIER;
/* the checksum floor of the chunk size being measured, s/GB */
static double hash_floor_cpu;
static gboolean opt_carry_checksum = TRUE;

/* ---- ceiling ------------------------------------------------------------ */

#if KV_FS_HAVE_URING
/*
 * The ceiling is the best of several ways of driving the device, all with
 * the same kind of memory as the tier's: transparent huge pages (the
 * primary buffer is madvised MADV_HUGEPAGE, see kv-host-buffer.c),
 * registered with the ring as the tier's uring engine does.
 *
 * The memory matters most. On the test VM (virtio-blk, max_segments 254,
 * 2 vCPUs) a 2 MiB buffer in 4 KiB pages is 512 scatter-gather segments,
 * so the block layer splits every 2 MiB I/O into three device requests
 * (/proc/diskstats: 683 KiB per read request; with huge pages, 2 MiB).
 * The old ceiling, plain posix_memalign memory, read at 0.95-1.4 GB/s
 * while the tier loaded the same chunks at 1.5 GB/s; with huge pages the
 * same passes read at 1.6-2.1 GB/s, registered or not (huge pages also
 * cut the CPU from 0.04-0.06 to 0.005 s/GB; registering, which skips the
 * per-I/O page pinning, to 0.003).
 *
 * Which layout and depth is fastest still depends on the machine, hence:
 *
 *  - few big files: the device with the least filesystem in the way
 *    (16 files, because one file read slower than several on the VM);
 *  - one file per I/O: the tier's own layout (one file per chunk), in case
 *    the filesystem or the host handle small separate extents better;
 *  - QD 32 and 128: the sweet spot differs between devices;
 *  - two rings on two threads: the tier submits from its own thread while
 *    io-wq workers run on every CPU, so one submitting thread might be the
 *    limit rather than the device.
 *
 * Every configuration writes, then immediately reads back, the same bytes
 * in a shuffled order (chunks are separate files, so the tier's requests
 * never merge either), which is also the sequence the tier sees: a store
 * pass followed by a load pass. The files are written once, untimed,
 * beforehand, so the timed writes are overwrites that allocate nothing:
 * raw device writes, no filesystem work, no page cache.
 */
typedef struct
{
  const char *name;
  gboolean    file_per_io;
  guint       n_rings;
  guint       qd;            /* per ring */
} CeilingConfig;

static const CeilingConfig ceiling_configs[] = {
  { "16 files, 1 ring, QD 32",              FALSE, 1, 32 },
  { "16 files, 1 ring, QD 128",             FALSE, 1, 128 },
  { "16 files, 2 rings, QD 64 each",        FALSE, 2, 64 },
  { "file per I/O, 1 ring, QD 128",         TRUE,  1, 128 },
  { "file per I/O, 2 rings, QD 64 each",    TRUE,  2, 64 },
};
/* buffer slots, shared by all the rings of a configuration */
#define MAX_QD 128
#define MAX_RINGS 2
#define CEILING_FILES 16

/* I/O number i lives in fds[i % n_fds] at offset (i / n_fds) * io_size. */
typedef struct
{
  char   *dir;
  int    *fds;
  guint   n_fds;
} CeilingFiles;

typedef struct
{
  struct io_uring ring;
  gboolean        fixed;     /* the buffer region is registered */
} CeilingRing;

/* One ring's share of a pass: I/Os order[start..end) with slots
 * [first_slot, first_slot + qd) of the buffer region. */
typedef struct
{
  CeilingRing        *ring;
  const CeilingFiles *files;
  guint8             *buf;
  gsize               io_size;
  const guint64      *order;
  guint64             start;
  guint64             end;
  guint               first_slot;
  guint               qd;
  gboolean            write;
} CeilingJob;

static gpointer
ceiling_worker (gpointer data)
{
  CeilingJob *job = data;
  struct io_uring *ring = &job->ring->ring;
  guint free_slots[MAX_QD];
  guint n_free = 0;
  guint64 next = job->start;
  guint64 completed = job->start;

  for (guint s = 0; s < job->qd; s++)
    free_slots[n_free++] = job->first_slot + s;
  while (completed < job->end)
    {
      struct io_uring_cqe *cqe;

      while (n_free > 0 && next < job->end)
        {
          struct io_uring_sqe *sqe = io_uring_get_sqe (ring);
          guint slot = free_slots[--n_free];
          guint8 *b = job->buf + (gsize) slot * job->io_size;
          guint64 index = job->order[next++];
          int fd = job->files->fds[index % job->files->n_fds];
          guint64 offset = (index / job->files->n_fds) * job->io_size;

          if (job->ring->fixed && job->write)
            io_uring_prep_write_fixed (sqe, fd, b, job->io_size, offset, 0);
          else if (job->ring->fixed)
            io_uring_prep_read_fixed (sqe, fd, b, job->io_size, offset, 0);
          else if (job->write)
            io_uring_prep_write (sqe, fd, b, job->io_size, offset);
          else
            io_uring_prep_read (sqe, fd, b, job->io_size, offset);
          io_uring_sqe_set_data64 (sqe, slot);
        }
      io_uring_submit_and_wait (ring, 1);
      while (io_uring_peek_cqe (ring, &cqe) == 0)
        {
          if (cqe->res != (int) job->io_size)
            g_error ("ceiling %s failed: %s", job->write ? "write" : "read",
                     cqe->res < 0 ? g_strerror (-cqe->res) : "short");
          free_slots[n_free++] = (guint) cqe->user_data;
          io_uring_cqe_seen (ring, cqe);
          completed++;
        }
    }
  return NULL;
}

/* One timed pass of @n_ios I/Os in @order, split over @n_rings rings (one
 * thread each) at queue depth @qd each; returns seconds. A write pass ends
 * with one fdatasync: the flush goes to the whole device, so it covers
 * every file just written (the timed writes allocate nothing, so there is
 * no metadata left to sync). */
static double
ceiling_pass (CeilingRing        *rings,
              guint               n_rings,
              const CeilingFiles *files,
              guint8             *buf,
              gsize               io_size,
              guint64             n_ios,
              const guint64      *order,
              guint               qd,
              gboolean            write)
{
  CeilingJob jobs[MAX_RINGS];
  GThread *threads[MAX_RINGS];
  double start = bench_now_s ();

  g_assert (n_rings <= MAX_RINGS && n_rings * qd <= MAX_QD);
  for (guint r = 0; r < n_rings; r++)
    {
      jobs[r] = (CeilingJob) {
        &rings[r], files, buf, io_size, order,
        n_ios * r / n_rings, n_ios * (r + 1) / n_rings, r * qd, qd, write
      };
      threads[r] = g_thread_new ("ceiling", ceiling_worker, &jobs[r]);
    }
  for (guint r = 0; r < n_rings; r++)
    g_thread_join (threads[r]);
  if (write)
    fdatasync (files->fds[0]);
  return bench_now_s () - start;
}

/* Closes the files; they stay on disk until the end of the run, like the
 * tiers' (see run_engine). */
static void
ceiling_files_close (CeilingFiles *files)
{
  for (guint f = 0; f < files->n_fds; f++)
    if (files->fds[f] >= 0)
      close (files->fds[f]);
  g_clear_pointer (&files->fds, g_free);
  g_clear_pointer (&files->dir, g_free);
  files->n_fds = 0;
}

/* Creates @n_fds files in a new directory under @root and writes the
 * @n_ios I/Os into them once (untimed), sequentially. */
static gboolean
ceiling_files_init (CeilingFiles  *files,
                    const char    *root,
                    const char    *leaf,
                    guint          n_fds,
                    CeilingRing   *ring,
                    guint8        *buf,
                    gsize          io_size,
                    guint64        n_ios,
                    const guint64 *identity)
{
  files->dir = g_build_filename (root, leaf, NULL);
  files->n_fds = n_fds;
  files->fds = g_new (int, n_fds);
  for (guint f = 0; f < n_fds; f++)
    files->fds[f] = -1;
  if (g_mkdir_with_parents (files->dir, 0700) != 0)
    {
      g_printerr ("ceiling: cannot create %s: %s\n", files->dir, g_strerror (errno));
      return FALSE;
    }
  for (guint f = 0; f < n_fds; f++)
    {
      g_autofree char *path = g_strdup_printf ("%s/%u", files->dir, f);

      files->fds[f] = open (path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
      if (files->fds[f] < 0)
        {
          g_printerr ("ceiling: cannot open %s with O_DIRECT: %s\n", path, g_strerror (errno));
          return FALSE;
        }
    }
  ceiling_pass (ring, 1, files, buf, io_size, n_ios, identity, MAX_QD, TRUE);
  return TRUE;
}
#endif

/*
 * The ceiling of one chunk size. The sweep (ceiling_init) runs every
 * configuration once and keeps the best for writes and the best for
 * reads. Those figures are noisy samples taken minutes before the tier
 * runs on a disk that drifts by ±20% within seconds, and the best of five
 * of them overstates the ceiling the tier faced; so the sweep also keeps
 * what its two winners need (files, rings, buffer, order) and
 * ceiling_pair() runs one more pass of the winner right before each timed
 * tier pass, which sees the same disk weather as the tier.
 */
typedef struct
{
  /* the sweep's best */
  double               write_gbs;
  double               read_gbs;
  double               write_cpu;   /* s/GB */
  double               read_cpu;
  const char          *write_how;   /* the configuration that reached it */
  const char          *read_how;
  /* a memory-backed root: the memcpy ceiling instead of the sweep */
  gboolean             memory;
  MemoryCeiling        mem;
#if KV_FS_HAVE_URING
  /* kept for ceiling_pair() until ceiling_clear() */
  const CeilingConfig *write_config;
  const CeilingConfig *read_config;
  CeilingRing          rings[MAX_RINGS];
  guint                n_rings;
  CeilingFiles         big;
  CeilingFiles         per_io;
  guint8              *buf;
  gsize                buf_size;
  gsize                io_size;
  guint64              n_ios;
  guint64             *order;
#endif
} Ceiling;

static void
ceiling_clear (Ceiling *c)
{
  if (c->memory)
    memory_ceiling_clear (&c->mem);
  c->memory = FALSE;
#if KV_FS_HAVE_URING
  ceiling_files_close (&c->per_io);
  ceiling_files_close (&c->big);
  for (guint r = 0; r < c->n_rings; r++)
    io_uring_queue_exit (&c->rings[r].ring);
  c->n_rings = 0;
  if (c->buf != NULL)
    munmap (c->buf, c->buf_size);
  c->buf = NULL;
  g_clear_pointer (&c->order, g_free);
  c->write_config = c->read_config = NULL;
#endif
}

#if KV_FS_HAVE_URING
/* One timed pass, writes or reads, of @config on @c's files; returns its
 * GB/s and sets @cpu to its CPU seconds per GB. */
static double
ceiling_config_pass (Ceiling             *c,
                     const CeilingConfig *config,
                     gboolean             write,
                     double              *cpu)
{
  double gb = c->n_ios * c->io_size / 1e9;
  double start_cpu = bench_self_cpu_s ();
  double t = ceiling_pass (c->rings, config->n_rings, config->file_per_io ? &c->per_io : &c->big,
                           c->buf, c->io_size, c->n_ios, c->order, config->qd, write);

  *cpu = (bench_self_cpu_s () - start_cpu) / gb;
  return gb / t;
}
#endif

/* Sweeps every configuration on files in @dir; FALSE if there is no
 * ceiling (no io_uring, or the files or rings could not be set up). Call
 * ceiling_clear() in either case. */
static gboolean
ceiling_init (Ceiling    *out,
              const char *dir,
              gsize       io_size,
              guint64     total,
              gboolean    details)
{
#if KV_FS_HAVE_URING
  guint64 n_ios = MAX (total / io_size, 1);
  g_autofree guint64 *identity = NULL;
  g_autofree char *name = bench_size_name (io_size);
  g_autofree char *big_leaf = g_strdup_printf ("ceiling-files-%s", name);
  g_autofree char *per_io_leaf = g_strdup_printf ("ceiling-per-io-%s", name);
  gboolean have_per_io = FALSE;
  struct rlimit nofile;

  out->io_size = io_size;
  out->n_ios = n_ios;
  out->buf_size = (gsize) MAX_QD * io_size;
  /* the same kind of memory as the primary tier's buffer (kv-host-buffer.c) */
  out->buf = mmap (NULL, out->buf_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
  if (out->buf == MAP_FAILED)
    {
      out->buf = NULL;
      return FALSE;
    }
  (void) madvise (out->buf, out->buf_size, MADV_HUGEPAGE);
  memset (out->buf, 0x5a, out->buf_size);
  for (; out->n_rings < MAX_RINGS; out->n_rings++)
    {
      CeilingRing *ring = &out->rings[out->n_rings];
      struct iovec iov = { out->buf, out->buf_size };

      if (io_uring_queue_init (2 * MAX_QD, &ring->ring, 0) != 0)
        return FALSE;
      /* pinning refused (RLIMIT_MEMLOCK): plain buffers, a lower ceiling */
      ring->fixed = io_uring_register_buffers (&ring->ring, &iov, 1) == 0;
      if (!ring->fixed && out->n_rings == 0)
        g_printerr ("ceiling: cannot register buffers, using plain ones\n");
    }

  identity = g_new (guint64, n_ios);
  out->order = g_new (guint64, n_ios);
  for (guint64 i = 0; i < n_ios; i++)
    identity[i] = out->order[i] = i;
  for (guint64 i = n_ios - 1; i > 0; i--)
    {
      guint64 j = g_random_int_range (0, (gint32) MIN (i + 1, G_MAXINT32));
      guint64 t = out->order[i];

      out->order[i] = out->order[j];
      out->order[j] = t;
    }

  if (!ceiling_files_init (&out->big, dir, big_leaf, CEILING_FILES, out->rings, out->buf,
                           io_size, n_ios, identity))
    return FALSE;
  /* one descriptor per I/O must fit under the open-file limit */
  if (getrlimit (RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < n_ios + 256)
    {
      nofile.rlim_cur = MIN (nofile.rlim_max, n_ios + 256);
      setrlimit (RLIMIT_NOFILE, &nofile);
    }
  if (getrlimit (RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur >= n_ios + 256)
    have_per_io = ceiling_files_init (&out->per_io, dir, per_io_leaf, (guint) n_ios, out->rings,
                                      out->buf, io_size, n_ios, identity);
  if (!have_per_io)
    g_printerr ("ceiling: skipping the file-per-I/O configurations\n");

  out->write_gbs = out->read_gbs = 0;
  for (guint k = 0; k < G_N_ELEMENTS (ceiling_configs); k++)
    {
      const CeilingConfig *config = &ceiling_configs[k];
      double write_gbs, read_gbs, cpu;

      if (config->file_per_io && !have_per_io)
        continue;
      write_gbs = ceiling_config_pass (out, config, TRUE, &cpu);
      if (write_gbs > out->write_gbs)
        {
          out->write_gbs = write_gbs;
          out->write_cpu = cpu;
          out->write_how = config->name;
          out->write_config = config;
        }
      read_gbs = ceiling_config_pass (out, config, FALSE, &cpu);
      if (read_gbs > out->read_gbs)
        {
          out->read_gbs = read_gbs;
          out->read_cpu = cpu;
          out->read_how = config->name;
          out->read_config = config;
        }
      if (details)
        g_print ("#   ceiling %s, %s: write %.2f GB/s, read %.2f GB/s\n",
                 name, config->name, write_gbs, read_gbs);
    }
  return TRUE;
#else
  return FALSE;
#endif
}

/* One more pass, writes or reads, of the configuration that won the sweep
 * for them; returns its GB/s, 0 without a ceiling. */
static double
ceiling_pair (Ceiling  *c,
              gboolean  write)
{
#if KV_FS_HAVE_URING
  const CeilingConfig *config = write ? c->write_config : c->read_config;
#endif
  double cpu;

  if (c->memory)
    return memory_ceiling_pass (&c->mem, write, write ? c->mem.write_threads : c->mem.read_threads,
                                &cpu);
#if KV_FS_HAVE_URING

  if (config == NULL)
    return 0;
  return ceiling_config_pass (c, config, write, &cpu);
#else
  return 0;
#endif
}

/* ---- file-per-chunk baseline ------------------------------------------- */

/* What the filesystem allows one-file-per-chunk stores, without kvtier:
 * 16 threads create a file (O_EXCL | O_DIRECT), write one chunk, close
 * and rename it, for the same number of chunks; then, as a full tier
 * does, take each of those files over instead (rename it to a temporary
 * name, overwrite it, rename it to a new name). */
typedef struct
{
  const char *dir;
  gsize       size;
  guint64     n_files;
  gint        next;
  guint8     *buf;
  gboolean    reuse;
} Baseline;

/* 256 directories under @root, %02x as the kvtier layout names them, so
 * that the no-kvtier passes spread their files the same way. */
static void
make_shard_dirs (const char *root)
{
  for (guint i = 0; i < 256; i++)
    {
      g_autofree char *sub = g_strdup_printf ("%s/%02x", root, i);

      g_mkdir_with_parents (sub, 0700);
    }
}

static gpointer
baseline_thread (gpointer data)
{
  Baseline *b = data;
  gint i;

  while ((i = g_atomic_int_add (&b->next, 1)) < (gint) b->n_files)
    {
      g_autofree char *sub = g_strdup_printf ("%s/%02x", b->dir, i & 0xff);
      g_autofree char *tmp = g_strdup_printf ("%s/%d.tmp", sub, i);
      g_autofree char *old = g_strdup_printf ("%s/%d", sub, i);
      g_autofree char *final = g_strdup_printf (b->reuse ? "%s/%d.r" : "%s/%d", sub, i);
      int fd;

      if (b->reuse && rename (old, tmp) != 0)
        g_error ("baseline: rename: %s", g_strerror (errno));
      fd = open (tmp, O_WRONLY | O_DIRECT | O_CLOEXEC | (b->reuse ? 0 : O_CREAT | O_EXCL), 0600);

      if (fd < 0 || write (fd, b->buf, b->size) != (ssize_t) b->size)
        g_error ("baseline: %s: %s", tmp, g_strerror (errno));
      close (fd);
      if (rename (tmp, final) != 0)
        g_error ("baseline: rename: %s", g_strerror (errno));
    }
  return NULL;
}

static void
measure_baseline (const char *root,
                  gsize       size,
                  guint64     total,
                  gboolean    reuse,
                  double     *out_gbs,
                  double     *out_cpu)
{
  Baseline b = { root, size, MAX (total / size, 1), 0, NULL, reuse };
  GThread *threads[16];
  double t, c;

  make_shard_dirs (root);
  if (posix_memalign ((void **) &b.buf, 4096, size) != 0)
    return;
  memset (b.buf, 0x33, size);
  c = bench_self_cpu_s ();
  t = bench_now_s ();
  for (guint i = 0; i < G_N_ELEMENTS (threads); i++)
    threads[i] = g_thread_new ("baseline", baseline_thread, &b);
  for (guint i = 0; i < G_N_ELEMENTS (threads); i++)
    g_thread_join (threads[i]);
  t = bench_now_s () - t;
  c = bench_self_cpu_s () - c;
  *out_gbs = b.n_files * size / t / 1e9;
  *out_cpu = c / (b.n_files * size / 1e9);
  free (b.buf);
}

#if KV_FS_HAVE_URING
/* The same takeover with io_uring instead of threads, the way a ring
 * would drive it at its fastest: each chunk is one chain of linked
 * requests (rename to the temporary name, open into a fixed file slot,
 * write from a registered buffer, close the slot, rename to the final
 * name) submitted at once, so no step waits for a trip through user
 * space; only the last step posts a completion. @chains chains are kept
 * in flight. The files are those the threads' takeover left (`<i>.r`),
 * renamed to `<i>.u`. Returns FALSE, with a message in @why, where the
 * kernel lacks a request it needs. */
static gboolean
measure_baseline_uring_chain (const char *root,
                              gsize       size,
                              guint64     total,
                              guint       chains,
                              double     *out_gbs,
                              double     *out_cpu,
                              char      **why)
{
  guint64 n_files = MAX (total / size, 1), next = 0, done = 0;
  struct io_uring ring;
  struct iovec iov;
  g_autofree guint *free_slots = g_new (guint, chains);
  g_autofree guint *slot_of = g_new (guint, n_files);
  g_autoptr(GPtrArray) paths = g_ptr_array_new_with_free_func (g_free);
  guint n_free = 0, in_flight = 0;
  double t, c;
  int r;

  if ((r = io_uring_queue_init (MAX (chains * 8, 64), &ring, 0)) < 0)
    {
      *why = g_strdup_printf ("io_uring_queue_init: %s", g_strerror (-r));
      return FALSE;
    }
  if (posix_memalign (&iov.iov_base, 4096, size) != 0)
    g_error ("baseline: out of memory");
  iov.iov_len = size;
  memset (iov.iov_base, 0x44, size);
  if ((r = io_uring_register_buffers (&ring, &iov, 1)) < 0
      || (r = io_uring_register_files_sparse (&ring, chains)) < 0)
    {
      *why = g_strdup_printf ("io_uring registration: %s", g_strerror (-r));
      io_uring_queue_exit (&ring);
      free (iov.iov_base);
      return FALSE;
    }
  for (guint s = 0; s < chains; s++)
    free_slots[n_free++] = s;
  /* the paths outlive their requests: built before the clock starts */
  for (guint64 i = 0; i < n_files; i++)
    {
      g_autofree char *sub = g_strdup_printf ("%s/%02x", root, (guint) (i & 0xff));

      g_ptr_array_add (paths, g_strdup_printf ("%s/%" G_GUINT64_FORMAT ".r", sub, i));
      g_ptr_array_add (paths, g_strdup_printf ("%s/%" G_GUINT64_FORMAT ".tmp", sub, i));
      g_ptr_array_add (paths, g_strdup_printf ("%s/%" G_GUINT64_FORMAT ".u", sub, i));
    }

  c = bench_self_cpu_s ();
  t = bench_now_s ();
  while (done < n_files)
    {
      struct io_uring_cqe *cqe;
      unsigned head, seen = 0;

      while (in_flight < chains && next < n_files)
        {
          const char *old = paths->pdata[next * 3], *tmp = paths->pdata[next * 3 + 1];
          const char *final = paths->pdata[next * 3 + 2];
          guint slot = free_slots[--n_free];
          struct io_uring_sqe *sqe;
          const guint8 link = IOSQE_IO_LINK | IOSQE_CQE_SKIP_SUCCESS;

          sqe = io_uring_get_sqe (&ring);
          io_uring_prep_renameat (sqe, AT_FDCWD, old, AT_FDCWD, tmp, 0);
          sqe->flags |= link;
          sqe = io_uring_get_sqe (&ring);
          io_uring_prep_openat_direct (sqe, AT_FDCWD, tmp, O_WRONLY | O_DIRECT, 0, slot);
          sqe->flags |= link;
          sqe = io_uring_get_sqe (&ring);
          io_uring_prep_write_fixed (sqe, slot, iov.iov_base, size, 0, 0);
          sqe->flags |= link | IOSQE_FIXED_FILE;
          sqe = io_uring_get_sqe (&ring);
          io_uring_prep_close_direct (sqe, slot);
          sqe->flags |= link;
          sqe = io_uring_get_sqe (&ring);
          io_uring_prep_renameat (sqe, AT_FDCWD, tmp, AT_FDCWD, final, 0);
          io_uring_sqe_set_data64 (sqe, next);
          slot_of[next++] = slot;
          in_flight++;
        }
      if ((r = io_uring_submit_and_wait (&ring, 1)) < 0 && r != -EINTR)
        g_error ("baseline: io_uring_submit_and_wait: %s", g_strerror (-r));
      io_uring_for_each_cqe (&ring, head, cqe)
        {
          guint64 i = io_uring_cqe_get_data64 (cqe);

          seen++;
          /* a failed step posts its own completion, and the rest of its
           * chain posts -ECANCELED under the last step's data */
          if (cqe->res < 0)
            {
              *why = g_strdup_printf ("a chain's request failed: %s", g_strerror (-cqe->res));
              io_uring_queue_exit (&ring);
              free (iov.iov_base);
              return FALSE;
            }
          free_slots[n_free++] = slot_of[i];
          in_flight--;
          done++;
        }
      io_uring_cq_advance (&ring, seen);
    }
  t = bench_now_s () - t;
  c = bench_self_cpu_s () - c;
  *out_gbs = n_files * size / t / 1e9;
  *out_cpu = c / (n_files * size / 1e9);
  io_uring_queue_exit (&ring);
  free (iov.iov_base);
  return TRUE;
}
#endif

/* ---- the CPU floor of a store ------------------------------------------- */

/* What a checksummed, crash-safe store of one file per chunk costs the
 * CPU before it writes a byte, per GB of chunks of @size: the XXH3-64 of
 * the payload, read from memory the size of the primary tier (as a store
 * reads a slot, out of the caches), in @hash_cpu; the renames that take
 * a file over and publish it, with the open and close between them, on
 * existing empty files (no I/O), in @file_cpu. */
static void
measure_cpu_floor (const char *root,
                   gsize       size,
                   guint64     total,
                   double     *hash_cpu,
                   double     *file_cpu)
{
  guint n_slots = MAX (opt_primary / size, 1);
  gsize span = (gsize) n_slots * size;
  guint64 n = MAX (total / size, 1);
  double gb = n * size / 1e9;
  /* the memory the tier's slots live in (huge pages where it gets them) */
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (n_slots, size, NULL);
  guint8 *memory;
  volatile guint64 sink = 0;
  double c;

  if (buffer == NULL)
    g_error ("floor: cannot allocate %" G_GSIZE_FORMAT " bytes", span);
  memory = kv_host_buffer_get_data (buffer);
  memset (memory, 0x5a, span);
  c = bench_self_cpu_s ();
  for (guint64 i = 0; i < n; i++)
    sink += kv_chunk_checksum (memory + (i * size) % span, size);
  *hash_cpu = (bench_self_cpu_s () - c) / gb;
  g_clear_object (&buffer);

  make_shard_dirs (root);
  for (guint64 i = 0; i < n; i++)
    {
      g_autofree char *path = g_strdup_printf ("%s/%02x/%" G_GUINT64_FORMAT, root,
                                               (guint) (i & 0xff), i);

      if (!g_file_set_contents (path, "", 0, NULL))
        g_error ("floor: cannot create %s", path);
    }
  c = bench_self_cpu_s ();
  for (guint64 i = 0; i < n; i++)
    {
      char victim[PATH_MAX], tmp[PATH_MAX], final[PATH_MAX];
      int fd;

      g_snprintf (victim, sizeof victim, "%s/%02x/%" G_GUINT64_FORMAT, root, (guint) (i & 0xff), i);
      g_snprintf (tmp, sizeof tmp, "%s.tmp", victim);
      g_snprintf (final, sizeof final, "%s.new", victim);
      if (rename (victim, tmp) != 0 || (fd = open (tmp, O_WRONLY | O_CLOEXEC)) < 0)
        g_error ("floor: %s: %s", victim, g_strerror (errno));
      close (fd);
      if (rename (tmp, final) != 0)
        g_error ("floor: %s: %s", final, g_strerror (errno));
    }
  *file_cpu = (bench_self_cpu_s () - c) / gb;
}

/* ---- through the manager ------------------------------------------------ */

typedef struct
{
  BenchStack  bench;  /* the manager, the primary, the tier, the store pass */
  KvFsTier   *tier;   /* bench.tier */
} Stack;

static gboolean
stack_init (Stack        *s,
            const char   *root,
            const char   *engine,
            gsize         chunk,
            guint64       max_size,
            gboolean      preallocate,
            GError      **error)
{
  guint n_slots = MAX (opt_primary / chunk, 16);
  GEnumClass *klass = g_type_class_ref (KV_TYPE_FS_IO_ENGINE);
  GEnumValue *value = g_enum_get_value_by_nick (klass, engine);

  g_type_class_unref (klass);
  if (value == NULL)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "unknown engine ‘%s’", engine);
      return FALSE;
    }
  s->bench.key_tag = 0xb7;
  s->bench.wakeup_ms = 100;
  if (!bench_stack_init_primary (&s->bench, n_slots, chunk, 0x3c, error))
    return FALSE;
  if (opt_carry_checksum)
    bench_stack_carry_checksums (&s->bench);
  if (!bench_stack_add_tier (&s->bench, g_initable_new (KV_TYPE_FS_TIER, NULL, error,
                                                        "tier-type", "fs",
                                                        "primary", s->bench.buffer,
                                                        "root", root,
                                                        "io-engine", value->value,
                                                        "deadline-ms", 60000,
                                                        "inflight-bytes", opt_inflight,
                                                        "queue-depth", opt_queue_depth,
                                                        "max-size", max_size,
                                                        "preallocate", preallocate,
                                                        "layout", stack_layout,
                                                        NULL), error))
    return FALSE;
  s->tier = KV_FS_TIER (s->bench.tier);
  /* the warm-restart scan is not what is measured */
  kv_fs_tier_wait_index_ready (s->tier);
  return TRUE;
}

static void
stack_clear (Stack *s)
{
  bench_stack_clear (&s->bench);
  s->tier = NULL;
}

/* One request of the load pass: the chunks it waits for, as an engine
 * waits for a request whose lookups answered HIT_PENDING. It keeps their
 * keys, as an engine keeps its blocks' hashes. */
typedef struct
{
  KvRequest *request;
  guint64   *chunks;     /* chunk numbers still pending, in prompt order */
  KvKey    **keys;       /* their keys */
  guint      n_pending;
} LoadRequest;

static void
load_request_free (LoadRequest *lr)
{
  g_object_unref (lr->request);
  for (guint i = 0; i < lr->n_pending; i++)
    kv_key_unref (lr->keys[i]);
  g_free (lr->chunks);
  g_free (lr->keys);
  g_free (lr);
}

/* Looks @chunk up for @lr: TRUE when the request still waits for it
 * (HIT_PENDING, or RETRY while the tier does not know yet). A MISS puts
 * it back on @retry: the manager gave up on its promotion (no room was
 * left in the primary tier when the load started, and the request would
 * recompute it), so it is asked for again in a new request. */
static gboolean
load_lookup (Stack       *s,
             LoadRequest *lr,
             guint64      chunk,
             KvKey       *key,
             GQueue      *retry,
             guint64     *n_retried)
{
  switch (kv_tiering_manager_lookup (s->bench.manager, key, lr->request))
    {
    case KV_LOOKUP_RESULT_HIT:
      return FALSE;
    case KV_LOOKUP_RESULT_HIT_PENDING:
    case KV_LOOKUP_RESULT_RETRY:
      return TRUE;
    case KV_LOOKUP_RESULT_MISS:
    default:
      g_queue_push_tail (retry, GSIZE_TO_POINTER ((gsize) chunk));
      (*n_retried)++;
      return FALSE;
    }
}

/* Loads chunks first..first+n_chunks-1 into the primary (the tier's
 * promotion path) the way an engine does: a request stays active while
 * its lookups answer HIT_PENDING and looks its chunks up again each step
 * until they are HIT; a chunk whose promotion the manager gave up on
 * (MISS) is asked for again in a new request. A HIT_PENDING answer does
 * not promise the chunk will be loaded — a lazy tier reserves primary
 * slots when its load starts, and a load that finds no room is dropped
 * (kv_secondary_tier_reserve_load_slots()) — so the pass never waits for
 * a counter to reach a number, only for every chunk to be HIT once. At
 * most half the primary's slots are asked for at a time, as an engine's
 * batch is bounded by its KV cache. Returns seconds; sets *n_retried. */
static double
run_load (Stack   *s,
          guint64  first,
          guint64  n_chunks,
          guint    batch,
          guint64 *n_retried)
{
  guint window = MAX (kv_host_buffer_get_n_slots (s->bench.buffer) / 2, 1);
  guint64 next = 0;
  guint n_req = 0, outstanding = 0, n_to_retry;
  g_autoptr(GPtrArray) active = g_ptr_array_new_with_free_func ((GDestroyNotify) load_request_free);
  GQueue retry = G_QUEUE_INIT;
  double start = bench_now_s ();

  *n_retried = 0;
  while (next < n_chunks || !g_queue_is_empty (&retry) || active->len > 0)
    {
      gboolean progress = FALSE;

      /* The active requests look their pending chunks up again, in
       * prompt order, up to the first one still on its way: the request
       * cannot run before that one is in, and an engine asks for what
       * would change its answer (a chunk after it that came in first
       * answers HIT when the request gets to it). */
      for (guint r = 0; r < active->len; r++)
        {
          LoadRequest *lr = g_ptr_array_index (active, r);
          guint kept = 0;
          gboolean waiting = FALSE;

          for (guint i = 0; i < lr->n_pending; i++)
            {
              if (waiting ||
                  load_lookup (s, lr, lr->chunks[i], lr->keys[i], &retry, n_retried))
                {
                  waiting = TRUE;
                  lr->chunks[kept] = lr->chunks[i];
                  lr->keys[kept++] = lr->keys[i];
                }
              else
                kv_key_unref (lr->keys[i]);
            }
          progress |= kept < lr->n_pending;
          outstanding -= lr->n_pending - kept;
          lr->n_pending = kept;
          if (kept == 0)
            {
              kv_tiering_manager_on_request_finished (s->bench.manager, lr->request);
              g_ptr_array_remove_index_fast (active, r--);
            }
        }

      /* new requests while the window has room: retried chunks first,
       * each once per turn (a chunk that answers MISS again goes back on
       * the queue for the next turn, after a step, not round this loop) */
      n_to_retry = g_queue_get_length (&retry);
      while (outstanding + batch <= window && (next < n_chunks || n_to_retry > 0))
        {
          g_autofree char *id = g_strdup_printf ("l%u", n_req++);
          LoadRequest *lr = g_new0 (LoadRequest, 1);

          lr->request = kv_request_new (id, NULL);
          lr->chunks = g_new (guint64, batch);
          lr->keys = g_new (KvKey *, batch);
          kv_tiering_manager_on_new_request (s->bench.manager, lr->request);
          while (lr->n_pending < batch)
            {
              guint64 chunk;
              KvKey *key;

              if (n_to_retry > 0)
                {
                  chunk = GPOINTER_TO_SIZE (g_queue_pop_head (&retry));
                  n_to_retry--;
                }
              else if (next < n_chunks)
                chunk = first + next++;
              else
                break;
              key = bench_stack_key (&s->bench, chunk);
              if (load_lookup (s, lr, chunk, key, &retry, n_retried))
                {
                  lr->chunks[lr->n_pending] = chunk;
                  lr->keys[lr->n_pending++] = g_steal_pointer (&key);
                }
              g_clear_pointer (&key, kv_key_unref);
            }
          outstanding += lr->n_pending;
          progress = TRUE;
          if (lr->n_pending == 0)
            {
              kv_tiering_manager_on_request_finished (s->bench.manager, lr->request);
              load_request_free (lr);
            }
          else
            g_ptr_array_add (active, lr);
        }

      bench_stack_step (&s->bench);
      if (!progress)
        bench_stack_wait_wakeup (&s->bench);
      if (kv_fs_tier_get_counter (s->tier, KV_FS_COUNTER_LOAD_FAILURES) > 0 ||
          *n_retried > 64 * n_chunks)
        {
          g_printerr ("error: the load pass gave up: %" G_GUINT64_FORMAT " load failures, %"
                      G_GUINT64_FORMAT " chunks asked for again\n",
                      kv_fs_tier_get_counter (s->tier, KV_FS_COUNTER_LOAD_FAILURES), *n_retried);
          for (guint r = 0; r < active->len; r++)
            kv_tiering_manager_on_request_finished (s->bench.manager,
                                                    ((LoadRequest *) g_ptr_array_index (active, r))->request);
          g_queue_clear (&retry);
          break;
        }
    }
  kv_secondary_tier_drain_jobs (s->bench.tier, NULL);
  bench_stack_step (&s->bench);
  return bench_now_s () - start;
}

/* ---- reporting ---------------------------------------------------------- */


typedef enum
{
  PASS_STORE_COLD,
  PASS_STORE_PREALLOCATED,
  PASS_STORE,
  PASS_LOAD,
  N_PASSES
} Pass;

static const char * const pass_names[N_PASSES] = {
  "store-cold", "store-preallocated", "store", "load"
};

/* One timed tier pass with the ceiling pass paired with it. */
typedef struct
{
  double gbs;
  double cpu;       /* s/GB */
  double ceiling;   /* GB/s of the paired ceiling pass; 0: none */
  double checked;   /* a load on a memory-backed root: GB/s of the paired
                     * reads that check what they copy; 0: none */
  double owner_us;  /* CPU of the thread that drives the manager (the
                     * engine's), µs per chunk */
} Sample;

static double
sample_ratio (const Sample *s)
{
  /* without a ceiling, rounds are ranked by throughput */
  return s->ceiling > 0 ? s->gbs / s->ceiling : s->gbs;
}

static gint
sample_compare (gconstpointer a,
                gconstpointer b)
{
  double ra = sample_ratio (a);
  double rb = sample_ratio (b);

  return (ra > rb) - (ra < rb);
}

static void
report (const char   *prefix,
        const char   *what,
        const char   *size,
        const char   *engine,
        const Sample *s)
{
  if (s->ceiling > 0 && s->checked > 0)
    g_print ("%s%s %s %s: %.2f GB/s = %.0f%% of ceiling %.2f GB/s (%.0f%% of a copy that checks "
             "as it goes, %.2f GB/s), cpu %.3f s/GB",
             prefix, what, size, engine, s->gbs, 100 * s->gbs / s->ceiling, s->ceiling,
             100 * s->gbs / s->checked, s->checked, s->cpu);
  else if (s->ceiling > 0)
    g_print ("%s%s %s %s: %.2f GB/s = %.0f%% of ceiling %.2f GB/s, cpu %.3f s/GB",
             prefix, what, size, engine, s->gbs, 100 * s->gbs / s->ceiling, s->ceiling, s->cpu);
  else
    g_print ("%s%s %s %s: %.2f GB/s (no ceiling measured), cpu %.3f s/GB",
             prefix, what, size, engine, s->gbs, s->cpu);
  g_print (" (owner thread %.1f us per chunk)\n", s->owner_us);
}

/* A no-kvtier baseline, against the sweep's write ceiling (0: none). */
static void
report_baseline (const char *size,
                 const char *how,
                 double      gbs,
                 double      cpu,
                 double      write_ceiling)
{
  if (write_ceiling > 0)
    g_print ("baseline %s: %s, no kvtier: %.2f GB/s = %.0f%% of ceiling, cpu %.3f s/GB\n",
             size, how, gbs, 100 * gbs / write_ceiling, cpu);
  else
    g_print ("baseline %s: %s, no kvtier: %.2f GB/s (no ceiling measured), cpu %.3f s/GB\n",
             size, how, gbs, cpu);
}

/* ---- one engine --------------------------------------------------------- */

/* A timed store or load pass of chunks first..first+n_chunks-1, right
 * after the ceiling pass it is compared with. */
static Sample
timed_pass (Stack    *s,
            Ceiling  *ceiling,
            gboolean  store,
            guint64   first,
            guint64   n_chunks,
            gsize     chunk)
{
  /* 16 MiB per request, at most half the primary tier's slots */
  guint batch = CLAMP ((16u << 20) / chunk, 1, MAX (kv_host_buffer_get_n_slots (s->bench.buffer) / 2, 1));
  guint64 loaded = kv_fs_tier_get_counter (s->tier, KV_FS_COUNTER_LOADED_CHUNKS);
  guint64 n_retried = 0;
  double gb = n_chunks * chunk / 1e9;
  Sample sample;
  double t, c, owner;

  sample.checked = 0;
  if (!store && ceiling->memory)
    sample.checked = memory_ceiling_checked_read_pass (&ceiling->mem, ceiling->mem.checked_threads,
                                                       &c);
  sample.ceiling = ceiling_pair (ceiling, store);
  owner = bench_thread_cpu_s ();
  c = bench_self_cpu_s ();
  t = store ? bench_stack_run_store (&s->bench, first, n_chunks, batch) :
              run_load (s, first, n_chunks, batch, &n_retried);
  c = bench_self_cpu_s () - c;
  owner = bench_thread_cpu_s () - owner;
  if (!store)
    {
      /* what was read, a chunk loaded twice (evicted before its request
       * saw it) included */
      loaded = kv_fs_tier_get_counter (s->tier, KV_FS_COUNTER_LOADED_CHUNKS) - loaded;
      gb = loaded * chunk / 1e9;
      if (n_retried > 0)
        g_print ("#   load: %" G_GUINT64_FORMAT " chunks asked for again (their lazy promotion "
                 "found no room in the primary tier), %" G_GUINT64_FORMAT " chunks read\n",
                 n_retried, loaded);
    }
  sample.gbs = gb / t;
  sample.cpu = c / gb;
  sample.owner_us = 1e6 * owner / (gb * 1e9 / chunk);
  return sample;
}

/* store-cold, store and load of one engine in @root (a new directory),
 * each printed on a line that starts with @prefix. */
static gboolean
run_round (const char  *root,
           const char  *engine,
           gsize        chunk,
           Ceiling     *ceiling,
           const char  *prefix,
           Sample       samples[N_PASSES],
           GError     **error)
{
  g_autofree char *size = bench_size_name (chunk);
  guint64 n_chunks = MAX (opt_total / chunk, 1);
  /* what one chunk takes of max-size in the kvtier layout */
  guint64 file_size = chunk + KV_CHUNK_HEADER_SIZE;
  Stack writer = { 0 };
  Stack reader = { 0 };
  guint64 stored, evicted, reused, used;

  /* room for exactly the N chunks of the cold pass: then every store of
   * the steady pass evicts one */
  if (!stack_init (&writer, root, engine, chunk, n_chunks * file_size, FALSE, error))
    {
      stack_clear (&writer);
      return FALSE;
    }
  samples[PASS_STORE_COLD] = timed_pass (&writer, ceiling, TRUE, 0, n_chunks, chunk);
  stored = kv_fs_tier_get_counter (writer.tier, KV_FS_COUNTER_STORED_CHUNKS);
  evicted = kv_fs_tier_get_counter (writer.tier, KV_FS_COUNTER_EVICTED_CHUNKS);
  reused = kv_fs_tier_get_counter (writer.tier, KV_FS_COUNTER_REUSED_FILES);
  used = kv_fs_tier_get_used_bytes (writer.tier);
  bench_shortfall (stored, n_chunks, "stored");
  if (used != n_chunks * file_size || evicted != 0)
    g_printerr ("warning: the cold pass left %" G_GUINT64_FORMAT " bytes (%" G_GUINT64_FORMAT
                " chunks evicted), not %" G_GUINT64_FORMAT " files of %" G_GUINT64_FORMAT
                " bytes: the steady pass may not evict one chunk per store\n",
                used, evicted, n_chunks, file_size);
  report (prefix, pass_names[PASS_STORE_COLD], size, engine, &samples[PASS_STORE_COLD]);

  samples[PASS_STORE] = timed_pass (&writer, ceiling, TRUE, n_chunks, n_chunks, chunk);
  stored = kv_fs_tier_get_counter (writer.tier, KV_FS_COUNTER_STORED_CHUNKS) - stored;
  evicted = kv_fs_tier_get_counter (writer.tier, KV_FS_COUNTER_EVICTED_CHUNKS) - evicted;
  reused = kv_fs_tier_get_counter (writer.tier, KV_FS_COUNTER_REUSED_FILES) - reused;
  bench_shortfall (stored, n_chunks, "stored into the full tier");
  report (prefix, pass_names[PASS_STORE], size, engine, &samples[PASS_STORE]);
  /* evictions show the pass ran in the steady state; reused files, how
   * many stores skipped creating a file and allocating its blocks */
  g_print ("#   %s %s into the full tier: %" G_GUINT64_FORMAT " chunks stored, %"
           G_GUINT64_FORMAT " evicted, %" G_GUINT64_FORMAT " of their files reused; "
           "%u files, %" G_GUINT64_FORMAT " MiB held\n",
           size, engine, stored, evicted, reused, kv_fs_tier_get_n_chunks (writer.tier),
           kv_fs_tier_get_used_bytes (writer.tier) >> 20);
  stack_clear (&writer);

  /* a fresh primary: every chunk comes back from the files */
  if (!stack_init (&reader, root, engine, chunk, n_chunks * file_size, FALSE, error))
    {
      stack_clear (&reader);
      return FALSE;
    }
  samples[PASS_LOAD] = timed_pass (&reader, ceiling, FALSE, n_chunks, n_chunks, chunk);
  bench_shortfall (kv_fs_tier_get_counter (reader.tier, KV_FS_COUNTER_LOADED_CHUNKS), n_chunks,
                   "loaded");
  report (prefix, pass_names[PASS_LOAD], size, engine, &samples[PASS_LOAD]);
  stack_clear (&reader);

  /* A new tier again, with preallocate: its spare files written first,
   * the stores take them over instead of creating files. */
  {
    g_autofree char *spare_root = g_strconcat (root, "-preallocated", NULL);
    Stack spared = { 0 };
    double t;
    guint n_spares;

    if (!stack_init (&spared, spare_root, engine, chunk, n_chunks * file_size, TRUE, error))
      {
        stack_clear (&spared);
        return FALSE;
      }
    t = bench_now_s ();
    kv_fs_tier_wait_preallocated (spared.tier);
    t = bench_now_s () - t;
    n_spares = kv_fs_tier_get_n_spare_files (spared.tier);
    g_print ("#   %s %s: %u spare files (%" G_GUINT64_FORMAT " MiB) preallocated in %.1f s\n",
             size, engine, n_spares, (n_spares * file_size) >> 20, t);
    samples[PASS_STORE_PREALLOCATED] = timed_pass (&spared, ceiling, TRUE, 0, n_chunks, chunk);
    stored = kv_fs_tier_get_counter (spared.tier, KV_FS_COUNTER_STORED_CHUNKS);
    reused = kv_fs_tier_get_counter (spared.tier, KV_FS_COUNTER_SPARE_FILES_USED);
    bench_shortfall (stored, n_chunks, "stored into the preallocated tier");
    if (stored == n_chunks && reused != n_chunks)
      g_printerr ("warning: %" G_GUINT64_FORMAT " of %" G_GUINT64_FORMAT " chunks stored into "
                  "the preallocated tier, %" G_GUINT64_FORMAT " of them over a spare file\n",
                  stored, n_chunks, reused);
    report (prefix, pass_names[PASS_STORE_PREALLOCATED], size, engine,
            &samples[PASS_STORE_PREALLOCATED]);
    stack_clear (&spared);
  }
  return TRUE;
}

/* store-cold, store and load of one engine with layout=slab in @root (a
 * new directory): N slots, filled by store-cold, overwritten by store. */
static gboolean
run_slab_round (const char  *root,
                const char  *engine,
                gsize        chunk,
                Ceiling     *ceiling,
                const char  *prefix,
                Sample       samples[N_PASSES],
                GError     **error)
{
  g_autofree char *size = bench_size_name (chunk);
  g_autofree char *name = g_strdup_printf ("%s slab", engine);
  guint64 n_chunks = MAX (opt_total / chunk, 1);
  guint64 slot_size = chunk + KV_CHUNK_HEADER_SIZE;
  Stack writer = { 0 };
  Stack reader = { 0 };
  gboolean ok = FALSE;
  guint64 stored, evicted;
  double t;

  stack_layout = KV_FS_LAYOUT_KIND_SLAB;
  t = bench_now_s ();
  if (!stack_init (&writer, root, engine, chunk, n_chunks * slot_size, FALSE, error))
    goto out;
  g_print ("#   %s %s: slab files of %" G_GUINT64_FORMAT " slots made in %.2f s\n",
           size, name, n_chunks, bench_now_s () - t);
  samples[PASS_STORE_COLD] = timed_pass (&writer, ceiling, TRUE, 0, n_chunks, chunk);
  report (prefix, pass_names[PASS_STORE_COLD], size, name, &samples[PASS_STORE_COLD]);
  stored = kv_fs_tier_get_counter (writer.tier, KV_FS_COUNTER_STORED_CHUNKS);
  bench_shortfall (stored, n_chunks, "stored into empty slabs");
  samples[PASS_STORE] = timed_pass (&writer, ceiling, TRUE, n_chunks, n_chunks, chunk);
  stored = kv_fs_tier_get_counter (writer.tier, KV_FS_COUNTER_STORED_CHUNKS) - stored;
  evicted = kv_fs_tier_get_counter (writer.tier, KV_FS_COUNTER_EVICTED_CHUNKS);
  report (prefix, pass_names[PASS_STORE], size, name, &samples[PASS_STORE]);
  /* with the checksum carried the stores computed none: nothing to take off */
  if (opt_carry_checksum)
    g_print ("#   %s %s into the full slabs: %" G_GUINT64_FORMAT " chunks stored, %"
             G_GUINT64_FORMAT " evicted; store cpu with the checksum carried: "
             "cold %.3f s/GB, full %.3f s/GB\n",
             size, name, stored, evicted, samples[PASS_STORE_COLD].cpu, samples[PASS_STORE].cpu);
  else
    g_print ("#   %s %s into the full slabs: %" G_GUINT64_FORMAT " chunks stored, %"
             G_GUINT64_FORMAT " evicted; store cpu less the checksum floor (%.3f s/GB): "
             "cold %.3f s/GB, full %.3f s/GB\n",
             size, name, stored, evicted, hash_floor_cpu,
             samples[PASS_STORE_COLD].cpu - hash_floor_cpu,
             samples[PASS_STORE].cpu - hash_floor_cpu);
  bench_shortfall (stored, n_chunks, "stored into the full slabs");
  stack_clear (&writer);

  t = bench_now_s ();
  if (!stack_init (&reader, root, engine, chunk, n_chunks * slot_size, FALSE, error))
    goto out;
  g_print ("#   %s %s: restart scan of %u chunks in %.2f s\n", size, name,
           kv_fs_tier_get_n_chunks (reader.tier), bench_now_s () - t);
  samples[PASS_LOAD] = timed_pass (&reader, ceiling, FALSE, n_chunks, n_chunks, chunk);
  bench_shortfall (kv_fs_tier_get_counter (reader.tier, KV_FS_COUNTER_LOADED_CHUNKS), n_chunks,
                   "loaded");
  report (prefix, pass_names[PASS_LOAD], size, name, &samples[PASS_LOAD]);
  g_print ("#   %s %s: load cpu less the checksum floor: %.3f s/GB\n", size, name,
           samples[PASS_LOAD].cpu - hash_floor_cpu);
  samples[PASS_STORE_PREALLOCATED] = (Sample) { 0, 0, 0, 0, 0 };
  ok = TRUE;

out:
  stack_clear (&writer);
  stack_clear (&reader);
  stack_layout = KV_FS_LAYOUT_KIND_KVTIER;
  return ok;
}

static gboolean
run_engine (const char  *dir,
            const char  *engine,
            gsize        chunk,
            Ceiling     *ceiling,
            gboolean     slab,
            GError     **error)
{
  g_autofree char *size = bench_size_name (chunk);
  GArray *rounds[N_PASSES];
  gboolean ok = TRUE;

  for (guint p = 0; p < N_PASSES; p++)
    rounds[p] = g_array_sized_new (FALSE, FALSE, sizeof (Sample), opt_rounds);
  for (guint r = 0; r < opt_rounds; r++)
    {
      /* store-cold needs an empty tier, hence a directory per round. Files
       * are removed only at the end of the run: deleting thousands of
       * files right before the next measurement would slow ext4's inode
       * allocation (it skips recently deleted inodes) for the next one. */
      g_autofree char *leaf = opt_rounds == 1 ?
                              g_strdup_printf ("%s%s-%s", engine, slab ? "-slab" : "", size) :
                              g_strdup_printf ("%s%s-%s-round%u", engine, slab ? "-slab" : "",
                                               size, r + 1);
      g_autofree char *root = g_build_filename (dir, leaf, NULL);
      g_autofree char *prefix = g_strdup_printf ("# round %u: ", r + 1);
      Sample samples[N_PASSES];

      /* with one round, its lines are the result */
      if (!(slab ? run_slab_round : run_round) (root, engine, chunk, ceiling,
                                                opt_rounds == 1 ? "" : prefix, samples, error))
        {
          ok = FALSE;
          break;
        }
      for (guint p = 0; p < N_PASSES; p++)
        g_array_append_val (rounds[p], samples[p]);
    }
  if (ok && opt_rounds > 1)
    {
      /* the median round by ratio to its paired ceiling (the lower one of
       * an even count) */
      g_print ("#   %s %s: median of %u rounds\n", size, engine, opt_rounds);
      for (guint p = 0; p < N_PASSES; p++)
        {
          g_autofree char *name = g_strdup_printf ("%s%s", engine, slab ? " slab" : "");

          /* slabs are preallocated: no separate pass */
          if (slab && p == PASS_STORE_PREALLOCATED)
            continue;
          g_array_sort (rounds[p], sample_compare);
          report ("", pass_names[p], size, name,
                  &g_array_index (rounds[p], Sample, (opt_rounds - 1) / 2));
        }
    }
  for (guint p = 0; p < N_PASSES; p++)
    g_array_unref (rounds[p]);
  return ok;
}

int
main (int argc, char **argv)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *total_text = NULL;
  g_autofree char *primary_text = NULL;
  g_autofree char *inflight_text = NULL;
  g_autofree char *own_dir = NULL;
  g_auto(GStrv) engines = NULL;
  g_auto(GStrv) layouts = NULL;
  g_auto(GStrv) chunks = NULL;
  const char *memory_fs = NULL;
  GOptionEntry entries[] = {
    { "dir", 0, 0, G_OPTION_ARG_FILENAME, &opt_dir, "Directory to test (default: a new one in /tmp)", "DIR" },
    { "total", 0, 0, G_OPTION_ARG_STRING, &total_text, "Bytes moved each way per measurement (default 1GiB)", "SIZE" },
    { "engines", 0, 0, G_OPTION_ARG_STRING, &opt_engines, "Engines (default uring,gio,threads)", "LIST" },
    { "chunk-sizes", 0, 0, G_OPTION_ARG_STRING, &opt_chunks, "Chunk sizes (default 256KiB,2MiB)", "LIST" },
    { "primary", 0, 0, G_OPTION_ARG_STRING, &primary_text, "Primary tier size (default 256MiB)", "SIZE" },
    { "inflight", 0, 0, G_OPTION_ARG_STRING, &inflight_text, "inflight-bytes of the tier, 0 for no limit (default: the tier's)", "SIZE" },
    { "queue-depth", 0, 0, G_OPTION_ARG_INT, &opt_queue_depth, "queue-depth of the tier (default: the tier's)", "N" },
    { "rounds", 0, 0, G_OPTION_ARG_INT, &opt_rounds,
      "Paired ceiling and tier measurements per engine; the median round is reported "
      "(default 1; each round writes 2 × total more to disk until the end)", "R" },
    { "layouts", 0, 0, G_OPTION_ARG_STRING, &opt_layouts,
      "Layouts of the tier: kvtier (a file per chunk), slab (default kvtier)", "LIST" },
    { "ceiling-details", 0, 0, G_OPTION_ARG_NONE, &opt_ceiling_details,
      "Print every ceiling configuration's figures", NULL },
    { "no-baseline", 0, G_OPTION_FLAG_REVERSE, G_OPTION_ARG_NONE, &opt_baseline,
      "Skip the file-per-chunk baseline (plain syscalls, no kvtier)", NULL },
    { "no-carried-checksum", 0, G_OPTION_FLAG_REVERSE, G_OPTION_ARG_NONE, &opt_carry_checksum,
      "Stored slots carry no checksum: the tier computes it from the payload", NULL },
    { NULL }
  };
  g_autoptr(GOptionContext) context = g_option_context_new ("- fs tier throughput against the device");

  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    {
      g_printerr ("%s\n", error->message);
      return 2;
    }
  if ((total_text != NULL && !bench_parse_size (total_text, &opt_total)) ||
      (primary_text != NULL && !bench_parse_size (primary_text, &opt_primary)) ||
      /* "0" (no limit) leaves opt_inflight at 0 */
      (inflight_text != NULL && !g_str_equal (inflight_text, "0") &&
       !bench_parse_size (inflight_text, &opt_inflight)))
    {
      g_printerr ("sizes look like 512MiB or 2GiB\n");
      return 2;
    }
  if (opt_rounds < 1 || opt_rounds > 1000)
    {
      g_printerr ("--rounds takes 1 to 1000, not %d\n", (gint) opt_rounds);
      return 2;
    }
  {
    g_autoptr(GTypeClass) klass = g_type_class_ref (KV_TYPE_FS_TIER);
    GObjectClass *object_class = G_OBJECT_CLASS (klass);

    if (inflight_text == NULL)
      opt_inflight = g_value_get_uint64 (g_param_spec_get_default_value (
        g_object_class_find_property (object_class, "inflight-bytes")));
    if (opt_queue_depth < 0)
      opt_queue_depth = g_value_get_uint (g_param_spec_get_default_value (
        g_object_class_find_property (object_class, "queue-depth")));
  }
  if (opt_queue_depth < 2 || opt_queue_depth > 4096)
    {
      g_printerr ("--queue-depth takes 2 to 4096, not %d\n", opt_queue_depth);
      return 2;
    }
  if (opt_dir == NULL)
    opt_dir = own_dir = g_dir_make_tmp ("kvtier-fs-bench-XXXXXX", &error);
  if (opt_dir == NULL || g_mkdir_with_parents (opt_dir, 0700) != 0)
    {
      g_printerr ("cannot use the directory: %s\n", error ? error->message : g_strerror (errno));
      return 1;
    }
  engines = g_strsplit (opt_engines ? opt_engines : "uring,gio,threads", ",", -1);
  layouts = g_strsplit (opt_layouts ? opt_layouts : "kvtier", ",", -1);
  for (guint l = 0; layouts[l] != NULL; l++)
    if (!g_str_equal (layouts[l], "kvtier") && !g_str_equal (layouts[l], "slab"))
      {
        g_printerr ("unknown layout ‘%s’ (kvtier, slab)\n", layouts[l]);
        return 2;
      }
  chunks = g_strsplit (opt_chunks ? opt_chunks : "256KiB,2MiB", ",", -1);

  g_print ("# fs-throughput on %s, %" G_GUINT64_FORMAT " MiB each way per measurement\n",
           opt_dir, opt_total >> 20);
  if (memory_backed_dir (opt_dir, &memory_fs))
    g_print ("# %s: the ceiling is memcpy. A store into an empty tier also has the kernel "
             "allocate the files' pages, which the ceiling does not (as the disk ceiling "
             "allocates no blocks); in a VM whose balloon reports free pages to the host, "
             "a page freed before and touched again costs a host fault\n", memory_fs);
  for (guint c = 0; chunks[c] != NULL; c++)
    {
      guint64 chunk = 0;
      g_autofree char *name = NULL;
      Ceiling ceiling = { 0 };

      if (!bench_parse_size (chunks[c], &chunk) || chunk % 4096 != 0)
        {
          g_printerr ("bad chunk size ‘%s’ (a multiple of 4KiB)\n", chunks[c]);
          return 2;
        }
      name = bench_size_name (chunk);
      if (memory_fs != NULL)
        {
          ceiling.memory = memory_ceiling_init (&ceiling.mem, chunk, opt_total, opt_primary,
                                                opt_ceiling_details);
          if (ceiling.memory)
            {
              ceiling.write_gbs = ceiling.mem.write_gbs;
              ceiling.read_gbs = ceiling.mem.read_gbs;
              g_print ("ceiling %s: write %.2f GB/s (cpu %.3f s/GB), read %.2f GB/s (cpu %.3f s/GB) "
                       "(%s root: memcpy of the same chunks between primary-sized and "
                       "total-sized memory, best of 1 to %u threads: write %u, read %u; each "
                       "tier pass is compared with one more pass of it right before)\n",
                       name, ceiling.write_gbs, ceiling.mem.write_cpu, ceiling.read_gbs,
                       ceiling.mem.read_cpu, memory_fs, MAX (g_get_num_processors (), 1),
                       ceiling.mem.write_threads, ceiling.mem.read_threads);
              g_print ("#   %s: a read that checks what it copies (XXH3-64 of each 64 KiB piece "
                       "right after its copy, as a load must): %.2f GB/s = %.0f%% of the plain "
                       "read (cpu %.3f s/GB), %u thread%s\n",
                       name, ceiling.mem.checked_gbs, 100 * ceiling.mem.checked_gbs / ceiling.read_gbs,
                       ceiling.mem.checked_cpu, ceiling.mem.checked_threads,
                       ceiling.mem.checked_threads == 1 ? "" : "s");
            }
        }
      else if (ceiling_init (&ceiling, opt_dir, chunk, opt_total, opt_ceiling_details))
        g_print ("ceiling %s: write %.2f GB/s (cpu %.3f s/GB), read %.2f GB/s (cpu %.3f s/GB) "
                 "(raw O_DIRECT io_uring, registered buffers, best of several configurations: "
                 "write %s, read %s; each tier pass is compared with one more pass of it "
                 "right before)\n",
                 name, ceiling.write_gbs, ceiling.write_cpu, ceiling.read_gbs, ceiling.read_cpu,
                 ceiling.write_how, ceiling.read_how);
      {
        g_autofree char *leaf = g_strdup_printf ("floor-%s", name);
        g_autofree char *root = g_build_filename (opt_dir, leaf, NULL);
        double hash_cpu = 0, file_cpu = 0;

        measure_cpu_floor (root, chunk, opt_total, &hash_cpu, &file_cpu);
        hash_floor_cpu = hash_cpu;
        g_print ("floor %s: a store's cpu before any I/O: %.3f s/GB to checksum payloads from "
                 "memory (XXH3-64; none when the slot carries it) + %.3f s/GB to rename, open, close and rename a file per "
                 "chunk = %.3f s/GB\n", name, hash_cpu, file_cpu, hash_cpu + file_cpu);
      }
      if (opt_baseline)
        {
          double gbs = 0, cpu = 0;
          g_autofree char *leaf = g_strdup_printf ("baseline-%s", name);
          g_autofree char *root = g_build_filename (opt_dir, leaf, NULL);

          for (guint reuse = 0; reuse < 2; reuse++)
            {
              const char *how = reuse ? "rename+overwrite+rename the file of an earlier chunk, "
                                        "16 threads"
                                      : "create+write+rename one file per chunk, 16 threads";

              measure_baseline (root, chunk, opt_total, reuse, &gbs, &cpu);
              report_baseline (name, how, gbs, cpu, ceiling.write_gbs);
            }
#if KV_FS_HAVE_URING
          {
            g_autofree char *why = NULL;
            const guint chains = 64;
            g_autofree char *how = g_strdup_printf ("the same takeover as one linked io_uring "
                                                    "chain per chunk, %u chains in flight", chains);

            if (measure_baseline_uring_chain (root, chunk, opt_total, chains, &gbs, &cpu, &why))
              report_baseline (name, how, gbs, cpu, ceiling.write_gbs);
            else
              g_print ("baseline %s: no io_uring chain baseline: %s\n", name, why);
          }
#endif
        }
      for (guint l = 0; layouts[l] != NULL; l++)
        for (guint e = 0; engines[e] != NULL; e++)
          if (!run_engine (opt_dir, engines[e], chunk, &ceiling,
                           g_str_equal (layouts[l], "slab"), &error))
            {
              g_printerr ("%s %s: %s\n", name, engines[e], error->message);
              g_clear_error (&error);
            }
      ceiling_clear (&ceiling);
    }
  {
    /* the ceiling's, the baseline's and the tiers' files */
    g_autofree char *cmd = g_strdup_printf ("rm -rf '%s'/*-*", opt_dir);

    if (system (cmd) != 0)
      g_printerr ("cannot clean %s\n", opt_dir);
  }
  if (own_dir != NULL)
    g_rmdir (own_dir);
  return bench_shortfall_seen () ? 1 : 0;
}
