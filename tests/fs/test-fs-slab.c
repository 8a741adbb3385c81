/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <fcntl.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <glib/gstdio.h>

#include "test-chunk-data.h"
#include "test-dir.h"
#include "test-fs-tier.h"
#include "test-tier-job.h"

#include "kv-fs-slab.h"

/*
 * layout=slab: chunks in the slots of preallocated slab files. Round trips
 * on every engine with O_DIRECT on and off, several roots, eviction when
 * the slabs are full (never of a slot being read), damaged slots (a bit
 * flipped in a header or a payload, one slot copied over another), warm
 * restart from the slot headers (the newer of two copies of a key wins),
 * configuration errors and hostile slab files. The tests that do not
 * depend on where the root lies run again on a memory-backed root (a
 * directory in /dev/shm), where the slab files are mapped and records
 * copied, loads checked as they are copied.
 */

/* Where the memory-backed variants make their roots. */
#define MEMORY_ROOT_PARENT "/dev/shm"

#define SLOT_BYTES ((guint64) FS_TEST_SLOT + KV_CHUNK_HEADER_SIZE)

typedef struct
{
  KvHostBuffer *buffer;
  char         *root;
  gboolean      memory;   /* the root is on a tmpfs */
  KvRequest    *request;
  guint64       next_id;
} Fixture;

static void
setup (Fixture       *f,
       gconstpointer  data)
{
  g_autoptr(GError) error = NULL;

  f->buffer = kv_host_buffer_new (16, FS_TEST_SLOT, &error);
  g_assert_no_error (error);
  f->root = test_dir_make ("kvtier-fs-test");
  f->request = kv_request_new ("slab", NULL);
  f->next_id = 1;
}

/* The same fixture with its root in a private directory of /dev/shm
 * (the test main() adds these variants only where that is a tmpfs). */
static void
setup_memory (Fixture       *f,
              gconstpointer  data)
{
  g_autofree char *template = g_build_filename (MEMORY_ROOT_PARENT, "kvtier-fs-test-XXXXXX", NULL);

  setup (f, data);
  test_dir_remove (f->root);
  g_free (f->root);
  f->root = g_mkdtemp (g_steal_pointer (&template));
  g_assert_nonnull (f->root);
  f->memory = TRUE;
}

static gboolean
memory_root_available (void)
{
  struct statfs fs;

  return statfs (MEMORY_ROOT_PARENT, &fs) == 0 && fs.f_type == TMPFS_MAGIC &&
         access (MEMORY_ROOT_PARENT, W_OK) == 0;
}

/* Whether this process maps the file at @path (a line of
 * /proc/self/maps names it). */
static gboolean
file_is_mapped (const char *path)
{
  g_autofree char *maps = NULL;
  g_auto(GStrv) lines = NULL;

  g_assert_true (g_file_get_contents ("/proc/self/maps", &maps, NULL, NULL));
  lines = g_strsplit (maps, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    if (g_str_has_suffix (lines[i], path))
      return TRUE;
  return FALSE;
}

static void
teardown (Fixture       *f,
          gconstpointer  data)
{
  g_clear_object (&f->request);
  g_clear_object (&f->buffer);
  test_dir_remove (f->root);
  g_free (f->root);
}

static void
close_tier (KvFsTier *tier)
{
  fs_test_shutdown (tier);
  g_object_add_weak_pointer (G_OBJECT (tier), (gpointer *) &tier);
  g_object_unref (tier);
  g_assert_null (tier);
}

/* Stores keys [first, first + n) from slots 0.. (n <= 16); returns how
 * many keys succeeded per the result. */
static gboolean
store_keys (Fixture  *f,
            KvFsTier *tier,
            guint     first,
            guint     n)
{
  g_autoptr(KvJobResult) result = NULL;
  KvKey *keys[16];
  guint32 slots[16];
  gboolean ok;

  g_assert_cmpuint (n, <=, 16);
  for (guint i = 0; i < n; i++)
    {
      keys[i] = test_chunk_key (first + i);
      slots[i] = i;
      test_chunk_fill_slot (f->buffer, i, first + i);
    }
  result = test_tier_run_job (tier, f->next_id++, FALSE, keys, slots, n, f->request);
  ok = kv_job_result_get_success (result);
  for (guint i = 0; i < n; i++)
    kv_key_unref (keys[i]);
  return ok;
}

/* Loads key @i into slot @slot (cleared first); TRUE if the job
 * succeeded, and then the bytes must be the key's. */
static gboolean
load_key (Fixture  *f,
          KvFsTier *tier,
          guint     i,
          guint32   slot)
{
  g_autoptr(KvKey) key = test_chunk_key (i);
  g_autoptr(KvJobResult) result = NULL;
  g_autoptr(KvRequest) request = kv_request_new ("load", NULL);

  memset (kv_host_buffer_peek_slot (f->buffer, slot), 0xa5, FS_TEST_SLOT);
  result = test_tier_run_job (tier, f->next_id++, TRUE, &key, &slot, 1, request);
  if (!kv_job_result_get_success (result))
    return FALSE;
  g_assert_true (test_chunk_check (kv_host_buffer_peek_slot (f->buffer, slot), FS_TEST_SLOT, i));
  return TRUE;
}

static KvLookupResult
lookup (KvFsTier *tier,
        guint     i)
{
  g_autoptr(KvKey) key = test_chunk_key (i);
  g_autoptr(KvRequest) request = kv_request_new ("lookup", NULL);

  return kv_secondary_tier_lookup (KV_SECONDARY_TIER (tier), key, request);
}

static char *
slab_dir (KvFsTier   *tier,
          const char *root)
{
  g_autoptr(GDir) dir = g_dir_open (root, 0, NULL);
  const char *name;

  while (dir != NULL && (name = g_dir_read_name (dir)) != NULL)
    if (g_str_has_prefix (name, "kvslab-"))
      return g_build_filename (root, name, NULL);
  return NULL;
}

/* Where key @i's slot is, from the tier. */
static char *
locate (KvFsTier *tier,
        guint     i,
        guint64  *offset)
{
  g_autoptr(KvKey) key = test_chunk_key (i);
  char *path = NULL;

  g_assert_true (kv_fs_tier_get_slab_location (tier, key, &path, offset));
  return path;
}

static void
patch_file (const char   *path,
            guint64       offset,
            const guint8 *bytes,
            gsize         len)
{
  int fd = open (path, O_WRONLY);

  g_assert_cmpint (fd, >=, 0);
  g_assert_cmpint (pwrite (fd, bytes, len, offset), ==, (gssize) len);
  close (fd);
}

static guint8 *
read_file_at (const char *path,
              guint64     offset,
              gsize       len)
{
  guint8 *buf = g_malloc (len);
  int fd = open (path, O_RDONLY);

  g_assert_cmpint (fd, >=, 0);
  g_assert_cmpint (pread (fd, buf, len, offset), ==, (gssize) len);
  close (fd);
  return buf;
}

static void
flip_byte (const char *path,
           guint64     offset)
{
  g_autofree guint8 *b = read_file_at (path, offset, 1);

  b[0] ^= 0x10;
  patch_file (path, offset, b, 1);
}

/* ---- the format ---------------------------------------------------------- */

/* A slot header parses back to its key and sequence number; any byte
 * changed under the header checksum, a chunk file's header (no slot flag),
 * another namespace or length are refused. A slab header likewise. */
static void
test_format (void)
{
  g_autoptr(KvKey) key = test_chunk_key (42);
  g_autoptr(KvKey) parsed = NULL;
  guint8 ns[KV_CHUNK_NAMESPACE_DIGEST_LEN];
  guint8 other_ns[KV_CHUNK_NAMESPACE_DIGEST_LEN];
  guint8 header[KV_CHUNK_HEADER_SIZE];
  guint8 copy[KV_CHUNK_HEADER_SIZE];
  g_autofree guint8 *payload = g_malloc (FS_TEST_SLOT);
  guint64 sequence = 0, checksum = 0, payload_len = 0, n_slots = 0;
  guint8 got_ns[KV_CHUNK_NAMESPACE_DIGEST_LEN];

  kv_chunk_namespace_digest ("default", FS_TEST_SLOT, ns);
  kv_chunk_namespace_digest ("other", FS_TEST_SLOT, other_ns);
  test_chunk_fill (payload, FS_TEST_SLOT, 42);
  kv_chunk_slot_header_encode (header, ns, key, FS_TEST_SLOT,
                               kv_chunk_checksum (payload, FS_TEST_SLOT), 123, 0x0102030405060708);
  g_assert_cmpint (kv_chunk_slot_header_parse (header, ns, FS_TEST_SLOT, &parsed, &sequence,
                                               &checksum), ==, KV_CHUNK_CHECK_OK);
  g_assert_true (kv_key_equal (parsed, key));
  g_assert_cmpuint (sequence, ==, 0x0102030405060708);
  g_assert_cmpuint (kv_chunk_slot_header_get_sequence (header), ==, sequence);
  g_assert_cmpuint (checksum, ==, kv_chunk_checksum (payload, FS_TEST_SLOT));
  /* a slot's header is a chunk header too, for readers of chunk files */
  g_assert_cmpint (kv_chunk_check (header, KV_CHUNK_HEADER_SIZE, payload, FS_TEST_SLOT,
                                   FS_TEST_SLOT, ns, key, TRUE), ==, KV_CHUNK_CHECK_OK);

  g_assert_cmpint (kv_chunk_slot_header_parse (header, other_ns, FS_TEST_SLOT, NULL, NULL, NULL),
                   ==, KV_CHUNK_CHECK_WRONG_NAMESPACE);
  g_assert_cmpint (kv_chunk_slot_header_parse (header, ns, FS_TEST_SLOT * 2, NULL, NULL, NULL),
                   ==, KV_CHUNK_CHECK_WRONG_LENGTH);
  for (guint i = 0; i < KV_CHUNK_HEADER_SIZE; i += 7)
    {
      memcpy (copy, header, sizeof copy);
      copy[i] ^= 0x01;
      g_assert_cmpint (kv_chunk_slot_header_parse (copy, ns, FS_TEST_SLOT, NULL, NULL, NULL), !=,
                       KV_CHUNK_CHECK_OK);
    }
  /* a chunk file's header (flags 0) is no slot's */
  kv_chunk_header_encode (copy, ns, key, payload, FS_TEST_SLOT, 123);
  g_assert_cmpint (kv_chunk_slot_header_parse (copy, ns, FS_TEST_SLOT, NULL, NULL, NULL), ==,
                   KV_CHUNK_CHECK_BAD_VERSION);
  memset (copy, 0, sizeof copy);
  g_assert_cmpint (kv_chunk_slot_header_parse (copy, ns, FS_TEST_SLOT, NULL, NULL, NULL), ==,
                   KV_CHUNK_CHECK_BAD_MAGIC);

  kv_chunk_slab_header_encode (header, ns, FS_TEST_SLOT, 77, 5);
  g_assert_true (kv_chunk_slab_header_parse (header, got_ns, &payload_len, &n_slots));
  g_assert_cmpmem (got_ns, sizeof got_ns, ns, sizeof ns);
  g_assert_cmpuint (payload_len, ==, FS_TEST_SLOT);
  g_assert_cmpuint (n_slots, ==, 77);
  for (guint i = 0; i < KV_SLAB_HEADER_SIZE; i += 5)
    {
      memcpy (copy, header, sizeof copy);
      copy[i] ^= 0x80;
      g_assert_false (kv_chunk_slab_header_parse (copy, NULL, NULL, NULL));
    }
  g_assert_cmpuint (kv_chunk_slab_slot_offset (FS_TEST_SLOT, 3), ==, 4096 + 3 * SLOT_BYTES);
}

/* ---- round trips -------------------------------------------------------- */

/* Stores and loads byte-exact; the slab files are preallocated whole and
 * hold every chunk (no file per chunk); a second store of a key skips it. */
static void
test_round_trip (Fixture       *f,
                 gconstpointer  data)
{
  const FsVariant *v = data;
  KvFsTier *tier = fs_test_tier_new (f->buffer, f->root, v, NULL);
  g_autofree char *dir = slab_dir (tier, f->root);
  g_autofree char *slab0 = g_build_filename (dir, "slab-0000.kvslab", NULL);
  GStatBuf st;

  g_assert_nonnull (dir);
  /* 64 slots in files of 16 */
  g_assert_cmpuint (test_dir_count_files (dir, ".kvslab"), ==, 4);
  g_assert_cmpint (g_stat (slab0, &st), ==, 0);
  g_assert_cmpuint (st.st_size, ==, KV_SLAB_HEADER_SIZE + 16 * SLOT_BYTES);
  g_assert_cmpuint (st.st_mode & 0777, ==, 0600);
  /* preallocated: the blocks are there before any store */
  g_assert_cmpuint ((guint64) st.st_blocks * 512, >=, 16 * SLOT_BYTES);
  /* mapped on a memory-backed root, and there alone */
  g_assert_cmpint (file_is_mapped (slab0), ==, f->memory);

  g_assert_true (store_keys (f, tier, 0, 16));
  g_assert_true (store_keys (f, tier, 16, 16));
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier), ==, 32);
  g_assert_cmpuint (kv_fs_tier_get_used_bytes (tier), ==, 32 * SLOT_BYTES);
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_STORED_CHUNKS), ==, 32);
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_BYTES_WRITTEN), ==,
                    32 * FS_TEST_SLOT);
  /* nothing but the slab files and namespace.json */
  g_assert_cmpuint (test_dir_count_files (f->root, NULL), ==, 5);

  for (guint i = 0; i < 32; i++)
    {
      g_assert_cmpint (lookup (tier, i), ==, KV_LOOKUP_RESULT_HIT);
      g_assert_true (load_key (f, tier, i, (i * 7) % 16));
    }
  g_assert_cmpint (lookup (tier, 99), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_false (load_key (f, tier, 99, 0));

  g_assert_true (store_keys (f, tier, 8, 4));
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_SKIPPED_CHUNKS), ==, 4);
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_LOADED_CHUNKS), ==, 32);

  /* the slot header: a chunk header with the slot flag, the sequence
   * number, the key */
  {
    guint64 offset = 0;
    g_autofree char *path = locate (tier, 3, &offset);
    g_autofree guint8 *header = read_file_at (path, offset, KV_CHUNK_HEADER_SIZE);
    g_autofree guint8 *payload = read_file_at (path, offset + KV_CHUNK_HEADER_SIZE, FS_TEST_SLOT);
    g_autoptr(KvKey) expected = test_chunk_key (3);
    KvKey *key = NULL;
    guint64 sequence = 0;
    guint64 checksum = 0;
    guint8 ns[KV_CHUNK_NAMESPACE_DIGEST_LEN];

    g_assert_cmpuint ((offset - KV_SLAB_HEADER_SIZE) % SLOT_BYTES, ==, 0);
    kv_chunk_namespace_digest ("default", FS_TEST_SLOT, ns);
    g_assert_cmpint (kv_chunk_slot_header_parse (header, ns, FS_TEST_SLOT, &key, &sequence,
                                                 &checksum), ==, KV_CHUNK_CHECK_OK);
    g_assert_true (kv_key_equal (key, expected));
    g_assert_cmpuint (sequence, >, 0);
    g_assert_cmpuint (checksum, ==, kv_chunk_checksum (payload, FS_TEST_SLOT));
    g_assert_true (test_chunk_check (payload, FS_TEST_SLOT, 3));
    kv_key_unref (key);
  }
  close_tier (tier);
}

/* The payload checksum in a slot header of a slot in @tier of key @i. */
static guint64
slot_header_checksum (KvFsTier *tier,
                      guint     i)
{
  guint64 offset = 0, sequence = 0, checksum = 0;
  g_autofree char *path = locate (tier, i, &offset);
  g_autofree guint8 *header = read_file_at (path, offset, KV_CHUNK_HEADER_SIZE);
  guint8 ns[KV_CHUNK_NAMESPACE_DIGEST_LEN];
  KvKey *key = NULL;

  kv_chunk_namespace_digest ("default", FS_TEST_SLOT, ns);
  g_assert_cmpint (kv_chunk_slot_header_parse (header, ns, FS_TEST_SLOT, &key, &sequence,
                                               &checksum), ==, KV_CHUNK_CHECK_OK);
  kv_key_unref (key);
  return checksum;
}

/* A store writes the checksum its primary slot carries into the slot
 * header instead of reading the payload for it: a deliberately wrong one
 * lands there as it is (hashing the payload would have written the right
 * one) and its load fails; a right one loads, and the slot it is loaded
 * into carries it on. A slot without one gets the payload's. */
static void
test_carried_checksum (Fixture       *f,
                       gconstpointer  data)
{
  KvFsTier *tier = fs_test_tier_new (f->buffer, f->root, data, NULL);
  guint64 right, wrong, carried = 0;

  for (guint i = 0; i < 3; i++)
    test_chunk_fill_slot (f->buffer, i, 40 + i);
  right = kv_chunk_checksum (kv_host_buffer_peek_slot (f->buffer, 0), FS_TEST_SLOT);
  wrong = kv_chunk_checksum (kv_host_buffer_peek_slot (f->buffer, 1), FS_TEST_SLOT) ^ 0x77;
  kv_host_buffer_set_slot_checksum (f->buffer, 0, right);
  kv_host_buffer_set_slot_checksum (f->buffer, 1, wrong);
  {
    KvKey *keys[3] = { test_chunk_key (40), test_chunk_key (41), test_chunk_key (42) };
    const guint32 slots[3] = { 0, 1, 2 };
    g_autoptr(KvJobResult) stored = test_tier_run_job (tier, f->next_id++, FALSE, keys, slots, 3,
                                                     f->request);

    g_assert_true (kv_job_result_get_success (stored));
    for (guint i = 0; i < 3; i++)
      kv_key_unref (keys[i]);
  }
  g_assert_cmpuint (slot_header_checksum (tier, 40), ==, right);
  g_assert_cmpuint (slot_header_checksum (tier, 41), ==, wrong);
  g_assert_cmpuint (slot_header_checksum (tier, 42), ==,
                    kv_chunk_checksum (kv_host_buffer_peek_slot (f->buffer, 2), FS_TEST_SLOT));

  kv_host_buffer_clear_slot_checksum (f->buffer, 9);
  g_assert_true (load_key (f, tier, 40, 9));
  g_assert_true (kv_host_buffer_get_slot_checksum (f->buffer, 9, &carried));
  g_assert_cmpuint (carried, ==, right);
  kv_host_buffer_clear_slot_checksum (f->buffer, 10);
  g_assert_false (load_key (f, tier, 41, 10));
  g_assert_false (kv_host_buffer_get_slot_checksum (f->buffer, 10, NULL));
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_CHECKSUM_FAILURES), ==, 1);
  close_tier (tier);
}

/* durability=data and full: fdatasync after the write; same bytes. */
static void
test_durability (Fixture       *f,
                 gconstpointer  data)
{
  const FsVariant *v = data;

  for (KvFsDurability d = KV_FS_DURABILITY_DATA; d <= KV_FS_DURABILITY_FULL; d++)
    {
      g_autofree char *root = g_build_filename (f->root, d == KV_FS_DURABILITY_DATA ? "d" : "f", NULL);
      KvFsTier *tier = fs_test_tier_new (f->buffer, root, v, "durability", d, NULL);

      g_assert_true (store_keys (f, tier, 0, 8));
      for (guint i = 0; i < 8; i++)
        g_assert_true (load_key (f, tier, i, 15 - i));
      close_tier (tier);
    }
}

/* Two roots: slab files in both, stores spread over both, and a restart
 * finds every chunk. */
static void
test_multi_root (Fixture       *f,
                 gconstpointer  data)
{
  const FsVariant *v = data;
  g_autofree char *r1 = g_build_filename (f->root, "a", NULL);
  g_autofree char *r2 = g_build_filename (f->root, "b", NULL);
  g_autofree char *roots = g_strdup_printf ("%s,%s", r1, r2);
  KvFsTier *tier = fs_test_tier_new (f->buffer, roots, v, NULL);
  guint on_first = 0;

  g_assert_cmpuint (test_dir_count_files (r1, ".kvslab"), ==, 2);
  g_assert_cmpuint (test_dir_count_files (r2, ".kvslab"), ==, 2);
  g_assert_true (store_keys (f, tier, 0, 16));
  for (guint i = 0; i < 16; i++)
    {
      g_autofree char *path = locate (tier, i, NULL);

      on_first += g_str_has_prefix (path, r1);
    }
  g_assert_cmpuint (on_first, ==, 8);
  close_tier (tier);

  tier = fs_test_tier_new (f->buffer, roots, v, NULL);
  kv_fs_tier_wait_index_ready (tier);
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier), ==, 16);
  for (guint i = 0; i < 16; i++)
    g_assert_true (load_key (f, tier, i, i));
  close_tier (tier);
}

/* ---- capacity ----------------------------------------------------------- */

/* A full slab evicts the least recently used chunk and writes into its
 * slot; capacity stays the slab's. */
static void
test_full_evicts (Fixture       *f,
                  gconstpointer  data)
{
  const FsVariant *v = data;
  KvFsTier *tier = fs_test_tier_new (f->buffer, f->root, v,
                                     "max-size", 8 * SLOT_BYTES, NULL);

  g_assert_true (store_keys (f, tier, 0, 8));
  /* 0..3 looked up recently: 4..7 go first */
  for (guint i = 0; i < 4; i++)
    g_assert_cmpint (lookup (tier, i), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_true (store_keys (f, tier, 100, 4));
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier), ==, 8);
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_EVICTED_CHUNKS), ==, 4);
  for (guint i = 0; i < 4; i++)
    {
      g_assert_cmpint (lookup (tier, 4 + i), ==, KV_LOOKUP_RESULT_MISS);
      g_assert_true (load_key (f, tier, i, i));
      g_assert_true (load_key (f, tier, 100 + i, 4 + i));
    }
  /* the slab files did not grow */
  {
    g_autofree char *dir = slab_dir (tier, f->root);
    g_autofree char *slab0 = g_build_filename (dir, "slab-0000.kvslab", NULL);
    GStatBuf st;

    g_assert_cmpint (g_stat (slab0, &st), ==, 0);
    g_assert_cmpuint (st.st_size, ==, KV_SLAB_HEADER_SIZE + 8 * SLOT_BYTES);
    g_assert_cmpuint (test_dir_count_files (dir, ".kvslab"), ==, 1);
  }
  close_tier (tier);
}

/* A slot being read is never written: with a load of key 0 held in the
 * engine, stores into a full slab evict every other chunk but key 0, and
 * a store that finds only the pinned slot fails rather than overwrite it. */
static void
test_pinned_slot_not_reused (Fixture       *f,
                             gconstpointer  data)
{
  const FsVariant *v = data;
  KvFsTier *tier = fs_test_tier_new (f->buffer, f->root, v,
                                     "max-size", 2 * SLOT_BYTES, NULL);
  KvSecondaryTier *st = KV_SECONDARY_TIER (tier);
  KvFsEngine *engine = kv_fs_tier_get_engine (tier);
  g_autoptr(KvKey) key0 = test_chunk_key (0);
  g_autoptr(KvTransferJob) load = NULL;
  g_autoptr(GError) error = NULL;
  KvJobResult **results;
  guint32 slot = 15;
  guint n_ok = 0;
  guint n = 0;

  g_assert_true (store_keys (f, tier, 0, 2));
  memset (kv_host_buffer_peek_slot (f->buffer, slot), 0, FS_TEST_SLOT);
  kv_fs_engine_set_stalled (engine, TRUE);
  load = kv_transfer_job_new (f->next_id++, &key0, &slot, 1, TRUE, f->request);
  g_assert_true (kv_secondary_tier_submit_load (st, load, &error));
  g_assert_no_error (error);

  /* key 1 goes, its slot takes key 50; then only the pinned slot and
   * key 50's (storing, then the newest) are left */
  {
    g_autoptr(KvKey) k50 = test_chunk_key (50);
    g_autoptr(KvKey) k51 = test_chunk_key (51);
    KvKey *keys[2] = { k50, k51 };
    guint32 slots[2] = { 0, 1 };
    g_autoptr(KvTransferJob) store = kv_transfer_job_new (f->next_id++, keys, slots, 2, FALSE,
                                                          f->request);

    test_chunk_fill_slot (f->buffer, 0, 50);
    test_chunk_fill_slot (f->buffer, 1, 51);
    g_assert_true (kv_secondary_tier_submit_store (st, store, &error));
    g_assert_no_error (error);
  }
  kv_fs_engine_set_stalled (engine, FALSE);
  g_assert_true (kv_secondary_tier_drain_jobs (st, &error));
  results = kv_secondary_tier_get_finished_jobs (st);
  for (; results[n] != NULL; n++)
    {
      n_ok += kv_job_result_get_success (results[n]);
      kv_job_result_unref (results[n]);
    }
  g_free (results);
  /* the load succeeded; the store only in part (key 51 found no slot) */
  g_assert_cmpuint (n, ==, 2);
  g_assert_cmpuint (n_ok, ==, 1);
  g_assert_true (test_chunk_check (kv_host_buffer_peek_slot (f->buffer, 15), FS_TEST_SLOT, 0));
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_STORE_FAILURES), ==, 1);
  g_assert_true (load_key (f, tier, 0, 2));
  g_assert_true (load_key (f, tier, 50, 3));
  g_assert_cmpint (lookup (tier, 1), ==, KV_LOOKUP_RESULT_MISS);
  close_tier (tier);
}

/* ---- damage ------------------------------------------------------------- */

/* A bit flipped in a slot's header or payload: the load fails (never
 * wrong bytes), the chunk is counted corrupt and forgotten, its slot
 * free again; a slot copied over another key's fails as the wrong key. */
static void
test_corruption (Fixture       *f,
                 gconstpointer  data)
{
  const FsVariant *v = data;
  KvFsTier *tier = fs_test_tier_new (f->buffer, f->root, v, "verify", FALSE, NULL);
  g_autofree char *p0 = NULL;
  g_autofree char *p1 = NULL;
  g_autofree char *p2 = NULL;
  g_autofree char *p3 = NULL;
  g_autofree guint8 *slot3 = NULL;
  guint64 o0 = 0, o1 = 0, o2 = 0, o3 = 0;

  g_assert_true (store_keys (f, tier, 0, 4));
  p0 = locate (tier, 0, &o0);
  p1 = locate (tier, 1, &o1);
  p2 = locate (tier, 2, &o2);
  p3 = locate (tier, 3, &o3);

  flip_byte (p0, o0 + KV_CHUNK_OFF_HASH + 1);                       /* header */
  flip_byte (p1, o1 + KV_CHUNK_HEADER_SIZE + FS_TEST_SLOT / 2);     /* payload, verify=false */
  slot3 = read_file_at (p3, o3, SLOT_BYTES);
  patch_file (p2, o2, slot3, SLOT_BYTES);                           /* key 3's slot over key 2's */

  for (guint i = 0; i < 3; i++)
    {
      g_assert_false (load_key (f, tier, i, 5));
      g_assert_cmpint (lookup (tier, i), ==, KV_LOOKUP_RESULT_MISS);
    }
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_CORRUPT_CHUNKS), ==, 3);
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_CHECKSUM_FAILURES), ==, 2);
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier), ==, 1);
  g_assert_true (load_key (f, tier, 3, 6));

  /* the slots are used again */
  g_assert_true (store_keys (f, tier, 0, 3));
  for (guint i = 0; i < 3; i++)
    g_assert_true (load_key (f, tier, i, 7));
  close_tier (tier);

  /* damage found by a restart: the scan skips a bad header; a bad
   * payload is found by the load */
  tier = fs_test_tier_new (f->buffer, f->root, v, NULL);
  kv_fs_tier_wait_index_ready (tier);
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier), ==, 4);
  g_free (p0);
  g_free (p1);
  p0 = locate (tier, 0, &o0);
  p1 = locate (tier, 1, &o1);
  close_tier (tier);
  flip_byte (p0, o0 + KV_CHUNK_OFF_PAYLOAD_XXH3);
  flip_byte (p1, o1 + KV_CHUNK_HEADER_SIZE + 7);
  tier = fs_test_tier_new (f->buffer, f->root, v, NULL);
  kv_fs_tier_wait_index_ready (tier);
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier), ==, 3);
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_CORRUPT_CHUNKS), ==, 1);
  g_assert_cmpint (lookup (tier, 0), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_false (load_key (f, tier, 1, 0));
  g_assert_true (load_key (f, tier, 2, 0));
  g_assert_true (load_key (f, tier, 3, 0));
  close_tier (tier);
}

/* On a memory-backed root: with slab-map=false the files are not mapped
 * and records move through the engine as on a disk; with the mapping
 * (the default), a load checks the payload as it copies it: a byte
 * changed in the file's pages after the store fails the load as a bad
 * checksum, never lands as the key's bytes, and a store after it
 * replaces the slot. */
static void
test_memory_mapping (Fixture       *f,
                     gconstpointer  data)
{
  const FsVariant *v = data;
  KvFsTier *tier = fs_test_tier_new (f->buffer, f->root, v, "slab-map", FALSE, NULL);
  g_autofree char *dir = slab_dir (tier, f->root);
  g_autofree char *slab0 = g_build_filename (dir, "slab-0000.kvslab", NULL);
  g_autofree char *path = NULL;
  guint64 offset = 0;

  g_assert_true (f->memory);
  g_assert_false (file_is_mapped (slab0));
  g_assert_true (store_keys (f, tier, 0, 16));
  for (guint i = 0; i < 16; i++)
    g_assert_true (load_key (f, tier, i, 15 - i));
  close_tier (tier);

  /* mapped: what the unmapped tier stored loads, byte-exact */
  tier = fs_test_tier_new (f->buffer, f->root, v, NULL);
  kv_fs_tier_wait_index_ready (tier);
  g_assert_true (file_is_mapped (slab0));
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier), ==, 16);
  for (guint i = 0; i < 16; i++)
    g_assert_true (load_key (f, tier, i, i));

  /* the last byte of a payload, the first, and one in the middle */
  for (guint i = 0; i < 3; i++)
    {
      static const gsize at[] = { FS_TEST_SLOT - 1, 0, FS_TEST_SLOT / 2 + 3 };

      g_free (path);
      path = locate (tier, i, &offset);
      flip_byte (path, offset + KV_CHUNK_HEADER_SIZE + at[i]);
      g_assert_false (load_key (f, tier, i, 4));
      g_assert_cmpint (lookup (tier, i), ==, KV_LOOKUP_RESULT_MISS);
    }
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_CHECKSUM_FAILURES), ==, 3);
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_CORRUPT_CHUNKS), ==, 3);
  g_assert_true (store_keys (f, tier, 0, 3));
  for (guint i = 0; i < 16; i++)
    g_assert_true (load_key (f, tier, i, 15 - i));
  close_tier (tier);

  /* what the mapped tier stored, read through the engine again */
  tier = fs_test_tier_new (f->buffer, f->root, v, "slab-map", FALSE, NULL);
  kv_fs_tier_wait_index_ready (tier);
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier), ==, 16);
  for (guint i = 0; i < 16; i++)
    g_assert_true (load_key (f, tier, i, i));
  close_tier (tier);

  /* io-engine=auto takes the thread engine where every record is a
   * copy, and what it would take anywhere else with slab-map=false */
  for (guint mapped = 0; mapped < 2; mapped++)
    {
      g_autofree char *active = NULL;

      tier = fs_test_tier_new (f->buffer, f->root, v, "io-engine", KV_FS_IO_ENGINE_AUTO,
                               "slab-map", (gboolean) mapped, NULL);
      kv_fs_tier_wait_index_ready (tier);
      g_object_get (tier, "active-io-engine", &active, NULL);
      if (mapped)
        g_assert_cmpstr (active, ==, "threads");
      else
        g_assert_cmpstr (active, ==, KV_FS_HAVE_URING && !fs_test_skip_engine (KV_FS_IO_ENGINE_URING) ?
                         "uring" : "threads");
      g_assert_true (load_key (f, tier, 5, 0));
      close_tier (tier);
    }
}

/* A load batch of adjacent slots is read with one transfer per 8 slots
 * (two here, for 10), and each record is still checked on its own: a
 * damaged one fails alone, the others land byte-exact. */
static void
test_merged_read (Fixture       *f,
                  gconstpointer  data)
{
  const FsVariant *v = data;
  /* one slab file: stores take its slots in turn */
  KvFsTier *tier = fs_test_tier_new (f->buffer, f->root, v, "slab-size",
                                     (guint64) KV_SLAB_HEADER_SIZE + 64 * SLOT_BYTES, NULL);
  KvFsEngine *engine = kv_fs_tier_get_engine (tier);
  g_autoptr(GError) error = NULL;
  g_autoptr(KvTransferJob) job = NULL;
  KvJobResult **results;
  KvKey * const *ok;
  KvKey *keys[10];
  guint32 slots[10];
  g_autofree char *path = NULL;
  guint64 first = 0;
  guint n_ok = 0;

  g_assert_true (store_keys (f, tier, 0, 10));
  path = locate (tier, 0, &first);
  for (guint i = 0; i < 10; i++)
    {
      g_autofree char *p = NULL;
      guint64 offset = 0;

      /* (the stores took adjacent slots of one file) */
      p = locate (tier, i, &offset);
      g_assert_cmpstr (p, ==, path);
      g_assert_cmpuint (offset, ==, first + i * SLOT_BYTES);
      keys[i] = test_chunk_key (i);
      slots[i] = i;
      memset (kv_host_buffer_peek_slot (f->buffer, i), 0xa5, FS_TEST_SLOT);
    }
  flip_byte (path, first + 3 * SLOT_BYTES + KV_CHUNK_HEADER_SIZE + 100);  /* key 3's payload */

  job = kv_transfer_job_new (f->next_id++, keys, slots, 10, TRUE, f->request);
  kv_fs_engine_set_stalled (engine, TRUE);
  g_assert_true (kv_secondary_tier_submit_load (KV_SECONDARY_TIER (tier), job, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (kv_fs_engine_get_n_queued (engine), ==, 2);
  kv_fs_engine_set_stalled (engine, FALSE);
  g_assert_true (kv_secondary_tier_drain_jobs (KV_SECONDARY_TIER (tier), &error));
  g_assert_no_error (error);
  results = kv_secondary_tier_get_finished_jobs (KV_SECONDARY_TIER (tier));
  g_assert_nonnull (results);
  g_assert_nonnull (results[0]);
  g_assert_null (results[1]);
  g_assert_false (kv_job_result_get_success (results[0]));
  ok = kv_job_result_get_successful_keys (results[0], &n_ok);
  g_assert_cmpuint (n_ok, ==, 9);
  for (guint i = 0, k = 0; i < 10; i++)
    {
      if (i == 3)
        {
          g_assert_cmpint (lookup (tier, i), ==, KV_LOOKUP_RESULT_MISS);
          continue;
        }
      g_assert_true (kv_key_equal (ok[k++], keys[i]));
      g_assert_true (test_chunk_check (kv_host_buffer_peek_slot (f->buffer, i), FS_TEST_SLOT, i));
    }
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_CORRUPT_CHUNKS), ==, 1);
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_LOADED_CHUNKS), ==, 9);
  kv_job_result_unref (results[0]);
  g_free (results);

  /* a transfer that fails fails every record it carried, and lets go of
   * their slots: they load afterwards */
  kv_fs_engine_inject_error (engine, KV_FS_OP_LOAD, EIO, 1);
  {
    g_autoptr(KvJobResult) result = test_tier_run_job (tier, f->next_id++, TRUE, keys, slots, 3,
                                                       f->request);

    g_assert_false (kv_job_result_get_success (result));
    kv_job_result_get_successful_keys (result, &n_ok);
    g_assert_cmpuint (n_ok, ==, 0);
  }
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_IO_ERRORS), ==, 3);
  for (guint i = 0; i < 3; i++)
    g_assert_true (load_key (f, tier, i, 12 + i));

  for (guint i = 0; i < 10; i++)
    kv_key_unref (keys[i]);
  close_tier (tier);
}

/* ---- restart ------------------------------------------------------------ */

/* A new tier on the slabs rebuilds its index from the slot headers, in
 * the background; stores go on meanwhile into the slots known free. */
static void
test_restart (Fixture       *f,
              gconstpointer  data)
{
  const FsVariant *v = data;
  KvFsTier *tier = fs_test_tier_new (f->buffer, f->root, v, NULL);

  g_assert_true (store_keys (f, tier, 0, 16));
  g_assert_true (store_keys (f, tier, 16, 4));
  close_tier (tier);

  kv_fs_tier_hold_scans (TRUE);
  tier = fs_test_tier_new (f->buffer, f->root, v, NULL);
  g_assert_false (kv_fs_tier_is_index_ready (tier));
  /* not scanned yet: a miss, and no slot to store into */
  g_assert_cmpint (lookup (tier, 3), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_false (store_keys (f, tier, 40, 1));
  kv_fs_tier_hold_scans (FALSE);
  kv_fs_tier_wait_index_ready (tier);
  g_assert_true (kv_fs_tier_is_index_ready (tier));
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_SCANNED_CHUNKS), ==, 20);
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier), ==, 20);
  for (guint i = 0; i < 20; i++)
    {
      g_assert_cmpint (lookup (tier, i), ==, KV_LOOKUP_RESULT_HIT);
      g_assert_true (load_key (f, tier, i, i % 16));
    }
  /* the free slots are known: 44 more fit without evicting */
  for (guint b = 0; b < 44; b += 11)
    g_assert_true (store_keys (f, tier, 100 + b, 11));
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier), ==, 64);
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_EVICTED_CHUNKS), ==, 0);
  close_tier (tier);

  /* a larger max-size adds slots, a smaller one drops files */
  tier = fs_test_tier_new (f->buffer, f->root, v, "max-size", 80 * SLOT_BYTES, NULL);
  kv_fs_tier_wait_index_ready (tier);
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier), ==, 64);
  g_assert_true (store_keys (f, tier, 200, 16));
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_EVICTED_CHUNKS), ==, 0);
  close_tier (tier);
  tier = fs_test_tier_new (f->buffer, f->root, v, "max-size", 16 * SLOT_BYTES, NULL);
  kv_fs_tier_wait_index_ready (tier);
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier), <=, 16);
  {
    g_autofree char *dir = slab_dir (tier, f->root);

    g_assert_cmpuint (test_dir_count_files (dir, ".kvslab"), ==, 1);
  }
  close_tier (tier);
}

/* A warm restart of a full slab: the slots the scan has not read are
 * busy, and until it is over the index holds none of their keys. A store
 * that finds no slot free takes that of the oldest chunk the scan has
 * read, as an eviction would: on main, every store failed until the whole
 * scan was over (a short `kvtier bench --prefill-rate 0` on a full slab
 * failed 25-175 of its stores). The scan is held here once it has read
 * every slot, before the index gets the keys. */
static void
test_restart_full (Fixture       *f,
                   gconstpointer  data)
{
  const FsVariant *v = data;
  /* one slab file, one stretch of slots for the scan: the slots it has
   * read are all of them, or none */
  guint64 slab_size = KV_SLAB_HEADER_SIZE + 64 * SLOT_BYTES;
  KvFsTier *tier = fs_test_tier_new (f->buffer, f->root, v, "slab-size", slab_size, NULL);
  gint64 until;

  /* keys 0 and 1 first: the oldest */
  g_assert_true (store_keys (f, tier, 0, 2));
  g_assert_true (store_keys (f, tier, 2, 14));
  for (guint b = 16; b < 64; b += 16)
    g_assert_true (store_keys (f, tier, b, 16));
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier), ==, 64);
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_EVICTED_CHUNKS), ==, 0);
  close_tier (tier);

  kv_fs_tier_hold_slab_scans_read (TRUE);
  tier = fs_test_tier_new (f->buffer, f->root, v, "slab-size", slab_size, NULL);
  /* a store fails only until the scan has read the slots */
  until = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  while (!store_keys (f, tier, 100, 2))
    {
      g_assert_cmpint (g_get_monotonic_time (), <, until);
      g_usleep (10 * 1000);
    }
  g_assert_false (kv_fs_tier_is_index_ready (tier));
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_EVICTED_CHUNKS), ==, 2);
  g_assert_cmpint (lookup (tier, 100), ==, KV_LOOKUP_RESULT_HIT);
  kv_fs_tier_hold_slab_scans_read (FALSE);
  kv_fs_tier_wait_index_ready (tier);

  /* the two oldest chunks (keys 0 and 1) gave their slots; the rest came
   * back, and the new ones load byte-exact */
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_SCANNED_CHUNKS), ==, 62);
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier), ==, 64);
  g_assert_cmpint (lookup (tier, 0), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (lookup (tier, 1), ==, KV_LOOKUP_RESULT_MISS);
  for (guint i = 2; i < 64; i++)
    {
      g_assert_cmpint (lookup (tier, i), ==, KV_LOOKUP_RESULT_HIT);
      g_assert_true (load_key (f, tier, i, i % 16));
    }
  g_assert_true (load_key (f, tier, 100, 0));
  g_assert_true (load_key (f, tier, 101, 1));
  close_tier (tier);

  /* and a restart after that finds the same 64 */
  tier = fs_test_tier_new (f->buffer, f->root, v, "slab-size", slab_size, NULL);
  kv_fs_tier_wait_index_ready (tier);
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier), ==, 64);
  g_assert_cmpint (lookup (tier, 1), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_true (load_key (f, tier, 101, 1));
  g_assert_true (load_key (f, tier, 2, 2));
  close_tier (tier);
}

/* A restart over more slots than one scan task reads: every chunk comes
 * back, and a newer copy of a key in another stretch of slots wins. */
static void
test_restart_large (Fixture       *f,
                    gconstpointer  data)
{
  const FsVariant *v = data;
  KvFsTier *tier = fs_test_tier_new (f->buffer, f->root, v, "max-size", 2100 * SLOT_BYTES,
                                     "slab-size", (guint64) 64 << 20, NULL);
  g_autoptr(KvKey) key0 = test_chunk_key (0);
  g_autofree char *path = NULL;
  g_autofree guint8 *header = NULL;
  g_autofree guint8 *payload = g_malloc (FS_TEST_SLOT);
  guint8 copy[KV_CHUNK_HEADER_SIZE];
  guint64 offset = 0;

  for (guint b = 0; b < 1104; b += 16)
    g_assert_true (store_keys (f, tier, b, 16));
  path = locate (tier, 0, &offset);
  close_tier (tier);

  header = read_file_at (path, offset, KV_CHUNK_HEADER_SIZE);
  test_chunk_fill (payload, FS_TEST_SLOT, 7777);
  kv_chunk_slot_header_encode (copy, header + KV_CHUNK_OFF_NAMESPACE, key0, FS_TEST_SLOT,
                               kv_chunk_checksum (payload, FS_TEST_SLOT), 0,
                               kv_chunk_slot_header_get_sequence (header) + 1);
  patch_file (path, kv_chunk_slab_slot_offset (FS_TEST_SLOT, 2050), copy, sizeof copy);
  patch_file (path, kv_chunk_slab_slot_offset (FS_TEST_SLOT, 2050) + KV_CHUNK_HEADER_SIZE,
              payload, FS_TEST_SLOT);

  tier = fs_test_tier_new (f->buffer, f->root, v, "max-size", 2100 * SLOT_BYTES,
                           "slab-size", (guint64) 64 << 20, NULL);
  kv_fs_tier_wait_index_ready (tier);
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier), ==, 1104);
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_SCANNED_CHUNKS), ==, 1104);
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_CORRUPT_CHUNKS), ==, 0);
  for (guint i = 1; i < 1104; i += 97)
    g_assert_true (load_key (f, tier, i, 0));
  g_assert_true (load_key (f, tier, 1103, 0));
  {
    guint32 s = 0;
    g_autoptr(KvJobResult) result = test_tier_run_job (tier, f->next_id++, TRUE, &key0, &s, 1, NULL);

    g_assert_true (kv_job_result_get_success (result));
    g_assert_true (test_chunk_check (kv_host_buffer_peek_slot (f->buffer, 0), FS_TEST_SLOT, 7777));
  }
  /* 2100 - 1104 slots free, the older copy's among them */
  for (guint b = 0; b < 996; b += 12)
    g_assert_true (store_keys (f, tier, 5000 + b, 12));
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_EVICTED_CHUNKS), ==, 0);
  close_tier (tier);
}

/* A slot torn by a crash (header whole, payload not) passes the restart
 * scan, which reads headers only: a store of its key is not skipped on
 * that header's word but writes the key again; a slot this tier wrote or
 * loaded whole is trusted, and its key's store skipped. */
static void
test_torn_slot_stored_again (Fixture       *f,
                             gconstpointer  data)
{
  const FsVariant *v = data;
  KvFsTier *tier = fs_test_tier_new (f->buffer, f->root, v, NULL);
  g_autofree char *path = NULL;
  guint64 offset = 0;

  g_assert_true (store_keys (f, tier, 0, 3));
  path = locate (tier, 1, &offset);
  close_tier (tier);
  flip_byte (path, offset + KV_CHUNK_HEADER_SIZE + 99);

  tier = fs_test_tier_new (f->buffer, f->root, v, NULL);
  kv_fs_tier_wait_index_ready (tier);
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier), ==, 3);
  /* key 2 loaded whole: trusted from then on */
  g_assert_true (load_key (f, tier, 2, 0));
  g_assert_true (store_keys (f, tier, 0, 3));
  /* keys 0 and 1 written again, key 2 skipped */
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_STORED_CHUNKS), ==, 2);
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_SKIPPED_CHUNKS), ==, 1);
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier), ==, 3);
  for (guint i = 0; i < 3; i++)
    g_assert_true (load_key (f, tier, i, 5));
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_CORRUPT_CHUNKS), ==, 0);
  /* written by this tier: skipped now */
  g_assert_true (store_keys (f, tier, 0, 3));
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_SKIPPED_CHUNKS), ==, 4);
  close_tier (tier);
}

/* Two valid copies of a key (a crash between a store and the reuse of
 * the evicted copy's slot): the higher sequence number wins, whichever
 * slot comes first. */
static void
test_newest_copy_wins (Fixture       *f,
                       gconstpointer  data)
{
  const FsVariant *v = data;

  for (guint newer_first = 0; newer_first < 2; newer_first++)
    {
      g_autofree char *root = g_strdup_printf ("%s/r%u", f->root, newer_first);
      KvFsTier *tier = fs_test_tier_new (f->buffer, root, v, NULL);
      g_autoptr(KvKey) key = test_chunk_key (5);
      g_autofree char *path = NULL;
      g_autofree guint8 *header = NULL;
      g_autofree guint8 *payload = g_malloc (FS_TEST_SLOT);
      guint8 copy[KV_CHUNK_HEADER_SIZE];
      guint64 offset = 0;
      guint64 sequence;

      g_assert_true (store_keys (f, tier, 5, 1));
      path = locate (tier, 5, &offset);
      close_tier (tier);

      /* another copy of key 5 in the next slot (scanned after it), with
       * other bytes (key 6's pattern), older or newer */
      header = read_file_at (path, offset, KV_CHUNK_HEADER_SIZE);
      sequence = kv_chunk_slot_header_get_sequence (header);
      test_chunk_fill (payload, FS_TEST_SLOT, 6);
      kv_chunk_slot_header_encode (copy, header + KV_CHUNK_OFF_NAMESPACE, key, FS_TEST_SLOT,
                                   kv_chunk_checksum (payload, FS_TEST_SLOT), 0,
                                   newer_first ? sequence - 1 : sequence + 1);
      patch_file (path, offset + SLOT_BYTES, copy, sizeof copy);
      patch_file (path, offset + SLOT_BYTES + KV_CHUNK_HEADER_SIZE, payload, FS_TEST_SLOT);

      tier = fs_test_tier_new (f->buffer, root, v, NULL);
      kv_fs_tier_wait_index_ready (tier);
      g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier), ==, 1);
      memset (kv_host_buffer_peek_slot (f->buffer, 0), 0, FS_TEST_SLOT);
      {
        guint32 s = 0;
        g_autoptr(KvJobResult) result = test_tier_run_job (tier, f->next_id++, TRUE, &key, &s, 1,
                                                         NULL);

        g_assert_true (kv_job_result_get_success (result));
      }
      /* newer first: the original (sequence) beats the copy (sequence - 1);
       * else the copy (sequence + 1) wins */
      g_assert_true (test_chunk_check (kv_host_buffer_peek_slot (f->buffer, 0), FS_TEST_SLOT,
                                    newer_first ? 5 : 6));
      close_tier (tier);
    }
}

/* @op: a store of key @i (its payload in primary slot 0, its checksum not
 * carried) in namespace @ns, the newest one, for a record set up next. */
static void
init_test_store (Fixture  *f,
                 KvFsOp   *op,
                 guint     i,
                 guint8   *ns)
{
  kv_chunk_namespace_digest ("default", FS_TEST_SLOT, ns);
  kv_fs_op_init (op, KV_FS_OP_STORE, 0, 0, NULL, test_chunk_key (i));
  test_chunk_fill (kv_host_buffer_peek_slot (f->buffer, 0), FS_TEST_SLOT, i);
  op->payload = kv_host_buffer_peek_slot (f->buffer, 0);
  op->payload_len = FS_TEST_SLOT;
  op->namespace_digest = ns;
  op->sequence = G_MAXUINT64 / 2;
}

/* A store whose deadline passed while it wrote (its primary slot may
 * hold another chunk's bytes by then) leaves no valid slot behind: the
 * header it wrote is overwritten with zeros, so no restart finds it. */
static void
test_aborted_store_invalid (Fixture       *f,
                            gconstpointer  data)
{
  const FsVariant *v = data;
  KvFsTier *tier = fs_test_tier_new (f->buffer, f->root, v, NULL);
  g_autofree char *path = NULL;
  g_autofree guint8 *header = NULL;
  guint8 *buf = NULL;
  guint8 ns[KV_CHUNK_NAMESPACE_DIGEST_LEN];
  guint64 offset = 0;
  KvFsOp op;
  int fd;

  g_assert_true (store_keys (f, tier, 0, 2));
  path = locate (tier, 1, &offset);
  close_tier (tier);

  /* key 1's slot rewritten by an aborted store of key 7 */
  g_assert_cmpint (posix_memalign ((void **) &buf, 4096, KV_CHUNK_HEADER_SIZE), ==, 0);
  memset (buf, 0, KV_CHUNK_HEADER_SIZE);
  fd = open (path, O_RDWR);
  g_assert_cmpint (fd, >=, 0);
  init_test_store (f, &op, 7, ns);
  kv_fs_slab_init_record (&op, buf, fd, offset);
  op.aborted = TRUE;
  kv_fs_op_run_at_offset (&op);
  g_assert_cmpint (op.status, ==, KV_FS_OP_STATUS_CANCELLED);
  close (fd);
  kv_fs_op_clear (&op);
  free (buf);

  header = read_file_at (path, offset, KV_CHUNK_HEADER_SIZE);
  for (guint i = 0; i < KV_CHUNK_HEADER_SIZE; i++)
    g_assert_cmpuint (header[i], ==, 0);
  tier = fs_test_tier_new (f->buffer, f->root, v, NULL);
  kv_fs_tier_wait_index_ready (tier);
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier), ==, 1);
  g_assert_cmpint (lookup (tier, 7), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_true (load_key (f, tier, 0, 0));
  close_tier (tier);
}

/* Runs a store of key @i (its payload in primary slot 0, its checksum
 * not carried) into the record mapped at @offset of @path, aborted or
 * not; returns its status. */
static KvFsOpStatus
run_mapped_store (Fixture    *f,
                  const char *path,
                  guint64     offset,
                  guint       i,
                  gboolean    aborted)
{
  guint8 ns[KV_CHUNK_NAMESPACE_DIGEST_LEN];
  gsize size = offset + KV_CHUNK_HEADER_SIZE + FS_TEST_SLOT;
  KvFsOpStatus status;
  guint8 *map;
  KvFsOp op;
  int fd;

  fd = open (path, O_RDWR);
  g_assert_cmpint (fd, >=, 0);
  map = mmap (NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  g_assert_true (map != MAP_FAILED);
  init_test_store (f, &op, i, ns);
  kv_fs_slab_init_mapped_store (&op, map + offset, fd, offset);
  op.aborted = aborted;
  kv_fs_op_run_at_offset (&op);
  status = op.status;
  /* the checksum it wrote is that of the payload it copied */
  if (!aborted)
    {
      g_assert_true (op.has_payload_checksum);
      g_assert_cmpuint (op.payload_checksum, ==, kv_chunk_checksum (op.payload, FS_TEST_SLOT));
    }
  kv_fs_op_clear (&op);
  g_assert_cmpint (munmap (map, size), ==, 0);
  close (fd);
  return status;
}

/* On a memory-backed root a store copies its payload into the mapped
 * slot and encodes the header there after it: a slot overwritten that
 * way holds the new chunk for a restart, and one whose store was aborted
 * (past its deadline) holds zeros in its header, so no restart finds
 * it. */
static void
test_mapped_store_in_place (Fixture       *f,
                            gconstpointer  data)
{
  const FsVariant *v = data;
  KvFsTier *tier = fs_test_tier_new (f->buffer, f->root, v, NULL);
  g_autofree char *path0 = NULL;
  g_autofree char *path1 = NULL;
  g_autofree guint8 *header = NULL;
  guint64 offset0 = 0, offset1 = 0;

  g_assert_true (store_keys (f, tier, 0, 2));
  path0 = locate (tier, 0, &offset0);
  path1 = locate (tier, 1, &offset1);
  close_tier (tier);

  /* key 0's slot rewritten by a store of key 7, key 1's by an aborted
   * store of key 8 */
  g_assert_cmpint (run_mapped_store (f, path0, offset0, 7, FALSE), ==, KV_FS_OP_STATUS_OK);
  g_assert_cmpint (run_mapped_store (f, path1, offset1, 8, TRUE), ==, KV_FS_OP_STATUS_CANCELLED);
  header = read_file_at (path1, offset1, KV_CHUNK_HEADER_SIZE);
  for (guint i = 0; i < KV_CHUNK_HEADER_SIZE; i++)
    g_assert_cmpuint (header[i], ==, 0);

  tier = fs_test_tier_new (f->buffer, f->root, v, NULL);
  kv_fs_tier_wait_index_ready (tier);
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier), ==, 1);
  g_assert_cmpint (lookup (tier, 0), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (lookup (tier, 1), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (lookup (tier, 8), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_true (load_key (f, tier, 7, 3));
  close_tier (tier);
}

/* ---- a block device ------------------------------------------------------ */

/* Attaches @image to a loop device; NULL (the test skipped, saying why)
 * where the machine does not allow it. */
static char *
attach_loop (const char *image)
{
  g_autofree char *out = NULL;
  g_autofree char *err = NULL;
  const char *argv[] = { "losetup", "-f", "--show", image, NULL };
  int status = 0;

  if (geteuid () != 0)
    {
      g_test_skip ("a loop device needs root");
      return NULL;
    }
  if (!g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, &out, &err,
                     &status, NULL) ||
      !g_spawn_check_wait_status (status, NULL) || !g_str_has_prefix (out, "/dev/"))
    {
      g_autofree char *msg = g_strdup_printf ("cannot attach a loop device here: %s",
                                              err != NULL ? g_strstrip (err) : "losetup missing");

      g_test_skip (msg);
      return NULL;
    }
  return g_strdup (g_strstrip (out));
}

static void
detach_loop (const char *device)
{
  const char *argv[] = { "losetup", "-d", device, NULL };
  int status = 0;

  g_assert_true (g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, NULL,
                               NULL, &status, NULL));
}

/* root=/dev/...: the device is one slab (no directory, no file), as
 * large as the device without max-size; a restart scans it; a device
 * holding other data is refused, not overwritten. */
static void
test_block_device (Fixture       *f,
                   gconstpointer  data)
{
  const FsVariant *v = data;
  g_autofree char *image = g_build_filename (f->root, "disk.img", NULL);
  g_autofree char *device = NULL;
  g_autofree char *path = NULL;
  KvFsTier *tier;
  guint64 offset = 0;
  int fd;

  fd = open (image, O_RDWR | O_CREAT | O_EXCL, 0600);
  g_assert_cmpint (fd, >=, 0);
  g_assert_cmpint (ftruncate (fd, 4 << 20), ==, 0);
  close (fd);
  device = attach_loop (image);
  if (device == NULL)
    return;

  tier = fs_test_tier_new (f->buffer, device, v, "max-size", (guint64) 0, NULL);
  g_assert_true (store_keys (f, tier, 0, 16));
  for (guint i = 0; i < 16; i++)
    g_assert_true (load_key (f, tier, i, 15 - i));
  path = locate (tier, 3, &offset);
  g_assert_cmpstr (path, ==, device);
  /* (4 MiB - 4096) / 12 KiB slots */
  g_assert_true (store_keys (f, tier, 100, 16));
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_EVICTED_CHUNKS), ==, 0);
  close_tier (tier);

  tier = fs_test_tier_new (f->buffer, device, v, "max-size", (guint64) 0, NULL);
  kv_fs_tier_wait_index_ready (tier);
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier), ==, 32);
  g_assert_true (load_key (f, tier, 3, 0));
  g_assert_true (load_key (f, tier, 103, 1));
  close_tier (tier);

  /* another namespace's slab, or anything but zeros, is not the tier's */
  {
    g_autoptr(GError) error = NULL;
    static const guint8 ext[] = "not a kvtier slab";

    tier = fs_test_tier_new_full (f->buffer, device, v, NULL, &error, "max-size", (guint64) 0,
                                  "namespace", "other", NULL);
    g_assert_null (tier);
    g_assert_error (error, G_IO_ERROR, G_IO_ERROR_EXISTS);
    g_clear_error (&error);
    patch_file (device, 0, ext, sizeof ext);
    tier = fs_test_tier_new_full (f->buffer, device, v, NULL, &error, "max-size", (guint64) 0,
                                  NULL);
    g_assert_null (tier);
    g_assert_error (error, G_IO_ERROR, G_IO_ERROR_EXISTS);
    g_assert_nonnull (strstr (error->message, device));
  }
  detach_loop (device);
}

/* ---- configuration and hostile files ------------------------------------ */

static void
test_config_errors (Fixture       *f,
                    gconstpointer  data)
{
  const FsVariant *v = data;
  struct { const char *prop; guint64 value; const char *message; } cases[] = {
    { "max-size", 0, "needs max-size" },
    { "max-size", SLOT_BYTES - 1, "fewer than one" },
    { "slab-size", SLOT_BYTES, "cannot hold one slot" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GError) error = NULL;
      KvFsTier *tier = fs_test_tier_new_full (f->buffer, f->root, v, NULL, &error,
                                              cases[i].prop, cases[i].value, NULL);

      g_assert_null (tier);
      g_assert_nonnull (error);
      g_assert_nonnull (strstr (error->message, cases[i].message));
    }
  {
    g_autoptr(GError) error = NULL;
    KvFsTier *tier = fs_test_tier_new_full (f->buffer, f->root, v, NULL, &error,
                                            "shared", TRUE, NULL);

    g_assert_null (tier);
    g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  }
  {
    g_autoptr(GError) error = NULL;
    KvFsTier *tier = fs_test_tier_new_full (f->buffer, f->root, v, NULL, &error,
                                            "preallocate", TRUE, NULL);

    g_assert_null (tier);
    g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  }
}

/* Slab files are the tier's: a symbolic link under a slab file's name,
 * or a file another user may write, is refused with an error naming it
 * (never followed, never written). */
static void
test_hostile_files (Fixture       *f,
                    gconstpointer  data)
{
  const FsVariant *v = data;
  KvFsTier *tier = fs_test_tier_new (f->buffer, f->root, v, NULL);
  g_autofree char *dir = slab_dir (tier, f->root);
  g_autofree char *slab1 = g_build_filename (dir, "slab-0001.kvslab", NULL);
  g_autofree char *target = g_build_filename (f->root, "elsewhere", NULL);
  g_autoptr(GError) error = NULL;
  GStatBuf st;

  close_tier (tier);

  /* world-writable */
  g_assert_cmpint (g_chmod (slab1, 0666), ==, 0);
  tier = fs_test_tier_new_full (f->buffer, f->root, v, NULL, &error, NULL);
  g_assert_null (tier);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_PERMISSION_DENIED);
  g_assert_nonnull (strstr (error->message, slab1));
  g_clear_error (&error);

  /* a link to a file elsewhere */
  g_assert_cmpint (g_unlink (slab1), ==, 0);
  g_assert_true (g_file_set_contents (target, "not a slab", -1, NULL));
  g_assert_cmpint (symlink (target, slab1), ==, 0);
  tier = fs_test_tier_new_full (f->buffer, f->root, v, NULL, &error, NULL);
  g_assert_null (tier);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_PERMISSION_DENIED);
  g_assert_nonnull (strstr (error->message, "symbolic link"));
  g_clear_error (&error);
  g_assert_cmpint (g_stat (target, &st), ==, 0);
  g_assert_cmpuint (st.st_size, ==, strlen ("not a slab"));

  /* a FIFO: refused without blocking on its open */
  g_assert_cmpint (g_unlink (slab1), ==, 0);
  g_assert_cmpint (mkfifo (slab1, 0600), ==, 0);
  tier = fs_test_tier_new_full (f->buffer, f->root, v, NULL, &error, NULL);
  g_assert_null (tier);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_PERMISSION_DENIED);
  g_clear_error (&error);

  /* another user's file, where the test may give it away */
  g_assert_cmpint (g_unlink (slab1), ==, 0);
  if (geteuid () == 0)
    {
      g_assert_true (g_file_set_contents (slab1, "", 0, NULL));
      g_assert_cmpint (chmod (slab1, 0600), ==, 0);
      g_assert_cmpint (chown (slab1, 65534, 65534), ==, 0);
      tier = fs_test_tier_new_full (f->buffer, f->root, v, NULL, &error, NULL);
      g_assert_null (tier);
      g_assert_error (error, G_IO_ERROR, G_IO_ERROR_PERMISSION_DENIED);
      g_assert_cmpint (g_unlink (slab1), ==, 0);
    }

  /* put right, the tier starts again */
  tier = fs_test_tier_new (f->buffer, f->root, v, NULL);
  g_assert_true (store_keys (f, tier, 0, 4));
  close_tier (tier);
}

int
main (int argc, char **argv)
{
  static const FsVariant variants[] = {
#if KV_FS_HAVE_URING
    { KV_FS_IO_ENGINE_URING, KV_FS_O_DIRECT_AUTO, KV_FS_LAYOUT_KIND_SLAB },
    { KV_FS_IO_ENGINE_URING, KV_FS_O_DIRECT_OFF, KV_FS_LAYOUT_KIND_SLAB },
#endif
    { KV_FS_IO_ENGINE_THREADS, KV_FS_O_DIRECT_AUTO, KV_FS_LAYOUT_KIND_SLAB },
    { KV_FS_IO_ENGINE_THREADS, KV_FS_O_DIRECT_OFF, KV_FS_LAYOUT_KIND_SLAB },
    { KV_FS_IO_ENGINE_GIO, KV_FS_O_DIRECT_AUTO, KV_FS_LAYOUT_KIND_SLAB },
    { KV_FS_IO_ENGINE_GIO, KV_FS_O_DIRECT_OFF, KV_FS_LAYOUT_KIND_SLAB },
  };
  static const struct { const char *name; GTestFixtureFunc func; gboolean all_variants; } tests[] = {
    { "round-trip", (GTestFixtureFunc) test_round_trip, TRUE },
    { "durability", (GTestFixtureFunc) test_durability, FALSE },
    { "multi-root", (GTestFixtureFunc) test_multi_root, TRUE },
    { "full-evicts", (GTestFixtureFunc) test_full_evicts, TRUE },
    { "pinned-slot-not-reused", (GTestFixtureFunc) test_pinned_slot_not_reused, TRUE },
    { "corruption", (GTestFixtureFunc) test_corruption, TRUE },
    { "restart", (GTestFixtureFunc) test_restart, TRUE },
    { "block-device", (GTestFixtureFunc) test_block_device, TRUE },
    { "newest-copy-wins", (GTestFixtureFunc) test_newest_copy_wins, FALSE },
    { "restart-large", (GTestFixtureFunc) test_restart_large, FALSE },
    { "restart-full", (GTestFixtureFunc) test_restart_full, FALSE },
    { "torn-slot-stored-again", (GTestFixtureFunc) test_torn_slot_stored_again, TRUE },
    { "aborted-store-invalid", (GTestFixtureFunc) test_aborted_store_invalid, FALSE },
    { "config-errors", (GTestFixtureFunc) test_config_errors, FALSE },
    { "hostile-files", (GTestFixtureFunc) test_hostile_files, FALSE },
    { "carried-checksum", (GTestFixtureFunc) test_carried_checksum, TRUE },
    { "merged-read", (GTestFixtureFunc) test_merged_read, TRUE },
  };

  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

  g_test_add_func ("/kvtier/fs/slab/format", test_format);
  /* on a memory-backed root: what does not depend on the root's device */
  for (guint i = 0; i < G_N_ELEMENTS (variants); i++)
    {
      static const struct { const char *name; GTestFixtureFunc func; } memory_tests[] = {
        { "round-trip", (GTestFixtureFunc) test_round_trip },
        { "multi-root", (GTestFixtureFunc) test_multi_root },
        { "full-evicts", (GTestFixtureFunc) test_full_evicts },
        { "pinned-slot-not-reused", (GTestFixtureFunc) test_pinned_slot_not_reused },
        { "corruption", (GTestFixtureFunc) test_corruption },
        { "restart", (GTestFixtureFunc) test_restart },
        { "torn-slot-stored-again", (GTestFixtureFunc) test_torn_slot_stored_again },
        { "carried-checksum", (GTestFixtureFunc) test_carried_checksum },
        { "mapping", (GTestFixtureFunc) test_memory_mapping },
        { "store-in-place", (GTestFixtureFunc) test_mapped_store_in_place },
      };
      const char *e = fs_engine_name (variants[i].engine);

      /* O_DIRECT is moot where the files are mapped */
      if (fs_test_skip_engine (variants[i].engine) || variants[i].o_direct != KV_FS_O_DIRECT_OFF)
        continue;
      for (guint t = 0; t < G_N_ELEMENTS (memory_tests); t++)
        {
          g_autofree char *path = g_strdup_printf ("/kvtier/fs/slab/%s/memory/%s", e,
                                                   memory_tests[t].name);

          if (memory_root_available ())
            g_test_add_vtable (path, sizeof (Fixture), &variants[i],
                               (GTestFixtureFunc) setup_memory, memory_tests[t].func,
                               (GTestFixtureFunc) teardown);
          else
            g_test_add_data_func (path, MEMORY_ROOT_PARENT " is not a writable tmpfs here",
                                  (GTestDataFunc) g_test_skip);
        }
    }
  for (guint i = 0; i < G_N_ELEMENTS (variants); i++)
    {
      const char *e = fs_engine_name (variants[i].engine);
      const char *d = variants[i].o_direct == KV_FS_O_DIRECT_OFF ? "buffered" : "direct";

      if (fs_test_skip_engine (variants[i].engine))
        continue;
      for (guint t = 0; t < G_N_ELEMENTS (tests); t++)
        {
          g_autofree char *path = NULL;

          /* one variant suffices for what does not depend on the engine */
          if (!tests[t].all_variants && i != G_N_ELEMENTS (variants) - 3)
            continue;
          path = g_strdup_printf ("/kvtier/fs/slab/%s/%s/%s", e, d, tests[t].name);
          g_test_add_vtable (path, sizeof (Fixture), &variants[i], (GTestFixtureFunc) setup,
                             tests[t].func, (GTestFixtureFunc) teardown);
        }
    }
  return g_test_run ();
}
