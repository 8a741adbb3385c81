/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-fs-spares.h"
#include "kv-fs-io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Under each root's chunk directory; the scans skip dot names, and
 * vLLM only opens the files it names. */
#define SPARE_DIR_NAME KV_FS_SPARE_DIR_NAME

struct _KvFsSpares
{
  const KvFsLayout     *layout;
  KvFsIndex            *index;
  guint64               file_size;
  const gboolean       *o_direct;      /* per root, owned by the tier */
  gboolean              preallocate;
  KvFsSpareCreatedFunc  created;
  gpointer              created_data;

  GMutex                lock;
  GCond                 cond;          /* any field below changed */
  GPtrArray           **pool;          /* per root: paths (char *) */
  guint                 n_spares;
  gboolean              index_ready;
  gboolean              wanted;        /* room appeared: refill */
  gboolean              idle;          /* the thread has nothing to do */
  gboolean              stopping;
  GThread              *thread;
};

static char *
spare_dir (const KvFsLayout *layout,
           guint             root)
{
  return g_build_filename (kv_fs_layout_get_chunk_dir (layout, root), SPARE_DIR_NAME, NULL);
}

static gboolean
stopping (KvFsSpares *self)
{
  gboolean stop;

  g_mutex_lock (&self->lock);
  stop = self->stopping;
  g_mutex_unlock (&self->lock);
  return stop;
}

/* Takes the spare files a previous run left in @root's spare directory
 * into the pool while max-size has room for them; deletes the rest (and
 * all of them, with the directory, without preallocate). Returns one
 * past the highest spare number kept. */
/* A spare's name: "<n>", or "<n>.tmp" while it is written (@n decimal). */
static gboolean
is_spare_name (const char *name,
               guint64    *out_n,
               gboolean   *out_tmp)
{
  char *end = NULL;

  if (!g_ascii_isdigit (name[0]))
    return FALSE;
  *out_n = g_ascii_strtoull (name, &end, 10);
  *out_tmp = strcmp (end, ".tmp") == 0;
  return *end == '\0' || *out_tmp;
}

static guint64
adopt (KvFsSpares *self,
       guint       root)
{
  g_autofree char *dir = spare_dir (self->layout, root);
  int dir_fd = kv_fs_layout_open_subdir (self->layout, root, SPARE_DIR_NAME, FALSE);
  DIR *d;
  struct dirent *de;
  guint64 next = 0;

  if (dir_fd < 0)
    return 0;
  d = fdopendir (dir_fd);
  if (d == NULL)
    {
      close (dir_fd);
      return 0;
    }
  while ((de = readdir (d)) != NULL && !stopping (self))
    {
      const char *name = de->d_name;
      guint64 n = 0;
      gboolean tmp = FALSE;
      struct stat st;

      /* only names of the spares' own; only the tier's user's files */
      if (!is_spare_name (name, &n, &tmp) ||
          fstatat (dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
          !kv_fs_layout_trusts (self->layout, &st, TRUE))
        continue;
      /* a spare interrupted while written ends in .tmp, and a spare of
       * another chunk size is of no use */
      if (self->preallocate && !tmp &&
          (guint64) st.st_size == self->file_size &&
          kv_fs_index_reserve (self->index, self->file_size))
        {
          kv_fs_spares_push (self, root, g_build_filename (dir, name, NULL));
          next = MAX (next, n + 1);
        }
      else
        (void) unlinkat (dir_fd, name, 0);
    }
  closedir (d);
  if (!self->preallocate)
    {
      int chunk_fd = kv_fs_layout_open_subdir (self->layout, root, ".", FALSE);

      if (chunk_fd >= 0)
        {
          (void) unlinkat (chunk_fd, SPARE_DIR_NAME, AT_REMOVEDIR);
          close (chunk_fd);
        }
    }
  return next;
}

/* Blocking: writes spare file number @n of @root, whole (zeros, so that
 * a store overwrites blocks already written: overwriting fallocate()d
 * ones costs ext4 an extent conversion per write), under a temporary
 * name first. Returns its path, or NULL with errno set. */
static char *
create_spare (KvFsSpares   *self,
              guint         root,
              guint64       n,
              const guint8 *zeros)
{
  g_autofree char *dir = spare_dir (self->layout, root);
  g_autofree char *tmp = g_strdup_printf ("%" G_GUINT64_FORMAT ".tmp", n);
  g_autofree char *name = g_strdup_printf ("%" G_GUINT64_FORMAT, n);
  int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC |
              (self->o_direct[root] ? O_DIRECT : 0);
  int dir_fd;
  int errsv;
  int fd;

  dir_fd = kv_fs_layout_open_subdir (self->layout, root, SPARE_DIR_NAME, TRUE);
  if (dir_fd < 0)
    return NULL;
  fd = openat (dir_fd, tmp, flags, 0600);
  if (fd < 0)
    {
      errsv = errno;
      close (dir_fd);
      errno = errsv;
      return NULL;
    }
  errsv = kv_fs_io_pwrite_full (fd, zeros, self->file_size, 0);
  /* the descriptor is gone even when close() fails */
  if (close (fd) != 0 && errsv == 0)
    errsv = errno;
  if (errsv == 0 && renameat (dir_fd, tmp, dir_fd, name) == 0)
    {
      close (dir_fd);
      return g_build_filename (dir, name, NULL);
    }
  if (errsv == 0)
    errsv = errno;
  (void) unlinkat (dir_fd, tmp, 0);
  close (dir_fd);
  errno = errsv;
  return NULL;
}

/* Writes spare files, a root at a time in turn, until chunks and spares
 * fill max-size or every root refused one. A root that refused one (a
 * disk smaller than max-size, say) gets no more for the pool's life:
 * there the disk is the limit, and a spare would only race the stores
 * for the space they free. */
static void
fill (KvFsSpares   *self,
      const guint8 *zeros,
      guint64      *next,
      gboolean     *refused)
{
  guint n_roots = kv_fs_layout_get_n_roots (self->layout);
  guint n_refused = 0;

  for (guint r = 0; r < n_roots; r++)
    n_refused += refused[r] ? 1 : 0;
  for (guint r = 0; n_refused < n_roots && !stopping (self); r = (r + 1) % n_roots)
    {
      char *path;

      if (refused[r])
        continue;
      if (!kv_fs_index_reserve (self->index, self->file_size))
        break;
      path = create_spare (self, r, (*next)++, zeros);
      if (path == NULL)
        {
          int errsv = errno;
          g_autofree char *dir = spare_dir (self->layout, r);

          /* this root keeps the spares it has */
          kv_fs_index_release_reserved (self->index, self->file_size);
          g_message ("fs tier: stopped preallocating spare files in %s: %s", dir,
                     g_strerror (errsv));
          refused[r] = TRUE;
          n_refused++;
          continue;
        }
      kv_fs_spares_push (self, r, path);
      if (self->created != NULL)
        self->created (self->created_data);
    }
}

static gpointer
spares_main (gpointer user_data)
{
  KvFsSpares *self = user_data;
  guint n_roots = kv_fs_layout_get_n_roots (self->layout);
  g_autofree gboolean *refused = g_new0 (gboolean, n_roots);
  guint8 *zeros = NULL;
  guint64 next = 0;

  /* spares only get what the chunks found on disk leave */
  g_mutex_lock (&self->lock);
  while (!self->index_ready && !self->stopping)
    g_cond_wait (&self->cond, &self->lock);
  g_mutex_unlock (&self->lock);

  for (guint r = 0; r < n_roots; r++)
    {
      guint64 after_last = adopt (self, r);

      next = MAX (next, after_last);
    }
  if (self->preallocate &&
      posix_memalign ((void **) &zeros, 4096, (self->file_size + 4095) & ~(gsize) 4095) == 0)
    {
      memset (zeros, 0, self->file_size);
      fill (self, zeros, &next, refused);
      g_mutex_lock (&self->lock);
      while (!self->stopping)
        {
          if (!self->wanted)
            {
              self->idle = TRUE;
              g_cond_broadcast (&self->cond);    /* for kv_fs_spares_wait_idle() */
              g_cond_wait (&self->cond, &self->lock);
              continue;
            }
          self->idle = FALSE;
          self->wanted = FALSE;
          g_mutex_unlock (&self->lock);
          fill (self, zeros, &next, refused);
          g_mutex_lock (&self->lock);
        }
      g_mutex_unlock (&self->lock);
      free (zeros);
    }
  g_mutex_lock (&self->lock);
  self->idle = TRUE;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  return NULL;
}

/* Starts the spare thread, which waits for kv_fs_spares_index_ready().
 * @o_direct (per root) must outlive the pool. Without @preallocate the
 * thread only deletes the spares a previous run left. */
KvFsSpares *
kv_fs_spares_new (const KvFsLayout     *layout,
                  KvFsIndex            *index,
                  guint64               file_size,
                  const gboolean       *o_direct,
                  gboolean              preallocate,
                  KvFsSpareCreatedFunc  created,
                  gpointer              user_data)
{
  KvFsSpares *self = g_new0 (KvFsSpares, 1);
  guint n_roots = kv_fs_layout_get_n_roots (layout);

  self->layout = layout;
  self->index = index;
  self->file_size = file_size;
  self->o_direct = o_direct;
  self->preallocate = preallocate;
  self->created = created;
  self->created_data = user_data;
  g_mutex_init (&self->lock);
  g_cond_init (&self->cond);
  self->pool = g_new0 (GPtrArray *, n_roots);
  for (guint r = 0; r < n_roots; r++)
    self->pool[r] = g_ptr_array_new_with_free_func (g_free);
  self->thread = g_thread_new ("kvtier-fs-spares", spares_main, self);
  return self;
}

/* Stops the spare thread, finishing the spare it is writing. The pool
 * stays usable: stores still running may take spares or put them back. */
void
kv_fs_spares_stop (KvFsSpares *self)
{
  GThread *thread;

  g_mutex_lock (&self->lock);
  self->stopping = TRUE;
  thread = g_steal_pointer (&self->thread);
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  if (thread != NULL)
    g_thread_join (thread);
}

/* Stops the thread if needed and frees the pool; the spare files stay
 * on disk for the next tier. */
void
kv_fs_spares_free (KvFsSpares *self)
{
  kv_fs_spares_stop (self);
  for (guint r = 0; r < kv_fs_layout_get_n_roots (self->layout); r++)
    g_ptr_array_unref (self->pool[r]);
  g_free (self->pool);
  g_cond_clear (&self->cond);
  g_mutex_clear (&self->lock);
  g_free (self);
}

/* Whether a spare directory exists under some root of @layout (left by
 * a run with preallocate). */
gboolean
kv_fs_spares_any_on_disk (const KvFsLayout *layout)
{
  for (guint r = 0; r < kv_fs_layout_get_n_roots (layout); r++)
    {
      int fd = kv_fs_layout_open_subdir (layout, r, SPARE_DIR_NAME, FALSE);

      if (fd >= 0)
        close (fd);
      if (fd >= 0)
        return TRUE;
    }
  return FALSE;
}

/* The index holds what is on disk: the thread may start. */
void
kv_fs_spares_index_ready (KvFsSpares *self)
{
  g_mutex_lock (&self->lock);
  self->index_ready = TRUE;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
}

/* Bytes left the index without a store taking their place (a failed
 * store, a chunk deleted as corrupt or found missing): wakes the thread
 * if chunks and spares no longer fill max-size, so that the pool is
 * topped up and later stores still find spares. In a full tier's steady
 * state every eviction is paid back by a store at once, and this wakes
 * nobody. */
void
kv_fs_spares_want (KvFsSpares *self)
{
  if (!self->preallocate || kv_fs_index_is_full (self->index, self->file_size))
    return;
  g_mutex_lock (&self->lock);
  self->wanted = TRUE;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
}

/* Blocks until the thread has nothing left to do: the spares of a
 * previous run are taken over or deleted and, with preallocate, chunks
 * and spares fill max-size (or the disk refused more), the refills
 * asked for so far included. Returns at once once the pool is stopping. */
void
kv_fs_spares_wait_idle (KvFsSpares *self)
{
  g_mutex_lock (&self->lock);
  while (!self->stopping && (!self->idle || self->wanted))
    g_cond_wait (&self->cond, &self->lock);
  g_mutex_unlock (&self->lock);
}

/* Takes a spare file of @root out of the pool, or returns NULL. Its
 * bytes stay reserved in the index until the caller says otherwise
 * (kv_fs_index_begin_store() with from_reserved, or
 * kv_fs_index_release_reserved()). */
char *
kv_fs_spares_pop (KvFsSpares *self,
                  guint       root)
{
  char *path = NULL;

  g_mutex_lock (&self->lock);
  if (self->pool[root]->len > 0)
    {
      path = g_ptr_array_steal_index (self->pool[root], self->pool[root]->len - 1);
      self->n_spares--;
    }
  g_mutex_unlock (&self->lock);
  return path;
}

/* Adds @path (a spare file of @root, its bytes reserved in the index)
 * to the pool, which owns it from now on. */
void
kv_fs_spares_push (KvFsSpares *self,
                   guint       root,
                   char       *path)
{
  g_mutex_lock (&self->lock);
  g_ptr_array_add (self->pool[root], path);
  self->n_spares++;
  g_mutex_unlock (&self->lock);
}

gboolean
kv_fs_spares_has (KvFsSpares *self,
                  guint       root)
{
  gboolean has;

  g_mutex_lock (&self->lock);
  has = self->pool[root]->len > 0;
  g_mutex_unlock (&self->lock);
  return has;
}

/* Takes a spare out of the pool of the root other than @root that holds
 * the most (its index in @out_root), or returns NULL if no other root
 * has one: a store on @root with no spare there, in a full tier, gives
 * it up rather than evict a chunk. */
char *
kv_fs_spares_pop_elsewhere (KvFsSpares *self,
                            guint       root,
                            guint      *out_root)
{
  guint fullest = root;

  g_mutex_lock (&self->lock);
  for (guint r = 0; r < kv_fs_layout_get_n_roots (self->layout); r++)
    if (r != root && self->pool[r]->len > self->pool[fullest]->len)
      fullest = r;
  g_mutex_unlock (&self->lock);
  if (fullest == root)
    return NULL;
  *out_root = fullest;
  return kv_fs_spares_pop (self, fullest);
}

/* The spare files in the pool. */
guint
kv_fs_spares_get_n (KvFsSpares *self)
{
  guint n;

  g_mutex_lock (&self->lock);
  n = self->n_spares;
  g_mutex_unlock (&self->lock);
  return n;
}
