/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A tier under a KvTieringManager as an engine drives it: a primary of a
 * few slots, the engine's store path (prepare, fill, complete: the manager
 * cascades to the tier) and load path (lookup until settled, promotion,
 * prepare_load, check the bytes, complete), steps, and the check that
 * nothing is left pinned or half-written. */

#include <kvtier.h>

G_BEGIN_DECLS

typedef KvSecondaryTier *(*TestStackTierFunc) (KvHostBuffer *buffer,
                                               gpointer      data);

typedef struct
{
  KvHostBuffer     *buffer;
  KvPrimaryTier    *primary;
  KvTieringManager *manager;
  KvSecondaryTier  *tier;
  guint             n_requests;
  /* chunk i's key and bytes: test_chunk_key() and test_chunk_fill() unless
   * a test sets others after test_stack_init() */
  KvKey          *(*key)  (guint   i);
  void            (*fill) (guint8 *slot,
                           gsize   len,
                           guint   i);
} TestStack;

void           test_stack_init            (TestStack         *s,
                                           guint              n_slots,
                                           gsize              slot_size,
                                           TestStackTierFunc  make_tier,
                                           gpointer           data);
void           test_stack_clear           (TestStack         *s);
void           test_stack_step            (TestStack         *s);
void           test_stack_settle          (TestStack         *s);
guint          test_stack_store           (TestStack         *s,
                                           guint              first,
                                           guint              n);
KvLookupResult test_stack_lookup_settled  (TestStack         *s,
                                           KvKey             *key,
                                           KvRequest         *request);
KvLookupResult test_stack_promote         (TestStack         *s,
                                           guint              index);
gboolean       test_stack_chunk_is        (TestStack         *s,
                                           guint32            slot,
                                           guint              index);
void           test_stack_assert_no_pins  (TestStack         *s,
                                           guint              n_keys);

G_END_DECLS
