/* SPDX-License-Identifier: LGPL-2.1-or-later */

#include "config.h"

#include <fcntl.h>
#include <glib/gstdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kv-enums.h"
#include "kv-host-buffer.h"
#include "kv-types.h"

#define SLOT 4096

static char *
make_tmp_dir (void)
{
  GError *error = NULL;
  char *dir = g_dir_make_tmp ("kvtier-host-buffer-XXXXXX", &error);

  g_assert_no_error (error);
  return dir;
}

static void
fill_slot (KvHostBuffer *buffer,
           guint32       slot,
           guint8        value)
{
  memset (kv_host_buffer_peek_slot (buffer, slot), value, kv_host_buffer_get_slot_size (buffer));
}

static void
assert_slot_filled (KvHostBuffer *buffer,
                    guint32       slot,
                    guint8        value)
{
  const guint8 *p = kv_host_buffer_peek_slot (buffer, slot);

  for (gsize i = 0; i < kv_host_buffer_get_slot_size (buffer); i++)
    g_assert_cmpuint (p[i], ==, value);
}

static void
test_anonymous (void)
{
  GError *error = NULL;
  g_autoptr(KvHostBuffer) buffer = NULL;
  guint8 *data;
  guint n_slots = 0;
  guint64 slot_size = 0;
  KvHostBufferBacking backing = KV_HOST_BUFFER_BACKING_FILE;
  int fd = 0;
  g_autofree char *path = NULL;

  buffer = kv_host_buffer_new (4, 2 * SLOT, &error);
  g_assert_no_error (error);
  g_assert_nonnull (buffer);

  g_assert_cmpuint (kv_host_buffer_get_n_slots (buffer), ==, 4);
  g_assert_cmpuint (kv_host_buffer_get_slot_size (buffer), ==, 2 * SLOT);
  g_assert_cmpuint (kv_host_buffer_get_size (buffer), ==, 8 * SLOT);
  g_assert_cmpint (kv_host_buffer_get_backing (buffer), ==, KV_HOST_BUFFER_BACKING_ANONYMOUS);
  g_assert_cmpint (kv_host_buffer_get_fd (buffer), ==, -1);

  g_object_get (buffer,
                "n-slots", &n_slots,
                "slot-size", &slot_size,
                "backing", &backing,
                "fd", &fd,
                "path", &path,
                NULL);
  g_assert_cmpuint (n_slots, ==, 4);
  g_assert_cmpuint (slot_size, ==, 2 * SLOT);
  g_assert_cmpint (backing, ==, KV_HOST_BUFFER_BACKING_ANONYMOUS);
  g_assert_cmpint (fd, ==, -1);
  g_assert_null (path);

  data = kv_host_buffer_get_data (buffer);
  g_assert_nonnull (data);
  g_assert_cmpuint (GPOINTER_TO_SIZE (data) % SLOT, ==, 0);
  for (guint i = 0; i < 4; i++)
    g_assert_true (kv_host_buffer_peek_slot (buffer, i) == data + i * 2 * SLOT);

  /* Fresh anonymous memory reads as zeroes; slots do not overlap. */
  assert_slot_filled (buffer, 3, 0);
  for (guint i = 0; i < 4; i++)
    fill_slot (buffer, i, 0x10 + i);
  for (guint i = 0; i < 4; i++)
    assert_slot_filled (buffer, i, 0x10 + i);
}

static void
test_anonymous_hugepage_size (void)
{
  GError *error = NULL;
  g_autoptr(KvHostBuffer) buffer = NULL;

  /* 4 MiB: large enough to be advised to use huge pages. */
  buffer = kv_host_buffer_new (2, 2 * 1024 * 1024, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (kv_host_buffer_get_size (buffer), ==, 4 * 1024 * 1024);
  fill_slot (buffer, 1, 0xab);
  assert_slot_filled (buffer, 1, 0xab);
  assert_slot_filled (buffer, 0, 0);
}

static void
test_memfd_shared (void)
{
  GError *error = NULL;
  g_autoptr(KvHostBuffer) first = NULL;
  g_autoptr(KvHostBuffer) second = NULL;
  g_autoptr(GBytes) hello = g_bytes_new_static ("hello", 5);
  int fd;
  struct stat st;

  first = kv_host_buffer_new_shared (3, SLOT, &error);
  g_assert_no_error (error);
  g_assert_cmpint (kv_host_buffer_get_backing (first), ==, KV_HOST_BUFFER_BACKING_MEMFD);
  fd = kv_host_buffer_get_fd (first);
  g_assert_cmpint (fd, >=, 0);
  g_assert_cmpint (fstat (fd, &st), ==, 0);
  g_assert_cmpint (st.st_size, ==, 3 * SLOT);
  g_assert_cmpint (fcntl (fd, F_GETFD) & FD_CLOEXEC, !=, 0);

  g_assert_true (kv_host_buffer_write_slot (first, 1, hello, &error));
  g_assert_no_error (error);

  second = kv_host_buffer_new_for_fd (fd, 3, SLOT, &error);
  g_assert_no_error (error);
  g_assert_cmpint (kv_host_buffer_get_backing (second), ==, KV_HOST_BUFFER_BACKING_MEMFD);
  /* The second buffer owns a duplicate, not the caller's descriptor. */
  g_assert_cmpint (kv_host_buffer_get_fd (second), >=, 0);
  g_assert_cmpint (kv_host_buffer_get_fd (second), !=, fd);
  g_assert_true (kv_host_buffer_get_data (second) != kv_host_buffer_get_data (first));

  /* Same memory both ways. */
  g_assert_cmpmem (kv_host_buffer_peek_slot (second, 1), 5, "hello", 5);
  memcpy (kv_host_buffer_peek_slot (second, 2), "world", 5);
  g_assert_cmpmem (kv_host_buffer_peek_slot (first, 2), 5, "world", 5);

  /* The second buffer outlives the first and its descriptor. */
  g_clear_object (&first);
  g_assert_cmpint (fcntl (fd, F_GETFD), ==, -1);
  g_assert_cmpmem (kv_host_buffer_peek_slot (second, 1), 5, "hello", 5);
}

static void
test_memfd_keeps_caller_fd (void)
{
  GError *error = NULL;
  g_autoptr(KvHostBuffer) first = NULL;
  KvHostBuffer *second;
  int fd;

  first = kv_host_buffer_new_shared (1, SLOT, &error);
  g_assert_no_error (error);
  fd = kv_host_buffer_get_fd (first);

  second = kv_host_buffer_new_for_fd (fd, 1, SLOT, &error);
  g_assert_no_error (error);
  g_object_unref (second);

  /* Finalizing the second buffer closed only its duplicate. */
  g_assert_cmpint (fcntl (fd, F_GETFD), !=, -1);
}

static void
test_for_fd_too_small (void)
{
  GError *error = NULL;
  g_autoptr(KvHostBuffer) small = NULL;
  KvHostBuffer *buffer;

  small = kv_host_buffer_new_shared (2, SLOT, &error);
  g_assert_no_error (error);

  buffer = kv_host_buffer_new_for_fd (kv_host_buffer_get_fd (small), 3, SLOT, &error);
  g_assert_null (buffer);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "8192"));
  g_assert_nonnull (strstr (error->message, "12288"));
  g_clear_error (&error);
}

static void
test_for_file_create_open (void)
{
  GError *error = NULL;
  g_autofree char *dir = make_tmp_dir ();
  g_autofree char *path = g_build_filename (dir, "vllm_offload_test.mmap", NULL);
  g_autofree char *prop_path = NULL;
  KvHostBuffer *creator;
  KvHostBuffer *opener;
  struct stat st;

  creator = kv_host_buffer_new_for_file (path, 2, SLOT, &error);
  g_assert_no_error (error);
  g_assert_cmpint (kv_host_buffer_get_backing (creator), ==, KV_HOST_BUFFER_BACKING_FILE);
  g_assert_cmpint (kv_host_buffer_get_fd (creator), >=, 0);
  g_object_get (creator, "path", &prop_path, NULL);
  g_assert_cmpstr (prop_path, ==, path);

  g_assert_cmpint (stat (path, &st), ==, 0);
  g_assert_cmpint (st.st_size, ==, 2 * SLOT);
  g_assert_cmpint (st.st_mode & 0777, ==, 0600);

  fill_slot (creator, 1, 0x5a);

  /* A second opener maps the same file without truncating it. */
  opener = kv_host_buffer_new_for_file (path, 2, SLOT, &error);
  g_assert_no_error (error);
  assert_slot_filled (opener, 1, 0x5a);
  assert_slot_filled (opener, 0, 0);
  fill_slot (opener, 0, 0x33);
  assert_slot_filled (creator, 0, 0x33);

  /* An opener needing fewer slots than the file holds is fine. */
  {
    g_autoptr(KvHostBuffer) smaller = kv_host_buffer_new_for_file (path, 1, SLOT, &error);

    g_assert_no_error (error);
    assert_slot_filled (smaller, 0, 0x33);
  }

  /* Only the creator removes the file. */
  g_object_unref (opener);
  g_assert_true (g_file_test (path, G_FILE_TEST_EXISTS));
  g_object_unref (creator);
  g_assert_false (g_file_test (path, G_FILE_TEST_EXISTS));

  g_assert_cmpint (g_rmdir (dir), ==, 0);
}

static void
test_for_file_too_small (void)
{
  GError *error = NULL;
  g_autofree char *dir = make_tmp_dir ();
  g_autofree char *path = g_build_filename (dir, "region.mmap", NULL);
  g_autoptr(KvHostBuffer) creator = NULL;
  KvHostBuffer *opener;

  creator = kv_host_buffer_new_for_file (path, 2, SLOT, &error);
  g_assert_no_error (error);

  opener = kv_host_buffer_new_for_file (path, 3, SLOT, &error);
  g_assert_null (opener);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, path));
  g_assert_nonnull (strstr (error->message, "8192"));
  g_assert_nonnull (strstr (error->message, "12288"));
  g_clear_error (&error);

  /* A failed opener is not the creator: the file is still there. */
  g_assert_true (g_file_test (path, G_FILE_TEST_EXISTS));
  g_clear_object (&creator);
  g_assert_false (g_file_test (path, G_FILE_TEST_EXISTS));
  g_assert_cmpint (g_rmdir (dir), ==, 0);
}

static void
test_for_file_error (void)
{
  GError *error = NULL;
  g_autofree char *dir = make_tmp_dir ();
  g_autofree char *path = g_build_filename (dir, "missing", "region.mmap", NULL);
  KvHostBuffer *buffer;

  buffer = kv_host_buffer_new_for_file (path, 1, SLOT, &error);
  g_assert_null (buffer);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND);
  g_assert_nonnull (strstr (error->message, path));
  g_clear_error (&error);

  g_assert_cmpint (g_rmdir (dir), ==, 0);
}

static void
test_bad_geometry (void)
{
  GError *error = NULL;
  KvHostBuffer *buffer;

  buffer = kv_host_buffer_new (2, 1000, &error);
  g_assert_null (buffer);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "1000"));
  g_clear_error (&error);

  buffer = kv_host_buffer_new_shared (2, SLOT + 512, &error);
  g_assert_null (buffer);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "4608"));
  g_clear_error (&error);

  buffer = kv_host_buffer_new (2, 0, &error);
  g_assert_null (buffer);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "slot-size 0"));
  g_clear_error (&error);

  buffer = kv_host_buffer_new (0, SLOT, &error);
  g_assert_null (buffer);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "n-slots 0"));
  g_clear_error (&error);
}

static void
test_initable_properties (void)
{
  GError *error = NULL;
  g_autoptr(KvHostBuffer) shared = NULL;
  g_autoptr(KvHostBuffer) mapped = NULL;

  /* Construction through properties, as a binding or config would do it. */
  shared = g_initable_new (KV_TYPE_HOST_BUFFER, NULL, &error,
                           "n-slots", 2,
                           "slot-size", (guint64) SLOT,
                           "backing", KV_HOST_BUFFER_BACKING_MEMFD,
                           NULL);
  g_assert_no_error (error);
  g_assert_cmpint (kv_host_buffer_get_fd (shared), >=, 0);

  mapped = g_initable_new (KV_TYPE_HOST_BUFFER, NULL, &error,
                           "n-slots", 2,
                           "slot-size", (guint64) SLOT,
                           "backing", KV_HOST_BUFFER_BACKING_MEMFD,
                           "fd", kv_host_buffer_get_fd (shared),
                           NULL);
  g_assert_no_error (error);
  fill_slot (shared, 1, 7);
  assert_slot_filled (mapped, 1, 7);

  /* A file backing without a path is an error, not a crash. */
  g_assert_null (g_initable_new (KV_TYPE_HOST_BUFFER, NULL, &error,
                                 "n-slots", 1,
                                 "slot-size", (guint64) SLOT,
                                 "backing", KV_HOST_BUFFER_BACKING_FILE,
                                 NULL));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "path"));
  g_clear_error (&error);
}

static void
test_read_slot_zero_copy (void)
{
  GError *error = NULL;
  KvHostBuffer *buffer;
  GBytes *bytes;
  gsize len = 0;
  const guint8 *data;

  buffer = kv_host_buffer_new (3, SLOT, &error);
  g_assert_no_error (error);
  g_object_add_weak_pointer (G_OBJECT (buffer), (gpointer *) &buffer);
  fill_slot (buffer, 2, 0xc3);

  bytes = kv_host_buffer_read_slot (buffer, 2, &error);
  g_assert_no_error (error);
  data = g_bytes_get_data (bytes, &len);
  g_assert_true (data == kv_host_buffer_peek_slot (buffer, 2));
  g_assert_cmpuint (len, ==, SLOT);

  /* The bytes keep the buffer (and its mapping) alive. */
  g_object_unref (buffer);
  g_assert_nonnull (buffer);
  g_assert_cmpuint (data[0], ==, 0xc3);
  g_assert_cmpuint (data[SLOT - 1], ==, 0xc3);

  g_bytes_unref (bytes);
  g_assert_null (buffer);
}

static void
test_write_slot (void)
{
  GError *error = NULL;
  g_autoptr(KvHostBuffer) buffer = NULL;
  g_autofree guint8 *full = g_malloc (SLOT + 1);
  g_autoptr(GBytes) too_big = NULL;
  g_autoptr(GBytes) exact = NULL;
  g_autoptr(GBytes) part = g_bytes_new_static ("abc", 3);

  buffer = kv_host_buffer_new (2, SLOT, &error);
  g_assert_no_error (error);
  fill_slot (buffer, 0, 0xee);

  memset (full, 0x11, SLOT + 1);
  too_big = g_bytes_new (full, SLOT + 1);
  g_assert_false (kv_host_buffer_write_slot (buffer, 0, too_big, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "4097"));
  g_clear_error (&error);
  assert_slot_filled (buffer, 0, 0xee);

  exact = g_bytes_new (full, SLOT);
  g_assert_true (kv_host_buffer_write_slot (buffer, 0, exact, &error));
  g_assert_no_error (error);
  assert_slot_filled (buffer, 0, 0x11);
  assert_slot_filled (buffer, 1, 0);

  /* A short write fills the start of the slot and leaves the rest. */
  g_assert_true (kv_host_buffer_write_slot (buffer, 0, part, &error));
  g_assert_no_error (error);
  g_assert_cmpmem (kv_host_buffer_peek_slot (buffer, 0), 3, "abc", 3);
  g_assert_cmpuint (((guint8 *) kv_host_buffer_peek_slot (buffer, 0))[3], ==, 0x11);
}

static void
test_slot_out_of_range (void)
{
  GError *error = NULL;
  g_autoptr(KvHostBuffer) buffer = NULL;
  g_autoptr(GBytes) part = g_bytes_new_static ("abc", 3);

  buffer = kv_host_buffer_new (2, SLOT, &error);
  g_assert_no_error (error);

  g_assert_null (kv_host_buffer_read_slot (buffer, 2, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "Slot 2"));
  g_clear_error (&error);

  g_assert_false (kv_host_buffer_write_slot (buffer, 7, part, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "Slot 7"));
  g_clear_error (&error);

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*slot < self->n_slots*");
  g_assert_null (kv_host_buffer_peek_slot (buffer, 2));
  g_test_assert_expected_messages ();
}

/* Each slot carries its own checksum; nothing is known at first, and a
 * write through the buffer forgets it. */
static void
test_slot_checksum (void)
{
  GError *error = NULL;
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (3, SLOT, &error);
  g_autoptr(GBytes) bytes = g_bytes_new_static ("abc", 3);
  guint64 checksum = 7;

  g_assert_no_error (error);
  for (guint32 slot = 0; slot < 3; slot++)
    g_assert_false (kv_host_buffer_get_slot_checksum (buffer, slot, &checksum));
  g_assert_cmpuint (checksum, ==, 7);

  kv_host_buffer_set_slot_checksum (buffer, 1, G_GUINT64_CONSTANT (0xfedcba9876543210));
  kv_host_buffer_set_slot_checksum (buffer, 2, 0);
  g_assert_false (kv_host_buffer_get_slot_checksum (buffer, 0, &checksum));
  g_assert_true (kv_host_buffer_get_slot_checksum (buffer, 1, &checksum));
  g_assert_cmpuint (checksum, ==, G_GUINT64_CONSTANT (0xfedcba9876543210));
  /* 0 is a checksum like any other */
  g_assert_true (kv_host_buffer_get_slot_checksum (buffer, 2, &checksum));
  g_assert_cmpuint (checksum, ==, 0);

  g_assert_true (kv_host_buffer_write_slot (buffer, 1, bytes, &error));
  g_assert_no_error (error);
  g_assert_false (kv_host_buffer_get_slot_checksum (buffer, 1, NULL));
  g_assert_true (kv_host_buffer_get_slot_checksum (buffer, 2, NULL));
  kv_host_buffer_clear_slot_checksum (buffer, 2);
  g_assert_false (kv_host_buffer_get_slot_checksum (buffer, 2, NULL));

  if (g_test_undefined ())
    {
      g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*slot < self->n_slots*");
      g_assert_false (kv_host_buffer_get_slot_checksum (buffer, 3, &checksum));
      g_test_assert_expected_messages ();
      g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*slot < self->n_slots*");
      kv_host_buffer_set_slot_checksum (buffer, 3, 1);
      g_test_assert_expected_messages ();
    }
}

static void
count_release (gpointer data)
{
  guint *n_released = data;

  (*n_released)++;
}

/* A shared file mapped, then unlinked, as newer vLLM does with its region:
 * the buffer uses the caller's bytes in place, and releases them once. */
static void
test_for_memory_unlinked_region (void)
{
  GError *error = NULL;
  g_autofree char *dir = make_tmp_dir ();
  g_autofree char *path = g_build_filename (dir, "vllm_offload_gone.mmap", NULL);
  KvHostBuffer *buffer;
  g_autoptr(GBytes) slot = NULL;
  KvHostBufferBacking backing = KV_HOST_BUFFER_BACKING_ANONYMOUS;
  guint n_released = 0;
  guint8 *mapping;
  int fd;

  fd = open (path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  g_assert_cmpint (fd, >=, 0);
  g_assert_cmpint (ftruncate (fd, 3 * SLOT), ==, 0);
  mapping = mmap (NULL, 3 * SLOT, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  g_assert_true (mapping != MAP_FAILED);
  close (fd);
  g_assert_cmpint (g_unlink (path), ==, 0);

  buffer = kv_host_buffer_new_for_memory (mapping, 3, SLOT, count_release, &n_released, &error);
  g_assert_no_error (error);
  g_assert_true (kv_host_buffer_get_data (buffer) == (gpointer) mapping);
  g_assert_true (kv_host_buffer_peek_slot (buffer, 2) == (gpointer) (mapping + 2 * SLOT));
  g_assert_cmpint (kv_host_buffer_get_fd (buffer), ==, -1);
  g_assert_cmpuint (kv_host_buffer_get_size (buffer), ==, 3 * SLOT);
  g_object_get (buffer, "backing", &backing, NULL);
  g_assert_cmpint (backing, ==, KV_HOST_BUFFER_BACKING_BORROWED);

  /* Both ways, the same bytes: no copy. */
  mapping[SLOT + 7] = 0xa5;
  slot = kv_host_buffer_read_slot (buffer, 1, &error);
  g_assert_no_error (error);
  g_assert_true (g_bytes_get_data (slot, NULL) == (gconstpointer) (mapping + SLOT));
  g_assert_cmpuint (((const guint8 *) g_bytes_get_data (slot, NULL))[7], ==, 0xa5);
  fill_slot (buffer, 2, 0x3c);
  g_assert_cmpuint (mapping[2 * SLOT + SLOT - 1], ==, 0x3c);

  /* The read slot keeps the buffer; the release waits for both. */
  g_object_unref (buffer);
  g_assert_cmpuint (n_released, ==, 0);
  g_clear_pointer (&slot, g_bytes_unref);
  g_assert_cmpuint (n_released, ==, 1);

  /* The memory is still the caller's: the buffer did not unmap it. */
  g_assert_cmpuint (mapping[2 * SLOT], ==, 0x3c);
  g_assert_cmpint (munmap (mapping, 3 * SLOT), ==, 0);
}

static void
test_for_memory_errors (void)
{
  GError *error = NULL;
  guint n_released = 0;
  guint8 *mapping;
  KvHostBuffer *buffer;

  mapping = mmap (NULL, 2 * SLOT, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  g_assert_true (mapping != MAP_FAILED);

  /* Not page aligned: refused, and the memory handed back at once. */
  buffer = kv_host_buffer_new_for_memory (mapping + 64, 1, SLOT, count_release, &n_released,
                                          &error);
  g_assert_null (buffer);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "aligned"));
  g_clear_error (&error);
  g_assert_cmpuint (n_released, ==, 1);

  /* Bad geometry, likewise. */
  buffer = kv_host_buffer_new_for_memory (mapping, 1, SLOT + 1, count_release, &n_released,
                                          &error);
  g_assert_null (buffer);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  g_assert_cmpuint (n_released, ==, 2);
  buffer = kv_host_buffer_new_for_memory (mapping, 0, SLOT, count_release, &n_released, &error);
  g_assert_null (buffer);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  g_assert_cmpuint (n_released, ==, 3);

  /* No release function: the caller simply keeps its memory. */
  buffer = kv_host_buffer_new_for_memory (mapping, 2, SLOT, NULL, NULL, &error);
  g_assert_no_error (error);
  fill_slot (buffer, 1, 0x11);
  g_object_unref (buffer);
  g_assert_cmpuint (mapping[SLOT], ==, 0x11);

  /* A borrowed buffer made from properties alone has no memory to use. */
  buffer = g_initable_new (KV_TYPE_HOST_BUFFER, NULL, &error,
                           "n-slots", 1, "slot-size", (guint64) SLOT,
                           "backing", KV_HOST_BUFFER_BACKING_BORROWED, NULL);
  g_assert_null (buffer);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "kv_host_buffer_new_for_memory"));
  g_clear_error (&error);

  g_assert_cmpint (munmap (mapping, 2 * SLOT), ==, 0);
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

  g_test_add_func ("/kvtier/host-buffer/anonymous", test_anonymous);
  g_test_add_func ("/kvtier/host-buffer/anonymous-hugepage-size", test_anonymous_hugepage_size);
  g_test_add_func ("/kvtier/host-buffer/memfd-shared", test_memfd_shared);
  g_test_add_func ("/kvtier/host-buffer/memfd-keeps-caller-fd", test_memfd_keeps_caller_fd);
  g_test_add_func ("/kvtier/host-buffer/for-fd-too-small", test_for_fd_too_small);
  g_test_add_func ("/kvtier/host-buffer/for-file/create-open-unlink", test_for_file_create_open);
  g_test_add_func ("/kvtier/host-buffer/for-file/too-small", test_for_file_too_small);
  g_test_add_func ("/kvtier/host-buffer/for-file/error", test_for_file_error);
  g_test_add_func ("/kvtier/host-buffer/for-memory/unlinked-region", test_for_memory_unlinked_region);
  g_test_add_func ("/kvtier/host-buffer/for-memory/errors", test_for_memory_errors);
  g_test_add_func ("/kvtier/host-buffer/bad-geometry", test_bad_geometry);
  g_test_add_func ("/kvtier/host-buffer/initable-properties", test_initable_properties);
  g_test_add_func ("/kvtier/host-buffer/read-slot-zero-copy", test_read_slot_zero_copy);
  g_test_add_func ("/kvtier/host-buffer/write-slot", test_write_slot);
  g_test_add_func ("/kvtier/host-buffer/slot-out-of-range", test_slot_out_of_range);
  g_test_add_func ("/kvtier/host-buffer/slot-checksum", test_slot_checksum);

  return g_test_run ();
}
