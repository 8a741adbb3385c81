/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Helpers shared by the fs-tier test programs (each includes this once). */

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <glib/gstdio.h>
#include <gobject/gvaluecollector.h>
#include <kvtier.h>

#include "kv-chunk-format.h"
#include "test-chunk-data.h"
#include "kv-fs-config.h"
#include "kv-fs-tier.h"

/* A small chunk: tests move many of them on 2 cores. */
#define FS_TEST_SLOT 8192
/* The slots of a layout=slab test tier unless a test sets max-size. */
#define FS_TEST_SLAB_SLOTS 64

typedef struct
{
  KvFsIoEngine   engine;
  KvFsODirect    o_direct;
  KvFsLayoutKind layout;
} FsVariant;

/* Valgrind does not let a thread blocked in io_uring_enter() release its
 * lock, so the uring engine hangs under it: valgrind runs (the `valgrind`
 * test setup sets KVTIER_UNDER_VALGRIND) skip it, and `auto` means the
 * thread pool there. */
G_GNUC_UNUSED static gboolean
fs_test_skip_engine (KvFsIoEngine engine)
{
  return engine == KV_FS_IO_ENGINE_URING && g_getenv ("KVTIER_UNDER_VALGRIND") != NULL;
}

G_GNUC_UNUSED static KvFsIoEngine
fs_test_engine (KvFsIoEngine engine)
{
  if (engine == KV_FS_IO_ENGINE_AUTO && g_getenv ("KVTIER_UNDER_VALGRIND") != NULL)
    return KV_FS_IO_ENGINE_THREADS;
  return engine;
}

G_GNUC_UNUSED static const char *
fs_engine_name (KvFsIoEngine engine)
{
  switch (engine)
    {
    case KV_FS_IO_ENGINE_URING: return "uring";
    case KV_FS_IO_ENGINE_GIO: return "gio";
    case KV_FS_IO_ENGINE_THREADS: return "threads";
    default: return "auto";
    }
}

/* Creates the directories above @path (0700), as a tier would. */
G_GNUC_UNUSED static void
fs_test_make_parent (const char *path)
{
  g_autofree char *dir = g_path_get_dirname (path);

  g_assert_cmpint (g_mkdir_with_parents (dir, 0700), ==, 0);
}

/* The identity vLLM's FileMapper would digest, for layout=vllm tests. */
#define FS_TEST_VLLM_IDENTITY \
  "{\"model_name\": \"meta-llama/Llama-3.1-8B\", \"tokens_per_hash\": 16, " \
  "\"blocks_per_file\": 1, \"tp_size\": 1, \"pp_size\": 1, \"pcp_size\": 1, " \
  "\"dcp_size\": 1, \"dtype\": \"torch.bfloat16\", " \
  "\"kv_cache_groups\": [{\"tokens_per_block\": 16, \"layer_names\": " \
  "[\"model.layers.0.self_attn.attn\", \"model.layers.1.self_attn.attn\"]}], " \
  "\"inference_engine\": \"vllm\"}"

/* Fills slot @slot of @buffer with chunk @i's bytes as the slot's new
 * writer would: the checksum a verified load left with the slot (see
 * kv_host_buffer_get_slot_checksum()) is of its old bytes. */
G_GNUC_UNUSED static void
fs_test_fill_slot (KvHostBuffer *buffer,
                   guint32       slot,
                   gsize         len,
                   guint         i)
{
  kv_host_buffer_clear_slot_checksum (buffer, slot);
  test_chunk_fill (kv_host_buffer_peek_slot (buffer, slot), len, i);
}

G_GNUC_UNUSED static char *
fs_test_make_dir (void)
{
  g_autoptr(GError) error = NULL;
  char *dir = g_dir_make_tmp ("kvtier-fs-test-XXXXXX", &error);

  g_assert_no_error (error);
  return dir;
}

G_GNUC_UNUSED static void
fs_test_rm_rf (const char *path)
{
  g_autoptr(GDir) dir = NULL;
  const char *name;
  GStatBuf st;

  if (g_lstat (path, &st) != 0)
    return;
  if (!S_ISDIR (st.st_mode))
    {
      g_unlink (path);
      return;
    }
  dir = g_dir_open (path, 0, NULL);
  while (dir != NULL && (name = g_dir_read_name (dir)) != NULL)
    {
      g_autofree char *child = g_build_filename (path, name, NULL);

      fs_test_rm_rf (child);
    }
  g_rmdir (path);
}

/* Regular files under @path whose name ends with @suffix. */
G_GNUC_UNUSED static guint
fs_test_count_files (const char *path,
                     const char *suffix)
{
  g_autoptr(GDir) dir = g_dir_open (path, 0, NULL);
  const char *name;
  guint n = 0;

  while (dir != NULL && (name = g_dir_read_name (dir)) != NULL)
    {
      g_autofree char *child = g_build_filename (path, name, NULL);

      if (g_file_test (child, G_FILE_TEST_IS_DIR))
        n += fs_test_count_files (child, suffix);
      else if (suffix == NULL || g_str_has_suffix (name, suffix))
        n++;
    }
  return n;
}

/* Creates a tier with the variant's engine, O_DIRECT mode and layout,
 * 2+2 threads, a manual clock (no deadline passes unless a test moves
 * it), then @first_property... as extra settings. */
G_GNUC_UNUSED static KvFsTier *
fs_test_tier_new_valist (KvHostBuffer    *buffer,
                         const char      *root,
                         const FsVariant *variant,
                         KvClock         *clock,
                         GError         **error,
                         const char      *first_property,
                         va_list          args)
{
  GObject *object;
  const char *names[32];
  GValue values[32] = { G_VALUE_INIT, };
  guint n = 0;
  g_autoptr(KvClock) own_clock = clock ? g_object_ref (clock) : kv_clock_new_manual (1000000);
  GObjectClass *klass = g_type_class_ref (KV_TYPE_FS_TIER);

#define SET(name, type, setter, v) \
  G_STMT_START { names[n] = name; g_value_init (&values[n], type); setter (&values[n], v); n++; } G_STMT_END
  SET ("tier-type", G_TYPE_STRING, g_value_set_string, "fs");
  SET ("primary", KV_TYPE_HOST_BUFFER, g_value_set_object, buffer);
  SET ("root", G_TYPE_STRING, g_value_set_string, root);
  SET ("io-engine", KV_TYPE_FS_IO_ENGINE, g_value_set_enum, fs_test_engine (variant->engine));
  SET ("o-direct", KV_TYPE_FS_ODIRECT, g_value_set_enum, variant->o_direct);
  SET ("layout", KV_TYPE_FS_LAYOUT_KIND, g_value_set_enum, variant->layout);
  SET ("n-read-threads", G_TYPE_UINT, g_value_set_uint, 2);
  SET ("n-write-threads", G_TYPE_UINT, g_value_set_uint, 2);
  SET ("queue-depth", G_TYPE_UINT, g_value_set_uint, 16);
  SET ("clock", KV_TYPE_CLOCK, g_value_set_object, own_clock);
  if (variant->layout == KV_FS_LAYOUT_KIND_VLLM)
    SET ("vllm-identity", G_TYPE_STRING, g_value_set_string, FS_TEST_VLLM_IDENTITY);
  /* layout=slab preallocates max-size: 64 slots by default, in slab
   * files of 16 slots, so that tests cross files */
  if (variant->layout == KV_FS_LAYOUT_KIND_SLAB)
    {
      SET ("max-size", G_TYPE_UINT64, g_value_set_uint64,
           (guint64) FS_TEST_SLAB_SLOTS * (FS_TEST_SLOT + KV_CHUNK_HEADER_SIZE));
      SET ("slab-size", G_TYPE_UINT64, g_value_set_uint64,
           (guint64) KV_SLAB_HEADER_SIZE + 16 * (guint64) (FS_TEST_SLOT + KV_CHUNK_HEADER_SIZE));
    }
#undef SET

  for (const char *name = first_property; name != NULL; name = va_arg (args, const char *))
    {
      GParamSpec *pspec = g_object_class_find_property (klass, name);
      g_autofree char *msg = NULL;

      g_assert_nonnull (pspec);
      /* later settings replace defaults above */
      for (guint i = 0; i < n; i++)
        if (g_strcmp0 (names[i], name) == 0)
          {
            g_value_unset (&values[i]);
            names[i] = names[n - 1];
            values[i] = values[n - 1];
            memset (&values[n - 1], 0, sizeof (GValue));
            n--;
            break;
          }
      names[n] = name;
      G_VALUE_COLLECT_INIT (&values[n], pspec->value_type, args, 0, &msg);
      g_assert_null (msg);
      n++;
    }

  object = g_object_new_with_properties (KV_TYPE_FS_TIER, n, names, values);
  if (!g_initable_init (G_INITABLE (object), NULL, error))
    g_clear_object (&object);
  for (guint i = 0; i < n; i++)
    g_value_unset (&values[i]);
  g_type_class_unref (klass);
  return (KvFsTier *) object;
}

G_GNUC_UNUSED static KvFsTier *
fs_test_tier_new_full (KvHostBuffer    *buffer,
                       const char      *root,
                       const FsVariant *variant,
                       KvClock         *clock,
                       GError         **error,
                       const char      *first_property,
                       ...)
{
  va_list args;
  KvFsTier *tier;

  va_start (args, first_property);
  tier = fs_test_tier_new_valist (buffer, root, variant, clock, error, first_property, args);
  va_end (args);
  return tier;
}

G_GNUC_UNUSED static KvFsTier *
fs_test_tier_new (KvHostBuffer    *buffer,
                  const char      *root,
                  const FsVariant *variant,
                  const char      *first_property,
                  ...)
{
  g_autoptr(GError) error = NULL;
  va_list args;
  KvFsTier *tier;

  va_start (args, first_property);
  tier = fs_test_tier_new_valist (buffer, root, variant, NULL, &error, first_property, args);
  va_end (args);
  g_assert_no_error (error);
  g_assert_nonnull (tier);
  return tier;
}

/* Submits a job of @n keys (test_chunk_key (first + i)) on @slots and waits
 * for its result. Stores fill the slots with each key's pattern first. */
G_GNUC_UNUSED static KvJobResult *
fs_test_run_job (KvFsTier       *tier,
                 guint64         id,
                 gboolean        is_load,
                 KvKey * const  *keys,
                 const guint32  *slots,
                 guint           n,
                 KvRequest      *request)
{
  KvSecondaryTier *st = KV_SECONDARY_TIER (tier);
  g_autoptr(KvRequest) own_request = request ? g_object_ref (request) : kv_request_new ("req", NULL);
  g_autoptr(KvTransferJob) job = kv_transfer_job_new (id, keys, slots, n, is_load, own_request);
  g_autoptr(GError) error = NULL;
  KvJobResult *found = NULL;
  KvJobResult **results;

  if (is_load)
    g_assert_true (kv_secondary_tier_submit_load (st, job, &error));
  else
    g_assert_true (kv_secondary_tier_submit_store (st, job, &error));
  g_assert_no_error (error);
  g_assert_true (kv_secondary_tier_drain_jobs (st, &error));
  g_assert_no_error (error);
  results = kv_secondary_tier_get_finished_jobs (st);
  for (guint i = 0; results != NULL && results[i] != NULL; i++)
    {
      g_assert_null (found);
      g_assert_cmpuint (kv_job_result_get_job_id (results[i]), ==, id);
      found = results[i];
    }
  g_free (results);
  g_assert_nonnull (found);
  return found;
}

G_GNUC_UNUSED static void
fs_test_shutdown (KvFsTier *tier)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (kv_secondary_tier_shutdown (KV_SECONDARY_TIER (tier), &error));
  g_assert_no_error (error);
}

/* Runs a python3 snippet (with /usr/bin/python3, independent of the code
 * under test) and returns its stripped stdout. */
G_GNUC_UNUSED static char *
fs_test_python (const char *script)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *out = NULL;
  g_autofree char *err = NULL;
  const char *argv[] = { "/usr/bin/python3", "-c", script, NULL };
  int status = 0;

  if (!g_file_test (argv[0], G_FILE_TEST_IS_EXECUTABLE))
    return NULL;
  g_assert_true (g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_DEFAULT, NULL, NULL,
                               &out, &err, &status, &error));
  g_assert_no_error (error);
  if (!g_spawn_check_wait_status (status, NULL))
    g_error ("python3 failed: %s", err);
  return g_strstrip (g_steal_pointer (&out));
}

/* ---- through a KvTieringManager ---------------------------------------- */

typedef struct
{
  KvHostBuffer     *buffer;
  KvPrimaryTier    *primary;
  KvTieringManager *manager;
  KvFsTier         *tier;
  guint             n_requests;
} FsStack;

G_GNUC_UNUSED static void
fs_stack_init (FsStack  *s,
               guint     n_slots,
               KvFsTier *(*make_tier) (KvHostBuffer *buffer, gpointer data),
               gpointer  data)
{
  g_autoptr(GError) error = NULL;

  s->buffer = kv_host_buffer_new (n_slots, FS_TEST_SLOT, &error);
  g_assert_no_error (error);
  s->primary = kv_primary_tier_new (s->buffer, NULL, TRUE);
  s->manager = kv_tiering_manager_new (s->primary);
  s->tier = make_tier (s->buffer, data);
  g_assert_true (kv_tiering_manager_add_tier (s->manager, KV_SECONDARY_TIER (s->tier), &error));
  g_assert_no_error (error);
}

G_GNUC_UNUSED static void
fs_stack_clear (FsStack *s)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (kv_tiering_manager_shutdown (s->manager, &error));
  g_assert_no_error (error);
  g_clear_object (&s->manager);
  g_clear_object (&s->tier);
  g_clear_object (&s->primary);
  g_clear_object (&s->buffer);
}

G_GNUC_UNUSED static void
fs_stack_step (FsStack *s)
{
  g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);

  kv_tiering_manager_on_schedule_end (s->manager, end);
}

/* Waits for the tier's jobs, then lets the manager take their results
 * (results are consumed at most once per step, at its first entry point,
 * so this ends the current step and runs one more). */
G_GNUC_UNUSED static void
fs_stack_settle (FsStack *s)
{
  g_assert_true (kv_secondary_tier_drain_jobs (KV_SECONDARY_TIER (s->tier), NULL));
  fs_stack_step (s);
  fs_stack_step (s);
}

/* The engine's path for a GPU → primary store: prepare, fill each new
 * slot with its key's bytes (test_chunk_key (first + i)), complete; the
 * manager then cascades to the fs tier. Returns how many keys were new. */
G_GNUC_UNUSED static guint
fs_stack_store (FsStack *s,
                guint    first,
                guint    n)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *id = g_strdup_printf ("store-%u", s->n_requests++);
  g_autoptr(KvRequest) request = kv_request_new (id, NULL);
  g_autoptr(KvPrepareStoreResult) prepared = NULL;
  g_autoptr(GPtrArray) keys = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_key_unref);
  KvKey * const *to_store;
  const guint32 *chunk_ids;
  guint n_to_store = 0;

  for (guint i = 0; i < n; i++)
    g_ptr_array_add (keys, test_chunk_key (first + i));
  kv_tiering_manager_on_new_request (s->manager, request);
  prepared = kv_tiering_manager_prepare_store (s->manager, (KvKey * const *) keys->pdata, n,
                                               request, &error);
  g_assert_no_error (error);
  g_assert_nonnull (prepared);
  to_store = kv_prepare_store_result_get_keys_to_store (prepared, &n_to_store);
  chunk_ids = kv_prepare_store_result_get_chunk_ids (prepared, NULL);
  for (guint i = 0; i < n_to_store; i++)
    for (guint k = 0; k < n; k++)
      if (kv_key_equal (to_store[i], keys->pdata[k]))
        test_chunk_fill (kv_host_buffer_peek_slot (s->buffer, chunk_ids[i]), FS_TEST_SLOT, first + k);
  if (n_to_store > 0)
    kv_tiering_manager_complete_store (s->manager, to_store, n_to_store, request, TRUE);
  kv_tiering_manager_on_request_finished (s->manager, request);
  fs_stack_settle (s);
  return n_to_store;
}

/* Promotes key @index from the fs tier (it must not be in the primary):
 * returns the final lookup result, and with a HIT checks the bytes. */
G_GNUC_UNUSED static KvLookupResult
fs_stack_promote (FsStack *s,
                  guint    index)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *id = g_strdup_printf ("load-%u", s->n_requests++);
  g_autoptr(KvRequest) request = kv_request_new (id, NULL);
  g_autoptr(KvKey) key = test_chunk_key (index);
  KvLookupResult r;
  guint32 chunk = 0;

  kv_tiering_manager_on_new_request (s->manager, request);
  r = kv_tiering_manager_lookup (s->manager, key, request);
  if (r == KV_LOOKUP_RESULT_HIT_PENDING)
    {
      fs_stack_step (s);             /* submits the promotion */
      fs_stack_settle (s);           /* the load lands, the manager sees it */
      r = kv_tiering_manager_lookup (s->manager, key, request);
    }
  if (r == KV_LOOKUP_RESULT_HIT)
    {
      g_autofree guint32 *chunks = NULL;
      guint n_chunks = 0;

      chunks = kv_tiering_manager_prepare_load (s->manager, &key, 1, request, &n_chunks, &error);
      g_assert_no_error (error);
      g_assert_nonnull (chunks);
      g_assert_cmpuint (n_chunks, ==, 1);
      chunk = chunks[0];
      g_assert_true (test_chunk_check (kv_host_buffer_peek_slot (s->buffer, chunk), FS_TEST_SLOT, index));
      kv_tiering_manager_complete_load (s->manager, &key, 1, request);
    }
  kv_tiering_manager_on_request_finished (s->manager, request);
  fs_stack_step (s);
  return r;
}

/* No primary slot is pinned or half-written. */
G_GNUC_UNUSED static void
fs_stack_assert_no_pins (FsStack *s,
                         guint    n_keys)
{
  for (guint i = 0; i < n_keys; i++)
    {
      g_autoptr(KvKey) key = test_chunk_key (i);
      gint ref = 0;

      if (kv_primary_tier_get_ref_count (s->primary, key, &ref))
        g_assert_cmpint (ref, ==, 0);
    }
  g_assert_cmpuint (kv_primary_tier_get_n_write_pending (s->primary), ==, 0);
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (s->manager), ==, 0);
}
