/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "fs-memory-ceiling.h"

#include "kv-chunk-format.h"

#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/vfs.h>

#ifndef TMPFS_MAGIC
# define TMPFS_MAGIC 0x01021994
#endif
#ifndef RAMFS_MAGIC
# define RAMFS_MAGIC 0x858458f6
#endif

/*
 * On tmpfs there is no device under the files: O_DIRECT, where the kernel
 * accepts it at all, is buffered I/O under another name, and a write or
 * read is a copy between the caller's memory and the file's pages. The
 * fastest any store or load can be is then the fastest copy of the same
 * bytes this machine makes: a memcpy of the same chunks between the same
 * kinds of memory, by as many threads as help.
 *
 *  - the primary side is a primary-sized buffer of transparent huge pages
 *    (as kv-host-buffer.c maps the tier's), slot i % n-slots for chunk i;
 *  - the file side is one buffer of the run's total size, touched once
 *    before anything is timed: the pages a full tier overwrites. A store
 *    into an empty tier must also get the kernel to allocate its pages
 *    (see the `#` note main() prints); the ceiling does not, as the disk
 *    ceiling's writes allocate no blocks;
 *  - chunks go in a shuffled order, as the tier's files are scattered;
 *  - the sweep runs 1 to n-CPUs threads, each taking the next chunk, and
 *    keeps the best for each direction, which is also what every tier
 *    pass is compared with, measured again right before it.
 *
 * A load must also check the payload it copies (a slot torn by a crash
 * keeps a valid header), so reads are measured a second way: each chunk
 * copied a piece at a time, each piece hashed (XXH3-64) right after its
 * copy while it is in the core's cache, as the tier's mapped load does.
 * That is the fastest a checked load can be; how far it falls below the
 * plain copy is what the check itself costs on this machine.
 */

static double
now_s (void)
{
  return g_get_monotonic_time () / 1e6;
}

static double
cpu_s (void)
{
  struct rusage ru;

  getrusage (RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
         ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

/* Whether @dir is on tmpfs or ramfs; @out_fs_name names which. */
gboolean
memory_backed_dir (const char  *dir,
                   const char **out_fs_name)
{
  struct statfs st;

  if (statfs (dir, &st) != 0)
    return FALSE;
  if (st.f_type == TMPFS_MAGIC)
    *out_fs_name = "tmpfs";
  else if ((guint32) st.f_type == (guint32) RAMFS_MAGIC)
    *out_fs_name = "ramfs";
  else
    return FALSE;
  return TRUE;
}

static guint8 *
map_memory (gsize size)
{
  guint8 *p = mmap (NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

  if (p == MAP_FAILED)
    return NULL;
  (void) madvise (p, size, MADV_HUGEPAGE);
  memset (p, 0x5a, size);
  return p;
}

typedef struct
{
  MemoryCeiling *c;
  gboolean       write;
  gboolean       check;   /* a read that hashes what it copies */
  gint           next;    /* (atomic) the next chunk to copy */
} Pass;

/* Bytes a checked read copies before hashing them: the tier's piece
 * (COPY_PIECE in kv-fs-slab.c). */
#define CHECK_PIECE (64 * 1024)

/* A read of @n bytes from @from into @to, hashed a piece at a time
 * (the digest is a library call's result: it is not optimized away). */
static guint64
copy_and_check (KvChunkHasher *hasher,
                guint8        *to,
                const guint8  *from,
                gsize          n)
{
  kv_chunk_hasher_reset (hasher);
  for (gsize done = 0; done < n; done += CHECK_PIECE)
    {
      gsize piece = MIN (CHECK_PIECE, n - done);

      memcpy (to + done, from + done, piece);
      kv_chunk_hasher_update (hasher, to + done, piece);
    }
  return kv_chunk_hasher_digest (hasher);
}

static gpointer
copy_thread (gpointer data)
{
  Pass *pass = data;
  MemoryCeiling *c = pass->c;
  guint64 n_slots = c->primary_size / c->io_size;
  KvChunkHasher *hasher = pass->check ? kv_chunk_hasher_new () : NULL;
  gint i;

  while ((i = g_atomic_int_add (&pass->next, 1)) < (gint) c->n_ios)
    {
      guint64 chunk = c->order[i];
      guint8 *file = c->files + chunk * c->io_size;
      guint8 *slot = c->primary + (chunk % n_slots) * c->io_size;

      if (pass->write)
        memcpy (file, slot, c->io_size);
      else if (pass->check)
        (void) copy_and_check (hasher, slot, file, c->io_size);
      else
        memcpy (slot, file, c->io_size);
    }
  if (hasher != NULL)
    kv_chunk_hasher_free (hasher);
  return NULL;
}

static double
run_pass (MemoryCeiling *c,
          gboolean       write,
          gboolean       check,
          guint          n_threads,
          double        *out_cpu)
{
  Pass pass = { c, write, check, 0 };
  g_autofree GThread **threads = g_new (GThread *, n_threads);
  double gb = c->n_ios * c->io_size / 1e9;
  double t = now_s (), cpu = cpu_s ();

  for (guint i = 0; i < n_threads; i++)
    threads[i] = g_thread_new ("memcpy-ceiling", copy_thread, &pass);
  for (guint i = 0; i < n_threads; i++)
    g_thread_join (threads[i]);
  t = now_s () - t;
  *out_cpu = (cpu_s () - cpu) / gb;
  return gb / t;
}

/* One timed pass of every chunk by @n_threads threads; returns GB/s and
 * sets @out_cpu to the CPU seconds per GB. */
double
memory_ceiling_pass (MemoryCeiling *c,
                     gboolean       write,
                     guint          n_threads,
                     double        *out_cpu)
{
  return run_pass (c, write, FALSE, n_threads, out_cpu);
}

/* One timed pass of reads that check each chunk as they copy it. */
double
memory_ceiling_checked_read_pass (MemoryCeiling *c,
                                  guint          n_threads,
                                  double        *out_cpu)
{
  return run_pass (c, FALSE, TRUE, n_threads, out_cpu);
}

void
memory_ceiling_clear (MemoryCeiling *c)
{
  if (c->primary != NULL)
    munmap (c->primary, c->primary_size);
  if (c->files != NULL)
    munmap (c->files, c->files_size);
  g_clear_pointer (&c->order, g_free);
  memset (c, 0, sizeof *c);
}

/* Maps and touches the memory, then sweeps 1 to n-CPUs threads each way;
 * FALSE when the memory cannot be had. */
gboolean
memory_ceiling_init (MemoryCeiling *c,
                     gsize          io_size,
                     guint64        total,
                     gsize          primary_size,
                     gboolean       details)
{
  guint n_cpus = MAX (g_get_num_processors (), 1);

  memset (c, 0, sizeof *c);
  c->io_size = io_size;
  c->n_ios = MAX (total / io_size, 1);
  c->files_size = c->n_ios * io_size;
  c->primary_size = MAX (primary_size / io_size, 1) * io_size;
  c->primary = map_memory (c->primary_size);
  c->files = map_memory (c->files_size);
  if (c->primary == NULL || c->files == NULL)
    {
      memory_ceiling_clear (c);
      return FALSE;
    }
  c->order = g_new (guint64, c->n_ios);
  for (guint64 i = 0; i < c->n_ios; i++)
    c->order[i] = i;
  for (guint64 i = c->n_ios - 1; i > 0; i--)
    {
      guint64 j = g_random_int_range (0, (gint32) MIN (i + 1, G_MAXINT32));
      guint64 t = c->order[i];

      c->order[i] = c->order[j];
      c->order[j] = t;
    }

  for (guint n = 1; n <= n_cpus; n++)
    {
      double write_cpu, read_cpu, checked_cpu;
      double write_gbs = memory_ceiling_pass (c, TRUE, n, &write_cpu);
      double read_gbs = memory_ceiling_pass (c, FALSE, n, &read_cpu);
      double checked_gbs = memory_ceiling_checked_read_pass (c, n, &checked_cpu);

      if (write_gbs > c->write_gbs)
        {
          c->write_gbs = write_gbs;
          c->write_cpu = write_cpu;
          c->write_threads = n;
        }
      if (read_gbs > c->read_gbs)
        {
          c->read_gbs = read_gbs;
          c->read_cpu = read_cpu;
          c->read_threads = n;
        }
      if (checked_gbs > c->checked_gbs)
        {
          c->checked_gbs = checked_gbs;
          c->checked_cpu = checked_cpu;
          c->checked_threads = n;
        }
      if (details)
        g_print ("#   memcpy ceiling, %u thread%s: write %.2f GB/s, read %.2f GB/s, "
                 "checked read %.2f GB/s\n",
                 n, n == 1 ? "" : "s", write_gbs, read_gbs, checked_gbs);
    }
  return TRUE;
}
