/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The tiers the contract suite runs its cases against, one factory each:
 * how to make the tier, what it can do (its capabilities: a case a tier
 * cannot support checks the documented weaker behaviour instead, and says
 * so), and the hooks the cases need to make its storage misbehave. */

#include <kvtier.h>

G_BEGIN_DECLS

typedef enum {
  /* accepts stores; otherwise its chunks exist from the start (seeded) and
   * the manager must make no cascade job for it */
  CONTRACT_CAN_STORE   = 1 << 0,
  /* a store failed at its deadline is never published (the tier passes its
   * job cancellable to the I/O or checks it before publishing); without
   * it, a store may be published late, but only with the bytes it started
   * with (the bytes are on their way, as a command sent to a server), and
   * the tier says so (KvSecondaryTier:can-cancel-stores FALSE) so that the
   * manager keeps the store's slots pinned until it answers */
  CONTRACT_CANCELS     = 1 << 1,
  /* has a probe vfunc: closes its own breaker once its storage is back */
  CONTRACT_PROBES      = 1 << 2,
  /* a stored chunk can be damaged behind the tier's back (damage hook) */
  CONTRACT_CAN_DAMAGE  = 1 << 3,
} ContractCaps;

typedef struct _ContractFactory ContractFactory;

struct _ContractFactory
{
  const char   *name;
  ContractCaps  caps;
  gsize         slot_size;
  /* chunks [0, n_seeded) exist in a tier without CONTRACT_CAN_STORE */
  guint         n_seeded;

  /* Once per program: start what the tier needs (servers, nodes); FALSE
   * with *skip_reason when it cannot run here. May be NULL. */
  gboolean         (*setup)     (char           **skip_reason);
  void             (*teardown)  (void);

  /* A new tier on @buffer whose base class uses @clock (a manual clock),
   * with empty storage of its own; *state is the factory's, for the hooks
   * below and free_state. */
  KvSecondaryTier *(*new_tier)  (KvHostBuffer    *buffer,
                                 KvClock         *clock,
                                 gpointer        *state);
  void             (*free_state) (gpointer        state);

  /* Stops (and restarts) the tier's storage: jobs started while stalled
   * neither finish nor fail until it resumes. */
  void             (*stall)     (gpointer         state,
                                 KvSecondaryTier *tier,
                                 gboolean         stalled);
  /* CONTRACT_CAN_DAMAGE: damages the stored bytes of @key, so that a load
   * of it fails its check. */
  void             (*damage)    (gpointer         state,
                                 KvSecondaryTier *tier,
                                 KvKey           *key);
  /* Whether the tier has finished every job it accepted (reported, or, for
   * a tier reporting through get_finished_jobs, ready to be collected).
   * NULL: no job in flight in the base class. */
  gboolean         (*is_idle)   (gpointer         state,
                                 KvSecondaryTier *tier);

  /* Chunk i's key and bytes. */
  KvKey           *(*key)       (guint            i);
  void             (*fill)      (guint8          *slot,
                                 gsize            len,
                                 guint            i);
};

/* The factories of the program (contract-factories.c for the tiers in C,
 * contract-binding-factories.c for those in Python and JavaScript). */
extern const ContractFactory contract_factories[];
extern const guint           contract_n_factories;

G_END_DECLS
