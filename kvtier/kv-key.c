/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-key-private.h"

#include <string.h>

#include <xxhash.h>

#include "kv-types.h"

/* Size of the big-endian group suffix of a vLLM OffloadKey. */
#define GROUP_SUFFIX_LEN 4

/**
 * KvKey:
 *
 * The identity of one chunk: a chained block hash (opaque bytes) plus a
 * 32-bit KV-cache group index. Two equal keys name the same KV bytes.
 *
 * A key is the C form of vLLM's `OffloadKey`, which is the byte string
 * `block_hash || be32(group)`; [ctor@Kv.Key.new_from_offload_key] and
 * [method@Kv.Key.to_offload_key] convert between the two.
 *
 * Keys are immutable and atomically reference counted, so they may be
 * shared and used from any thread. [method@Kv.Key.hash] and
 * [method@Kv.Key.equal] make them usable as #GHashTable keys; the hash is
 * computed once, when the key is created.
 */
G_DEFINE_BOXED_TYPE (KvKey, kv_key, kv_key_ref, kv_key_unref)

/**
 * kv_key_new:
 * @hash: (array length=hash_len) (element-type guint8): the block hash
 * @hash_len: length of @hash in bytes; must not be 0
 * @group: the KV-cache group index
 *
 * Creates a key from a block hash and a group index. @hash is copied.
 *
 * May be called from any thread.
 *
 * Returns: (transfer full): a new key
 */
KvKey *
kv_key_new (const guint8 *hash,
            gsize         hash_len,
            guint32       group)
{
  KvKey *self;
  guint32 group_be;

  g_return_val_if_fail (hash != NULL, NULL);
  g_return_val_if_fail (hash_len > 0, NULL);
  g_return_val_if_fail (hash_len <= G_MAXSIZE - sizeof (KvKey) - GROUP_SUFFIX_LEN, NULL);

  self = g_malloc (sizeof (KvKey) + hash_len + GROUP_SUFFIX_LEN);
  g_atomic_ref_count_init (&self->ref_count);
  self->group = group;
  self->hash_len = hash_len;
  memcpy (self->data, hash, hash_len);
  group_be = GUINT32_TO_BE (group);
  memcpy (self->data + hash_len, &group_be, GROUP_SUFFIX_LEN);
  /* XXH3 output is well mixed, so its low 32 bits make a good table hash. */
  self->hash = (guint) XXH3_64bits (self->data, hash_len + GROUP_SUFFIX_LEN);

  return self;
}

/**
 * kv_key_new_from_bytes:
 * @hash: the block hash; must not be empty
 * @group: the KV-cache group index
 *
 * Creates a key from a block hash held in a #GBytes and a group index. The
 * bytes are copied.
 *
 * May be called from any thread.
 *
 * Returns: (transfer full): a new key
 */
KvKey *
kv_key_new_from_bytes (GBytes  *hash,
                       guint32  group)
{
  const guint8 *data;
  gsize len;

  g_return_val_if_fail (hash != NULL, NULL);

  data = g_bytes_get_data (hash, &len);
  g_return_val_if_fail (len > 0, NULL);

  return kv_key_new (data, len, group);
}

/**
 * kv_key_new_from_offload_key:
 * @data: (array length=len) (element-type guint8): a vLLM `OffloadKey`:
 *   the block hash followed by the group index as 4 big-endian bytes
 * @len: length of @data in bytes
 * @error: return location for a #GError
 *
 * Decodes a vLLM `OffloadKey`. @data must hold at least one byte of block
 * hash besides the 4-byte group suffix.
 *
 * May be called from any thread.
 *
 * Returns: (transfer full): a new key, or %NULL with @error set to
 *   %KV_TIER_ERROR_INVALID_ARGUMENT if @data is too short
 */
KvKey *
kv_key_new_from_offload_key (const guint8  *data,
                             gsize          len,
                             GError       **error)
{
  guint32 group_be;

  g_return_val_if_fail (data != NULL || len == 0, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (len <= GROUP_SUFFIX_LEN)
    {
      GString *hex = g_string_sized_new (2 * len);

      for (gsize i = 0; i < len; i++)
        g_string_append_printf (hex, "%02x", data[i]);
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "Invalid offload key “%s” (%" G_GSIZE_FORMAT " bytes): "
                   "expected a block hash followed by a 4-byte big-endian group",
                   hex->str, len);
      g_string_free (hex, TRUE);
      return NULL;
    }

  memcpy (&group_be, data + len - GROUP_SUFFIX_LEN, GROUP_SUFFIX_LEN);

  return kv_key_new (data, len - GROUP_SUFFIX_LEN, GUINT32_FROM_BE (group_be));
}

/**
 * kv_key_ref:
 * @self: a key
 *
 * Takes a reference on @self. Thread-safe.
 *
 * Returns: (transfer full): @self
 */
KvKey *
kv_key_ref (KvKey *self)
{
  g_return_val_if_fail (self != NULL, NULL);

  /* Inline rather than g_atomic_ref_count_inc(), a library call: keys are
   * referenced several times per chunk on the store path. Same check. */
  if (G_UNLIKELY (g_atomic_int_add (&self->ref_count, 1) <= 0))
    g_critical ("kv_key_ref: key %p was already freed", (gpointer) self);

  return self;
}

/**
 * kv_key_unref:
 * @self: (transfer full): a key
 *
 * Drops a reference on @self, freeing it when the last one is gone.
 * Thread-safe.
 */
void
kv_key_unref (KvKey *self)
{
  gint old_count;

  g_return_if_fail (self != NULL);

  old_count = g_atomic_int_add (&self->ref_count, -1);
  if (old_count == 1)
    g_free (self);
  else if (G_UNLIKELY (old_count <= 0))
    g_critical ("kv_key_unref: key %p was already freed", (gpointer) self);
}

/**
 * kv_key_get_hash:
 * @self: a key
 * @hash_len: (out) (optional): return location for the length of the hash
 *
 * Gets the block-hash part of the key, without the group.
 *
 * May be called from any thread.
 *
 * Returns: (array length=hash_len) (element-type guint8) (transfer none):
 *   the block hash, owned by @self
 */
const guint8 *
kv_key_get_hash (const KvKey *self,
                 gsize       *hash_len)
{
  g_return_val_if_fail (self != NULL, NULL);

  if (hash_len != NULL)
    *hash_len = self->hash_len;

  return self->data;
}

/**
 * kv_key_get_hash_bytes:
 * @self: a key
 *
 * Gets a copy of the block-hash part of the key, without the group.
 *
 * May be called from any thread.
 *
 * Returns: (transfer full): the block hash
 */
GBytes *
kv_key_get_hash_bytes (const KvKey *self)
{
  g_return_val_if_fail (self != NULL, NULL);

  return g_bytes_new (self->data, self->hash_len);
}

/**
 * kv_key_get_group:
 * @self: a key
 *
 * Gets the KV-cache group index of the key.
 *
 * May be called from any thread.
 *
 * Returns: the group index
 */
guint32
kv_key_get_group (const KvKey *self)
{
  g_return_val_if_fail (self != NULL, 0);

  return self->group;
}

/**
 * kv_key_to_offload_key:
 * @self: a key
 *
 * Encodes the key as a vLLM `OffloadKey`: the block hash followed by the
 * group index as 4 big-endian bytes.
 *
 * May be called from any thread.
 *
 * Returns: (transfer full): the encoded key
 */
GBytes *
kv_key_to_offload_key (const KvKey *self)
{
  g_return_val_if_fail (self != NULL, NULL);

  return g_bytes_new (self->data, self->hash_len + GROUP_SUFFIX_LEN);
}

/**
 * kv_key_to_string:
 * @self: a key
 *
 * Renders the block-hash part of the key as lowercase hexadecimal, as vLLM
 * does in logs and file names. The group is not included.
 *
 * May be called from any thread.
 *
 * Returns: (transfer full): a newly allocated string
 */
char *
kv_key_to_string (const KvKey *self)
{
  static const char digits[] = "0123456789abcdef";
  char *str;

  g_return_val_if_fail (self != NULL, NULL);

  str = g_malloc (2 * self->hash_len + 1);
  for (gsize i = 0; i < self->hash_len; i++)
    {
      str[2 * i] = digits[self->data[i] >> 4];
      str[2 * i + 1] = digits[self->data[i] & 0xf];
    }
  str[2 * self->hash_len] = '\0';

  return str;
}

/**
 * kv_key_hash:
 * @key: (type Kv.Key) (not nullable): a key
 *
 * Gets a hash value of @key for #GHashTable. The value is computed when the
 * key is created (XXH3 over the `OffloadKey` bytes), so this is O(1).
 * @key must not be %NULL; it is not checked, as this is on the lookup path.
 *
 * May be called from any thread.
 *
 * Returns: a hash value of @key
 */
guint
kv_key_hash (gconstpointer key)
{
  return ((const KvKey *) key)->hash;
}

/**
 * kv_key_equal:
 * @a: (type Kv.Key) (not nullable): a key
 * @b: (type Kv.Key) (not nullable): another key
 *
 * Compares two keys for #GHashTable: they are equal when their groups and
 * block hashes are. Neither may be %NULL; that is not checked, as this is on
 * the lookup path.
 *
 * May be called from any thread.
 *
 * Returns: %TRUE if @a and @b name the same chunk
 */
gboolean
kv_key_equal (gconstpointer a,
              gconstpointer b)
{
  const KvKey *ka = a;
  const KvKey *kb = b;

  if (ka == kb)
    return TRUE;

  /* The cached hashes differ for almost every pair of different keys, so
   * most mismatches (protected-set scans, colliding table probes) end here
   * without reading the block hashes. */
  return ka->hash == kb->hash &&
         ka->group == kb->group &&
         ka->hash_len == kb->hash_len &&
         memcmp (ka->data, kb->data, ka->hash_len) == 0;
}
