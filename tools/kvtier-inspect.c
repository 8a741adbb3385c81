/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kvtier-tool.h"
#include "kvtier-json.h"
#include "kvtier-namespace.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-glib/json-glib.h>
#include <xxhash.h>

/* `kvtier inspect fs ROOT`: what an fs tier holds, read from disk as
 * doc/on-disk-format.md describes it (an implementation of its own, not the
 * plugin's code, so it also checks the plugin). */

#define HEADER_SIZE TOOL_NAMESPACE_HEADER_SIZE
#define FORMAT_VERSION TOOL_NAMESPACE_FORMAT_VERSION
#define MAX_HASH_LEN 112
#define STALE_TEMP_S 3600
#define MAX_LISTED 20
#define READ_BLOCK (1024 * 1024)

/* Why a chunk file is bad, in the order a load checks (doc/on-disk-format.md). */
enum {
  BAD_SHORT,
  BAD_MAGIC,
  BAD_HEADER_CHECKSUM,
  BAD_VERSION,
  BAD_NAMESPACE,
  BAD_KEY,
  BAD_LENGTH,
  BAD_PAYLOAD_CHECKSUM,
  BAD_SHARD,
  BAD_UNREADABLE,
  BAD_LONG,
  N_BAD
};

static const char * const bad_names[N_BAD] = {
  "short file", "bad magic", "header checksum mismatch", "unknown version",
  "another namespace", "another key", "wrong payload length", "payload checksum mismatch",
  "in the wrong shard directory", "unreadable", "too long",
};

/* Why an entry under a root was not read: the root is not trusted, so
 * nothing is followed or opened that the tier would not have written. */
enum {
  IGNORED_SYMLINK,
  IGNORED_NOT_REGULAR,
  IGNORED_NOT_DIRECTORY,
  IGNORED_FOREIGN,
  IGNORED_WORLD_WRITABLE,
  IGNORED_UNKNOWN_NAME,
  IGNORED_UNREADABLE,
  N_IGNORED
};

static const char * const ignored_names[N_IGNORED] = {
  "symbolic link (not followed)", "not a regular file", "not a directory",
  "owned by another user", "writable by any user", "unknown name", "unreadable",
};

typedef struct
{
  uid_t      owner;         /* the root's; anything else was planted */
  gboolean   verify;
  gint64     now_s;
  guint64    ignored[N_IGNORED];
  GPtrArray *ignored_entries; /* "path: reason", the first few */
} Scan;

typedef struct
{
  char      *dir;           /* kvtier-<ns16>, kvslab-<ns16> or <model>_<digest>[_r<rank>] */
  gboolean   vllm;
  gboolean   slab;          /* layout=slab: chunks in the slots of slab files */
  guint64    slab_files;
  guint64    slots;
  guint64    free_slots;
  char      *name;          /* the namespace (kvtier) or model (vllm); NULL when unknown */
  char      *problem;       /* what is wrong with namespace.json, or NULL */
  guint64    block_size;    /* 0 when unknown */
  guint64    chunks;
  guint64    bytes;
  guint64    wrong_size;
  guint64    verified;
  guint64    bad[N_BAD];
  guint64    temp_files;
  guint64    temp_bytes;
  guint64    spare_files;   /* written ahead by preallocate=true */
  guint64    spare_bytes;
  guint64    stale_temp_files;
  guint8     digest[32];
  GPtrArray *bad_files;     /* "path: reason", the first few */
} Namespace;

static void
namespace_free (Namespace *ns)
{
  g_free (ns->dir);
  g_free (ns->name);
  g_free (ns->problem);
  g_ptr_array_unref (ns->bad_files);
  g_free (ns);
}

static guint64
le64 (const guint8 *p)
{
  guint64 v;

  memcpy (&v, p, sizeof v);
  return GUINT64_FROM_LE (v);
}

static guint32
le32 (const guint8 *p)
{
  guint32 v;

  memcpy (&v, p, sizeof v);
  return GUINT32_FROM_LE (v);
}

G_DEFINE_AUTOPTR_CLEANUP_FUNC (XXH3_state_t, XXH3_freeState)

static int
compare_names (gconstpointer a,
               gconstpointer b)
{
  return g_strcmp0 (*(const char * const *) a, *(const char * const *) b);
}

/* The tier writes hex in lowercase. */
static gboolean
is_lower_hex (const char *s,
              gsize       len)
{
  for (gsize i = 0; i < len; i++)
    if (!g_ascii_isxdigit (s[i]) || g_ascii_isupper (s[i]))
      return FALSE;
  return TRUE;
}

static gboolean
is_hex_name (const char *name,
             gsize       len)
{
  return strlen (name) == len && is_lower_hex (name, len);
}

static gboolean
is_decimal (const char *s)
{
  if (*s == '\0')
    return FALSE;
  for (; *s; s++)
    if (!g_ascii_isdigit (*s))
      return FALSE;
  return TRUE;
}

/* Parses "<hash-hex>_g<group>.kv". */
static gboolean
parse_chunk_name (const char *base,
                  guint8     *hash,
                  gsize      *hash_len,
                  guint32    *group)
{
  const char *sep = strstr (base, "_g");
  gsize hex_len;
  char *end = NULL;
  guint64 g;

  if (sep == NULL || !g_str_has_suffix (base, ".kv") || !g_ascii_isdigit (sep[2]))
    return FALSE;
  hex_len = (gsize) (sep - base);
  if (hex_len == 0 || hex_len % 2 != 0 || hex_len / 2 > MAX_HASH_LEN)
    return FALSE;
  for (gsize i = 0; i < hex_len / 2; i++)
    {
      int hi = g_ascii_xdigit_value (base[2 * i]);
      int lo = g_ascii_xdigit_value (base[2 * i + 1]);

      if (hi < 0 || lo < 0)
        return FALSE;
      hash[i] = (guint8) (hi << 4 | lo);
    }
  g = g_ascii_strtoull (sep + 2, &end, 10);
  if (end == NULL || !g_str_equal (end, ".kv") || g > G_MAXUINT32)
    return FALSE;
  *hash_len = hex_len / 2;
  *group = (guint32) g;
  return TRUE;
}

static void
add_bad (Namespace  *ns,
         const char *path,
         int         reason,
         const char *detail)
{
  ns->bad[reason]++;
  if (ns->bad_files->len < MAX_LISTED)
    g_ptr_array_add (ns->bad_files,
                     g_strdup_printf ("%s: %s%s%s%s", path, bad_names[reason],
                                      detail != NULL ? " (" : "", detail != NULL ? detail : "",
                                      detail != NULL ? ")" : ""));
}

static void
add_ignored (Scan       *scan,
             const char *path,
             int         reason,
             const char *detail)
{
  scan->ignored[reason]++;
  if (scan->ignored_entries->len < MAX_LISTED)
    g_ptr_array_add (scan->ignored_entries,
                     g_strdup_printf ("%s: %s%s%s%s", path, ignored_names[reason],
                                      detail != NULL ? " (" : "", detail != NULL ? detail : "",
                                      detail != NULL ? ")" : ""));
}

/* Classifies the entry @name of @dir_fd without following it; returns
 * TRUE when it is of the kind expected there (a directory or a regular
 * file), the root's owner owns it and not every user may write it, else
 * reports it as ignored. */
static gboolean
check_entry (Scan        *scan,
             int          dir_fd,
             const char  *name,
             const char  *path,
             gboolean     want_dir,
             struct stat *st)
{
  if (fstatat (dir_fd, name, st, AT_SYMLINK_NOFOLLOW) != 0)
    {
      add_ignored (scan, path, IGNORED_UNREADABLE, g_strerror (errno));
      return FALSE;
    }
  if (S_ISLNK (st->st_mode))
    {
      add_ignored (scan, path, IGNORED_SYMLINK, NULL);
      return FALSE;
    }
  if (want_dir && !S_ISDIR (st->st_mode))
    {
      add_ignored (scan, path, IGNORED_NOT_DIRECTORY, NULL);
      return FALSE;
    }
  if (!want_dir && !S_ISREG (st->st_mode))
    {
      add_ignored (scan, path, IGNORED_NOT_REGULAR,
                   S_ISDIR (st->st_mode) ? "a directory" : NULL);
      return FALSE;
    }
  if (st->st_uid != scan->owner)
    {
      g_autofree char *detail = g_strdup_printf ("uid %u, the root's owner is uid %u",
                                                 (guint) st->st_uid, (guint) scan->owner);

      add_ignored (scan, path, IGNORED_FOREIGN, detail);
      return FALSE;
    }
  /* the tier makes everything 0700 or 0600: anyone may have changed it */
  if ((st->st_mode & S_IWOTH) != 0)
    {
      g_autofree char *detail = g_strdup_printf ("mode %04o", (guint) (st->st_mode & 07777));

      add_ignored (scan, path, IGNORED_WORLD_WRITABLE, detail);
      return FALSE;
    }
  return TRUE;
}

/* Opens the directory @name of @dir_fd, never through a symbolic link,
 * once check_entry() accepted it; -1 when it cannot be read (reported). */
static int
open_subdir (Scan              *scan,
             int                dir_fd,
             const char        *name,
             const char        *path,
             const struct stat *st)
{
  int fd = openat (dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat now;

  if (fd < 0)
    {
      add_ignored (scan, path, errno == ELOOP ? IGNORED_SYMLINK : IGNORED_UNREADABLE,
                   errno == ELOOP ? NULL : g_strerror (errno));
      return -1;
    }
  /* replaced between the two looks */
  if (fstat (fd, &now) != 0 || now.st_dev != st->st_dev || now.st_ino != st->st_ino)
    {
      add_ignored (scan, path, IGNORED_UNREADABLE, "replaced while inspected");
      close (fd);
      return -1;
    }
  return fd;
}

/* The names in the directory @dir_fd, sorted. */
static GPtrArray *
list_dir (Scan       *scan,
          int         dir_fd,
          const char *path)
{
  GPtrArray *names = g_ptr_array_new_with_free_func (g_free);
  int fd = dup (dir_fd);
  DIR *d = fd >= 0 ? fdopendir (fd) : NULL;
  struct dirent *entry;

  if (d == NULL)
    {
      add_ignored (scan, path, IGNORED_UNREADABLE, g_strerror (errno));
      if (fd >= 0)
        close (fd);
      return names;
    }
  /* the copy shares the offset of @dir_fd, which may have been read */
  rewinddir (d);
  while ((entry = readdir (d)) != NULL)
    if (!g_str_equal (entry->d_name, ".") && !g_str_equal (entry->d_name, ".."))
      g_ptr_array_add (names, g_strdup (entry->d_name));
  closedir (d);
  g_ptr_array_sort (names, compare_names);
  return names;
}

static gboolean
read_full (int     fd,
           guint8 *buf,
           gsize   len,
           gsize  *out_done)
{
  gsize done = 0;

  while (done < len)
    {
      ssize_t r = read (fd, buf + done, len - done);

      if (r < 0 && errno == EINTR)
        continue;
      if (r < 0)
        return FALSE;
      if (r == 0)
        break;
      done += (gsize) r;
    }
  *out_done = done;
  return TRUE;
}

/* Checks one chunk file as a load would, reading the payload in pieces
 * (a chunk may be large); returns the reason it is bad, or -1 when it is
 * good. @detail tells more about some reasons. */
static int
verify_chunk (Namespace  *ns,
              int         fd,
              guint64     file_size,
              const char *shard,
              const char *base,
              char      **detail)
{
  g_autofree guint8 *buf = g_malloc (READ_BLOCK);
  g_autoptr(XXH3_state_t) state = NULL;
  guint8 hash[MAX_HASH_LEN];
  guint8 offload[MAX_HASH_LEN + 4];
  gsize hash_len = 0;
  guint32 group = 0, be_group;
  guint64 shard_hash, payload_len, payload_sum, left;
  char expected_shard[8];
  gsize done = 0;

  if (!parse_chunk_name (base, hash, &hash_len, &group))
    return BAD_KEY;
  if (!read_full (fd, buf, HEADER_SIZE, &done))
    {
      *detail = g_strdup (g_strerror (errno));
      return BAD_UNREADABLE;
    }
  if (done < HEADER_SIZE)
    {
      *detail = g_strdup_printf ("%" G_GSIZE_FORMAT " bytes, shorter than the %d-byte header",
                                 done, HEADER_SIZE);
      return BAD_SHORT;
    }
  if (memcmp (buf, "KVTIERFS", 8) != 0)
    return BAD_MAGIC;
  if (XXH3_64bits (buf, 4088) != le64 (buf + 4088))
    return BAD_HEADER_CHECKSUM;
  if (le32 (buf + 8) != FORMAT_VERSION || le32 (buf + 12) != HEADER_SIZE)
    return BAD_VERSION;
  if (memcmp (buf + 16, ns->digest, 32) != 0)
    return BAD_NAMESPACE;
  if (le32 (buf + 64) != group || le32 (buf + 68) != hash_len ||
      memcmp (buf + 88, hash, hash_len) != 0)
    return BAD_KEY;
  payload_len = le64 (buf + 48);
  payload_sum = le64 (buf + 56);
  if (payload_len != ns->block_size)
    {
      *detail = g_strdup_printf ("the header says %" G_GUINT64_FORMAT " bytes, namespace.json %"
                                 G_GUINT64_FORMAT, payload_len, ns->block_size);
      return BAD_LENGTH;
    }
  if (file_size != HEADER_SIZE + payload_len)
    {
      *detail = g_strdup_printf ("%" G_GUINT64_FORMAT " bytes, a chunk is %" G_GUINT64_FORMAT,
                                 file_size, HEADER_SIZE + payload_len);
      return file_size < HEADER_SIZE + payload_len ? BAD_SHORT : BAD_LONG;
    }

  state = XXH3_createState ();
  XXH3_64bits_reset (state);
  for (left = payload_len; left > 0;)
    {
      gsize want = (gsize) MIN (left, READ_BLOCK);

      if (!read_full (fd, buf, want, &done))
        {
          *detail = g_strdup (g_strerror (errno));
          return BAD_UNREADABLE;
        }
      if (done < want)
        {
          *detail = g_strdup ("shrank while read");
          return BAD_SHORT;
        }
      XXH3_64bits_update (state, buf, done);
      left -= done;
    }
  if (XXH3_64bits_digest (state) != payload_sum)
    return BAD_PAYLOAD_CHECKSUM;

  /* The shard directory: the top byte of XXH3 of the offload key. */
  memcpy (offload, hash, hash_len);
  be_group = GUINT32_TO_BE (group);
  memcpy (offload + hash_len, &be_group, 4);
  shard_hash = XXH3_64bits (offload, hash_len + 4);
  g_snprintf (expected_shard, sizeof expected_shard, "%02x",
              (guint) (shard_hash >> 56) & 0xff);
  if (!g_str_equal (shard, expected_shard))
    return BAD_SHARD;
  return -1;
}
static gboolean
is_temp (const char *base)
{
  return g_str_has_suffix (base, ".tmp");
}

static void
count_temp (Scan              *scan,
            Namespace         *ns,
            const struct stat *st)
{
  ns->temp_files++;
  ns->temp_bytes += (guint64) st->st_size;
  if (scan->now_s - st->st_mtime > STALE_TEMP_S)
    ns->stale_temp_files++;
}

/* The spare directory of a tier with preallocate: files of a chunk's
 * size that hold no chunk yet, named by number (doc/on-disk-format.md). */
static void
scan_spares (Scan       *scan,
             Namespace  *ns,
             int         dir_fd,
             const char *dir)
{
  g_autoptr(GPtrArray) names = list_dir (scan, dir_fd, dir);

  for (guint i = 0; i < names->len; i++)
    {
      const char *base = g_ptr_array_index (names, i);
      g_autofree char *path = g_build_filename (dir, base, NULL);
      g_autofree char *number = g_strdup (base);
      struct stat st;

      if (is_temp (number))
        number[strlen (number) - 4] = '\0';
      if (!is_decimal (number))
        {
          add_ignored (scan, path, IGNORED_UNKNOWN_NAME, NULL);
          continue;
        }
      if (!check_entry (scan, dir_fd, base, path, FALSE, &st))
        continue;
      if (is_temp (base))
        count_temp (scan, ns, &st);
      else
        {
          ns->spare_files++;
          ns->spare_bytes += (guint64) st.st_size;
        }
    }
}

/* One chunk file of the kvtier layout: its size, and with --verify its
 * header, key, place and payload. */
static void
scan_kvtier_chunk (Scan              *scan,
                   Namespace         *ns,
                   int                dir_fd,
                   const char        *shard,
                   const char        *base,
                   const char        *path,
                   const struct stat *st)
{
  guint64 expected = ns->block_size + HEADER_SIZE;
  g_autofree char *detail = NULL;
  struct stat now;
  int reason;
  int fd;

  ns->chunks++;
  ns->bytes += (guint64) st->st_size;
  if (ns->block_size == 0)
    return;   /* namespace.json is missing or wrong: nothing to check against */
  if ((guint64) st->st_size != expected)
    {
      ns->wrong_size++;
      if (!scan->verify)
        {
          detail = g_strdup_printf ("%" G_GUINT64_FORMAT " bytes, a chunk is %" G_GUINT64_FORMAT,
                                    (guint64) st->st_size, expected);
          add_bad (ns, path, (guint64) st->st_size < expected ? BAD_SHORT : BAD_LONG, detail);
          return;
        }
    }
  if (!scan->verify)
    return;

  /* O_NONBLOCK: should a FIFO take the file's place, the open does not wait. */
  fd = openat (dir_fd, base, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    {
      add_bad (ns, path, BAD_UNREADABLE, g_strerror (errno));
      return;
    }
  if (fstat (fd, &now) != 0 || now.st_dev != st->st_dev || now.st_ino != st->st_ino)
    reason = BAD_UNREADABLE, detail = g_strdup ("replaced while inspected");
  else
    reason = verify_chunk (ns, fd, (guint64) now.st_size, shard, base, &detail);
  close (fd);
  if (reason >= 0)
    add_bad (ns, path, reason, detail);
  else
    ns->verified++;
}

/* Files of one directory that holds chunks: chunk files, and temporary
 * files of stores that have not finished (or never will). */
static void
scan_chunk_dir (Scan       *scan,
                Namespace  *ns,
                int         dir_fd,
                const char *dir,
                const char *shard)
{
  g_autoptr(GPtrArray) names = list_dir (scan, dir_fd, dir);

  for (guint i = 0; i < names->len; i++)
    {
      const char *base = g_ptr_array_index (names, i);
      g_autofree char *path = g_build_filename (dir, base, NULL);
      guint8 hash[MAX_HASH_LEN];
      gsize hash_len;
      guint32 group;
      struct stat st;

      if (is_temp (base))
        {
          if (check_entry (scan, dir_fd, base, path, FALSE, &st))
            count_temp (scan, ns, &st);
          continue;
        }
      if (ns->vllm ? !(strlen (base) > 4 && g_str_has_suffix (base, ".bin") &&
                       is_lower_hex (base, strlen (base) - 4))
                   : !parse_chunk_name (base, hash, &hash_len, &group))
        {
          add_ignored (scan, path, IGNORED_UNKNOWN_NAME, NULL);
          continue;
        }
      if (!check_entry (scan, dir_fd, base, path, FALSE, &st))
        continue;
      if (ns->vllm)
        {
          ns->chunks++;
          ns->bytes += (guint64) st.st_size;
        }
      else
        scan_kvtier_chunk (scan, ns, dir_fd, shard, base, path, &st);
    }
}

/* vLLM's "<hex[3:5]>_g<group>" directories. */
static gboolean
is_vllm_group_dir (const char *base)
{
  return strlen (base) > 4 && is_lower_hex (base, 2) && base[2] == '_' && base[3] == 'g' &&
         is_decimal (base + 4);
}

/* ---- layout=slab ---- */

static gboolean
pread_full (int      fd,
            guint8  *buf,
            gsize    len,
            guint64  offset)
{
  gsize done = 0;

  while (done < len)
    {
      ssize_t r = pread (fd, buf + done, len - done, offset + done);

      if (r < 0 && errno == EINTR)
        continue;
      if (r <= 0)
        return FALSE;
      done += (gsize) r;
    }
  return TRUE;
}

/* One slot of a slab file: free (never written: no magic), a chunk, or
 * (with --verify) a bad one, checked as a load checks it; returns the
 * reason it is bad, -1 for a good chunk, -2 for a free slot. */
static int
verify_slot (Namespace *ns,
             int        fd,
             guint64    offset,
             gboolean   verify,
             guint8    *buf)
{
  g_autoptr(XXH3_state_t) state = NULL;
  guint64 payload_len = ns->block_size;
  guint64 left;
  guint32 hash_len;

  if (!pread_full (fd, buf, HEADER_SIZE, offset))
    return BAD_UNREADABLE;
  if (memcmp (buf, "KVTIERFS", 8) != 0)
    return -2;
  if (XXH3_64bits (buf, 4088) != le64 (buf + 4088))
    return BAD_HEADER_CHECKSUM;
  /* a slot's header: the slot flag (bit 0 at 72) */
  if (le32 (buf + 8) != FORMAT_VERSION || le32 (buf + 12) != HEADER_SIZE ||
      (le64 (buf + 72) & 1) == 0)
    return BAD_VERSION;
  if (memcmp (buf + 16, ns->digest, 32) != 0)
    return BAD_NAMESPACE;
  hash_len = le32 (buf + 68);
  if (hash_len == 0 || hash_len > MAX_HASH_LEN)
    return BAD_KEY;
  if (le64 (buf + 48) != payload_len)
    return BAD_LENGTH;
  if (!verify)
    return -1;

  state = XXH3_createState ();
  XXH3_64bits_reset (state);
  {
    guint64 sum = le64 (buf + 56);
    guint64 at = offset + HEADER_SIZE;

    for (left = payload_len; left > 0;)
      {
        gsize want = (gsize) MIN (left, READ_BLOCK);

        if (!pread_full (fd, buf, want, at))
          return BAD_UNREADABLE;
        XXH3_64bits_update (state, buf, want);
        left -= want;
        at += want;
      }
    if (XXH3_64bits_digest (state) != sum)
      return BAD_PAYLOAD_CHECKSUM;
  }
  return -1;
}

/* A slab file: its header (doc/on-disk-format.md), then each slot's. A
 * slot that fails its check is what a load would refuse (and free). */
static void
scan_slab_file (Scan       *scan,
                Namespace  *ns,
                int         fd,
                const char *path,
                guint64     file_size)
{
  g_autofree guint8 *buf = g_malloc (MAX (READ_BLOCK, HEADER_SIZE));
  guint64 slot_size = ns->block_size + HEADER_SIZE;
  guint64 n_slots;
  int bad = -1;

  ns->slab_files++;
  if (!pread_full (fd, buf, HEADER_SIZE, 0))
    bad = file_size < HEADER_SIZE ? BAD_SHORT : BAD_UNREADABLE;
  else if (memcmp (buf, "KVTSLAB1", 8) != 0)
    bad = BAD_MAGIC;
  else if (XXH3_64bits (buf, 4088) != le64 (buf + 4088))
    bad = BAD_HEADER_CHECKSUM;
  else if (le32 (buf + 8) != 1 || le32 (buf + 12) != HEADER_SIZE)
    bad = BAD_VERSION;
  else if (memcmp (buf + 16, ns->digest, 32) != 0)
    bad = BAD_NAMESPACE;
  else if (le64 (buf + 56) != ns->block_size || le64 (buf + 48) != slot_size)
    bad = BAD_LENGTH;
  if (bad >= 0)
    {
      add_bad (ns, path, bad, "slab file header");
      return;
    }
  n_slots = le64 (buf + 64);
  if (n_slots > (file_size - HEADER_SIZE) / slot_size)
    {
      g_autofree char *detail = g_strdup_printf ("%" G_GUINT64_FORMAT " bytes hold fewer than "
                                                 "its %" G_GUINT64_FORMAT " slots",
                                                 file_size, n_slots);

      add_bad (ns, path, BAD_SHORT, detail);
      n_slots = (file_size - HEADER_SIZE) / slot_size;
    }
  ns->slots += n_slots;
  for (guint64 i = 0; i < n_slots; i++)
    {
      guint64 offset = HEADER_SIZE + i * slot_size;
      int reason = verify_slot (ns, fd, offset, scan->verify, buf);

      if (reason == -2)
        ns->free_slots++;
      else if (reason == -1)
        {
          ns->chunks++;
          ns->bytes += ns->block_size;
          if (scan->verify)
            ns->verified++;
        }
      else if (scan->verify || reason == BAD_UNREADABLE)
        {
          g_autofree char *slot_path = g_strdup_printf ("%s@%" G_GUINT64_FORMAT, path, offset);

          add_bad (ns, slot_path, reason, NULL);
        }
      else
        /* a damaged header: the tier takes the slot as free */
        ns->free_slots++;
    }
}

/* A layout=slab namespace: namespace.json and slab-NNNN.kvslab files. */
static void
scan_slab_namespace (Scan      *scan,
                     Namespace *ns,
                     int        ns_fd)
{
  g_autoptr(GPtrArray) names = list_dir (scan, ns_fd, ns->dir);

  for (guint i = 0; i < names->len; i++)
    {
      const char *base = g_ptr_array_index (names, i);
      g_autofree char *path = g_build_filename (ns->dir, base, NULL);
      g_autofree char *number = NULL;
      struct stat st, now;
      int fd;

      if (g_str_equal (base, "namespace.json"))
        continue;
      if (is_temp (base))
        {
          if (check_entry (scan, ns_fd, base, path, FALSE, &st))
            count_temp (scan, ns, &st);
          continue;
        }
      if (g_str_has_prefix (base, "slab-") && g_str_has_suffix (base, ".kvslab"))
        number = g_strndup (base + 5, strlen (base) - 5 - 7);
      if (number == NULL || !is_decimal (number))
        {
          add_ignored (scan, path, IGNORED_UNKNOWN_NAME, NULL);
          continue;
        }
      if (!check_entry (scan, ns_fd, base, path, FALSE, &st))
        continue;
      if (ns->problem != NULL)
        {
          /* the chunk size is unknown: the slots cannot be found */
          ns->slab_files++;
          continue;
        }
      fd = openat (ns_fd, base, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      if (fd < 0)
        {
          add_ignored (scan, path, IGNORED_UNREADABLE, g_strerror (errno));
          continue;
        }
      if (fstat (fd, &now) != 0 || now.st_ino != st.st_ino || now.st_dev != st.st_dev)
        add_bad (ns, path, BAD_UNREADABLE, "replaced while inspected");
      else
        scan_slab_file (scan, ns, fd, path, (guint64) now.st_size);
      close (fd);
    }
}

/* The directories of a namespace: the 256 shards of the kvtier layout,
 * or vLLM's two levels, and the spare directory. Any other name, and
 * anything deeper, is reported and left unread. */
static void
scan_namespace (Scan      *scan,
                Namespace *ns,
                int        ns_fd)
{
  g_autoptr(GPtrArray) names = NULL;

  if (ns->slab)
    {
      scan_slab_namespace (scan, ns, ns_fd);
      return;
    }
  names = list_dir (scan, ns_fd, ns->dir);
  for (guint i = 0; i < names->len; i++)
    {
      const char *base = g_ptr_array_index (names, i);
      g_autofree char *path = g_build_filename (ns->dir, base, NULL);
      struct stat st;
      int fd;

      if (!ns->vllm && g_str_equal (base, "namespace.json"))
        continue;   /* read by open_namespace() */
      if (is_temp (base))
        {
          /* an identity file being written */
          if (check_entry (scan, ns_fd, base, path, FALSE, &st))
            count_temp (scan, ns, &st);
          continue;
        }
      if (!g_str_equal (base, ".kvtier-spare") &&
          !(ns->vllm ? is_hex_name (base, 3) : is_hex_name (base, 2)))
        {
          add_ignored (scan, path, IGNORED_UNKNOWN_NAME, NULL);
          continue;
        }
      if (!check_entry (scan, ns_fd, base, path, TRUE, &st) ||
          (fd = open_subdir (scan, ns_fd, base, path, &st)) < 0)
        continue;

      if (g_str_equal (base, ".kvtier-spare"))
        scan_spares (scan, ns, fd, path);
      else if (!ns->vllm)
        scan_chunk_dir (scan, ns, fd, path, base);
      else
        {
          g_autoptr(GPtrArray) groups = list_dir (scan, fd, path);

          for (guint g = 0; g < groups->len; g++)
            {
              const char *group = g_ptr_array_index (groups, g);
              g_autofree char *group_path = g_build_filename (path, group, NULL);
              struct stat gst;
              int group_fd;

              if (!is_vllm_group_dir (group))
                {
                  add_ignored (scan, group_path, IGNORED_UNKNOWN_NAME, NULL);
                  continue;
                }
              if (!check_entry (scan, fd, group, group_path, TRUE, &gst) ||
                  (group_fd = open_subdir (scan, fd, group, group_path, &gst)) < 0)
                continue;
              scan_chunk_dir (scan, ns, group_fd, group_path, NULL);
              close (group_fd);
            }
        }
      close (fd);
    }
}

/* vLLM keeps chunks in <model>_<digest>_r<rank> and its identity in
 * <model>_<digest>, the digest being 12 hex digits. */
static gboolean
is_vllm_identity_dir (const char *base,
                      gsize       len)
{
  return len > 13 && base[len - 13] == '_' && is_lower_hex (base + len - 12, 12);
}

static gboolean
is_vllm_chunk_dir (const char *base)
{
  const char *r = strrchr (base, '_');

  if (r == NULL || r[1] != 'r' || !is_decimal (r + 2))
    return FALSE;
  return is_vllm_identity_dir (base, (gsize) (r - base));
}

/* Reads and checks namespace.json, relative to the namespace's
 * directory; on failure the namespace's problem says why. */
static void
read_namespace_json (Scan      *scan,
                     Namespace *ns,
                     int        ns_fd,
                     const char *base)
{
  g_autofree char *path = g_build_filename (ns->dir, "namespace.json", NULL);
  g_autofree char *data = NULL;
  g_autofree char *name = NULL;
  g_autofree char *expected_dir = NULL;
  g_autoptr(GError) error = NULL;
  guint64 block_size = 0;
  guint8 digest[32];
  struct stat st;
  gsize len = 0;
  int fd;

  fd = openat (ns_fd, "namespace.json", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    {
      if (errno == ENOENT)
        ns->problem = g_strdup_printf ("%s is missing", path);
      else if (errno == ELOOP)
        ns->problem = g_strdup_printf ("%s is a symbolic link (not followed)", path);
      else
        ns->problem = g_strdup_printf ("%s: %s", path, g_strerror (errno));
      return;
    }
  if (fstat (fd, &st) != 0 || !S_ISREG (st.st_mode))
    ns->problem = g_strdup_printf ("%s is not a regular file", path);
  else if (st.st_uid != scan->owner)
    ns->problem = g_strdup_printf ("%s is owned by uid %u, the root's owner is uid %u", path,
                                   (guint) st.st_uid, (guint) scan->owner);
  else if ((guint64) st.st_size > TOOL_NAMESPACE_JSON_MAX_BYTES)
    ns->problem = g_strdup_printf ("%s: %" G_GUINT64_FORMAT " bytes, more than the %d allowed",
                                   path, (guint64) st.st_size, TOOL_NAMESPACE_JSON_MAX_BYTES);
  else
    {
      data = g_malloc (TOOL_NAMESPACE_JSON_MAX_BYTES + 1);
      if (!read_full (fd, (guint8 *) data, TOOL_NAMESPACE_JSON_MAX_BYTES + 1, &len))
        ns->problem = g_strdup_printf ("%s: %s", path, g_strerror (errno));
    }
  close (fd);
  if (ns->problem != NULL)
    return;

  if (!tool_namespace_parse (data, len, path, &name, &block_size, &error))
    {
      ns->problem = g_strdup (error->message);
      return;
    }
  /* The directory's name is the digest of what the file says. */
  tool_namespace_digest (name, block_size, digest);
  expected_dir = g_strdup_printf ("%s-%02x%02x%02x%02x%02x%02x%02x%02x",
                                  ns->slab ? "kvslab" : "kvtier", digest[0], digest[1],
                                  digest[2], digest[3], digest[4], digest[5], digest[6], digest[7]);
  if (!g_str_equal (base, expected_dir))
    {
      ns->problem = g_strdup_printf ("%s does not match its directory: its namespace and"
                                     " block size belong in %s", path, expected_dir);
      return;
    }
  ns->name = g_steal_pointer (&name);
  ns->block_size = block_size;
  memcpy (ns->digest, digest, sizeof digest);
}

/* vLLM's identity: the model name of <model>_<digest>/config.json, when
 * that can be read. */
static char *
read_vllm_model (Scan       *scan,
                 int         root_fd,
                 const char *identity_dir)
{
  g_autoptr(JsonNode) node = NULL;
  g_autofree char *data = NULL;
  JsonNode *model;
  struct stat st;
  gsize len = 0;
  int dir_fd, fd;

  dir_fd = openat (root_fd, identity_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir_fd < 0)
    return NULL;
  fd = openat (dir_fd, "config.json", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  close (dir_fd);
  if (fd < 0)
    return NULL;
  if (fstat (fd, &st) == 0 && S_ISREG (st.st_mode) && st.st_uid == scan->owner &&
      (guint64) st.st_size <= TOOL_NAMESPACE_JSON_MAX_BYTES)
    {
      data = g_malloc (TOOL_NAMESPACE_JSON_MAX_BYTES + 1);
      if (!read_full (fd, (guint8 *) data, TOOL_NAMESPACE_JSON_MAX_BYTES + 1, &len))
        g_clear_pointer (&data, g_free);
    }
  close (fd);
  if (data == NULL)
    return NULL;
  node = tool_json_parse (data, len, TOOL_NAMESPACE_JSON_MAX_BYTES, NULL);
  if (node == NULL || !JSON_NODE_HOLDS_OBJECT (node))
    return NULL;
  model = json_object_get_member (json_node_get_object (node), "model_name");
  if (model == NULL || !JSON_NODE_HOLDS_VALUE (model) ||
      json_node_get_value_type (model) != G_TYPE_STRING)
    return NULL;
  return g_strdup (json_node_get_string (model));
}

/* Every namespace under one root, and whatever else lies there. */
static gboolean
scan_root (Scan       *scan,
           const char *root,
           GPtrArray  *namespaces,
           GError    **error)
{
  g_autoptr(GPtrArray) names = NULL;
  struct stat root_st;
  int root_fd;

  /* The root itself is the user's choice; everything below it is opened
   * relative to it, never through a symbolic link. */
  root_fd = open (root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0 || fstat (root_fd, &root_st) != 0)
    {
      int errsv = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errsv),
                   "Cannot open the root %s: %s", root, g_strerror (errsv));
      if (root_fd >= 0)
        close (root_fd);
      return FALSE;
    }
  scan->owner = root_st.st_uid;
  names = list_dir (scan, root_fd, root);

  for (guint i = 0; i < names->len; i++)
    {
      const char *base = g_ptr_array_index (names, i);
      g_autofree char *path = g_build_filename (root, base, NULL);
      gboolean kvtier = g_str_has_prefix (base, "kvtier-") && is_hex_name (base + 7, 16);
      gboolean slab = g_str_has_prefix (base, "kvslab-") && is_hex_name (base + 7, 16);
      gboolean vllm = !kvtier && !slab && is_vllm_chunk_dir (base);
      Namespace *ns;
      struct stat st;
      int fd;

      if (!kvtier && !vllm && !slab)
        {
          /* vLLM's identity directories are read with their chunk
           * directories; lost+found is the file system's. */
          if (!is_vllm_identity_dir (base, strlen (base)) && !g_str_equal (base, "lost+found"))
            add_ignored (scan, path, IGNORED_UNKNOWN_NAME, NULL);
          continue;
        }
      if (!check_entry (scan, root_fd, base, path, TRUE, &st) ||
          (fd = open_subdir (scan, root_fd, base, path, &st)) < 0)
        continue;

      ns = g_new0 (Namespace, 1);
      ns->dir = g_steal_pointer (&path);
      ns->vllm = vllm;
      ns->slab = slab;
      ns->bad_files = g_ptr_array_new_with_free_func (g_free);
      if (vllm)
        {
          g_autofree char *identity = g_strndup (base, (gsize) (strrchr (base, '_') - base));

          ns->name = read_vllm_model (scan, root_fd, identity);
          if (ns->name == NULL)
            ns->name = g_strdup (base);
        }
      else
        read_namespace_json (scan, ns, fd, base);
      scan_namespace (scan, ns, fd);
      close (fd);
      g_ptr_array_add (namespaces, ns);
    }
  close (root_fd);
  return TRUE;
}


static void
print_namespace (const Namespace *ns,
                 gboolean         verify)
{
  g_autofree char *bytes = tool_format_size (ns->bytes);
  g_autofree char *block = tool_format_size (ns->block_size);
  g_autofree char *temp = tool_format_size (ns->temp_bytes);
  g_autofree char *spare = tool_format_size (ns->spare_bytes);
  guint64 n_bad = 0;

  for (int r = 0; r < N_BAD; r++)
    n_bad += ns->bad[r];

  if (ns->vllm)
    printf ("  %s  (vLLM layout, model %s)\n", ns->dir, ns->name);
  else if (ns->problem != NULL)
    printf ("  %s  (%s layout, namespace unknown)\n", ns->dir, ns->slab ? "slab" : "kvtier");
  else
    printf ("  %s  (%s layout, namespace \"%s\", chunks of %s)\n", ns->dir,
            ns->slab ? "slab" : "kvtier", ns->name, block);
  if (ns->slab)
    printf ("    %-14s %" G_GUINT64_FORMAT " in %" G_GUINT64_FORMAT " slab files, %"
            G_GUINT64_FORMAT " free\n", "slots", ns->slots, ns->slab_files, ns->free_slots);
  if (ns->problem != NULL)
    printf ("    %-14s %s\n", "problem", ns->problem);
  printf ("    %-14s %" G_GUINT64_FORMAT " (%s)%s\n", "chunks", ns->chunks, bytes,
          ns->problem != NULL && ns->chunks > 0 ? ", unchecked: the chunk size is unknown" : "");
  if (ns->wrong_size > 0)
    printf ("    %-14s %" G_GUINT64_FORMAT "\n", "wrong size", ns->wrong_size);
  if (verify && ns->vllm)
    printf ("    %-14s not possible: vLLM files have no header or checksum\n", "verified");
  else if (verify && ns->problem != NULL)
    printf ("    %-14s not possible: namespace.json cannot be trusted\n", "verified");
  else if (verify)
    {
      printf ("    %-14s %" G_GUINT64_FORMAT " ok, %" G_GUINT64_FORMAT " bad\n", "verified",
              ns->verified, n_bad);
      for (int r = 0; r < N_BAD; r++)
        if (ns->bad[r] > 0)
          printf ("      %-28s %" G_GUINT64_FORMAT "\n", bad_names[r], ns->bad[r]);
    }
  printf ("    %-14s %" G_GUINT64_FORMAT " (%s), %" G_GUINT64_FORMAT " stale (older than %d min)\n",
          "temp files", ns->temp_files, temp, ns->stale_temp_files, STALE_TEMP_S / 60);
  if (ns->spare_files > 0)
    printf ("    %-14s %" G_GUINT64_FORMAT " (%s), written ahead for chunks (preallocate)\n",
            "spare files", ns->spare_files, spare);
  for (guint i = 0; i < ns->bad_files->len; i++)
    printf ("    bad: %s\n", (const char *) g_ptr_array_index (ns->bad_files, i));
}

static void
add_string_or_null (JsonBuilder *builder,
                    const char  *name,
                    const char  *value)
{
  json_builder_set_member_name (builder, name);
  if (value != NULL)
    json_builder_add_string_value (builder, value);
  else
    json_builder_add_null_value (builder);
}

static JsonNode *
namespace_json (const Namespace *ns)
{
  g_autoptr(JsonBuilder) builder = json_builder_new ();

  json_builder_begin_object (builder);
  tool_json_add_string (builder, "directory", ns->dir);
  tool_json_add_string (builder, "layout", ns->vllm ? "vllm" : ns->slab ? "slab" : "kvtier");
  add_string_or_null (builder, "namespace", ns->name);
  add_string_or_null (builder, "problem", ns->problem);
  tool_json_add_int (builder, "chunk_bytes", (gint64) ns->block_size);
  tool_json_add_int (builder, "chunks", (gint64) ns->chunks);
  tool_json_add_int (builder, "bytes", (gint64) ns->bytes);
  tool_json_add_int (builder, "wrong_size", (gint64) ns->wrong_size);
  tool_json_add_int (builder, "verified", (gint64) ns->verified);
  json_builder_set_member_name (builder, "bad");
  json_builder_begin_object (builder);
  for (int r = 0; r < N_BAD; r++)
    tool_json_add_int (builder, bad_names[r], (gint64) ns->bad[r]);
  json_builder_end_object (builder);
  json_builder_set_member_name (builder, "bad_files");
  json_builder_begin_array (builder);
  for (guint i = 0; i < ns->bad_files->len; i++)
    json_builder_add_string_value (builder, g_ptr_array_index (ns->bad_files, i));
  json_builder_end_array (builder);
  tool_json_add_int (builder, "temp_files", (gint64) ns->temp_files);
  tool_json_add_int (builder, "stale_temp_files", (gint64) ns->stale_temp_files);
  tool_json_add_int (builder, "spare_files", (gint64) ns->spare_files);
  tool_json_add_int (builder, "spare_bytes", (gint64) ns->spare_bytes);
  if (ns->slab)
    {
      tool_json_add_int (builder, "slab_files", (gint64) ns->slab_files);
      tool_json_add_int (builder, "slots", (gint64) ns->slots);
      tool_json_add_int (builder, "free_slots", (gint64) ns->free_slots);
    }
  json_builder_end_object (builder);
  return json_builder_get_root (builder);
}

static guint64
count_ignored (const Scan *scan)
{
  guint64 n = 0;

  for (int r = 0; r < N_IGNORED; r++)
    n += scan->ignored[r];
  return n;
}

static void
print_ignored (const Scan *scan)
{
  guint64 n = count_ignored (scan);

  if (n == 0)
    return;
  printf ("ignored entries: %" G_GUINT64_FORMAT " (not read: the tier writes none of them)\n", n);
  for (int r = 0; r < N_IGNORED; r++)
    if (scan->ignored[r] > 0)
      printf ("  %-30s %" G_GUINT64_FORMAT "\n", ignored_names[r], scan->ignored[r]);
  for (guint i = 0; i < scan->ignored_entries->len; i++)
    printf ("  ignored: %s\n", (const char *) g_ptr_array_index (scan->ignored_entries, i));
}

static void
add_ignored_json (JsonBuilder *builder,
                  const Scan  *scan)
{
  json_builder_set_member_name (builder, "ignored");
  json_builder_begin_object (builder);
  tool_json_add_int (builder, "count", (gint64) count_ignored (scan));
  for (int r = 0; r < N_IGNORED; r++)
    tool_json_add_int (builder, ignored_names[r], (gint64) scan->ignored[r]);
  json_builder_set_member_name (builder, "entries");
  json_builder_begin_array (builder);
  for (guint i = 0; i < scan->ignored_entries->len; i++)
    json_builder_add_string_value (builder, g_ptr_array_index (scan->ignored_entries, i));
  json_builder_end_array (builder);
  json_builder_end_object (builder);
}

int
tool_inspect (int    argc,
              char **argv)
{
  g_autoptr(GOptionContext) context = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) namespaces = g_ptr_array_new_with_free_func ((GDestroyNotify) namespace_free);
  g_autoptr(GPtrArray) ignored_entries = g_ptr_array_new_with_free_func (g_free);
  g_auto(GStrv) roots = NULL;
  gboolean verify = FALSE;
  gboolean as_json = FALSE;
  guint64 total_bad = 0;
  guint n_problems = 0;
  Scan scan = { 0 };
  GOptionEntry entries[] = {
    { "verify", 0, 0, G_OPTION_ARG_NONE, &verify,
      "Read every chunk and check its header, key, place and payload checksum", NULL },
    { "json", 0, 0, G_OPTION_ARG_NONE, &as_json, "Print the results as JSON", NULL },
    { NULL }
  };

  context = g_option_context_new ("fs ROOT - what an fs tier holds on disk");
  g_option_context_set_summary (context,
    "Lists the namespaces under ROOT (a comma-separated list for a multi-root tier) with\n"
    "their chunk count and bytes and the temporary files left by interrupted stores\n"
    "(stale when older than an hour). --verify checks every chunk as a load would\n"
    "(doc/on-disk-format.md). Nothing below ROOT is followed through a symbolic link;\n"
    "entries the tier does not write (other names, links, special files, files of\n"
    "another owner than ROOT's, files any user may write) are listed and left unread. Exits with 1 when a chunk\n"
    "is bad, a namespace.json is missing or invalid, an entry was left unread, or ROOT\n"
    "cannot be read.");
  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    return tool_usage_error (context, "%s", error->message);
  if (argc < 2)
    return tool_usage_error (context, "missing tier type (inspect fs ROOT)");
  if (!g_str_equal (argv[1], "fs"))
    return tool_usage_error (context, "cannot inspect tier type '%s': only fs", argv[1]);
  if (argc < 3)
    return tool_usage_error (context, "missing ROOT (inspect fs ROOT)");
  if (argc > 3)
    return tool_usage_error (context, "unexpected argument '%s'", argv[3]);

  scan.verify = verify;
  scan.now_s = g_get_real_time () / G_USEC_PER_SEC;
  scan.ignored_entries = ignored_entries;
  roots = g_strsplit (argv[2], ",", -1);
  for (guint r = 0; roots[r] != NULL; r++)
    if (!scan_root (&scan, roots[r], namespaces, &error))
      {
        g_printerr ("kvtier: %s\n", error->message);
        return TOOL_EXIT_FAILURE;
      }

  for (guint i = 0; i < namespaces->len; i++)
    {
      Namespace *ns = g_ptr_array_index (namespaces, i);

      for (int r = 0; r < N_BAD; r++)
        total_bad += ns->bad[r];
      n_problems += ns->problem != NULL;
    }

  if (as_json)
    {
      g_autoptr(JsonBuilder) builder = json_builder_new ();
      g_autoptr(JsonGenerator) generator = json_generator_new ();
      g_autoptr(JsonNode) root = NULL;
      g_autofree char *text = NULL;

      json_builder_begin_object (builder);
      tool_json_add_string (builder, "root", argv[2]);
      json_builder_set_member_name (builder, "verified");
      json_builder_add_boolean_value (builder, verify);
      json_builder_set_member_name (builder, "namespaces");
      json_builder_begin_array (builder);
      for (guint i = 0; i < namespaces->len; i++)
        json_builder_add_value (builder, namespace_json (g_ptr_array_index (namespaces, i)));
      json_builder_end_array (builder);
      add_ignored_json (builder, &scan);
      json_builder_end_object (builder);
      root = json_builder_get_root (builder);
      json_generator_set_root (generator, root);
      json_generator_set_pretty (generator, TRUE);
      text = json_generator_to_data (generator, NULL);
      printf ("%s\n", text);
    }
  else
    {
      printf ("%s: %u namespace%s\n", argv[2], namespaces->len, namespaces->len == 1 ? "" : "s");
      for (guint i = 0; i < namespaces->len; i++)
        print_namespace (g_ptr_array_index (namespaces, i), verify);
      print_ignored (&scan);
    }

  return total_bad > 0 || n_problems > 0 || count_ignored (&scan) > 0 ? TOOL_EXIT_FAILURE
                                                                      : TOOL_EXIT_OK;
}
