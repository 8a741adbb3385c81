/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "contract-factory.h"

#include <string.h>

#include "test-chunk-data.h"
#include "test-object.h"

/*
 * The tiers written in Python and JavaScript, loaded as tier modules
 * (kv_tier_registry_load_tier_module(): the interpreter runs in this
 * process) from tests/tier-contract/tiers: a Python tier that pushes its
 * results, one that is pulled (as vLLM's tiers are), a JavaScript tier
 * whose jobs move in main-loop callbacks, and a tier written against
 * vLLM's interface under kvtier.vllm's wrapper.
 *
 * This program links libkvtier-1 itself, not the tests' static copy: the
 * interpreters reach kvtier through its typelib, which names the shared
 * library, and a second copy of the library would register every type a
 * second time.
 *
 * Their hooks are GObject properties the tiers define: `stalled`, `damage`
 * (a Kv.Key) and `idle`.
 */

static KvTierRegistry *registry;
static GType tier_type;

static gboolean
load_module (const char  *file,
             const char  *class_name,
             char       **skip_reason)
{
  g_autoptr(GError) error = NULL;
  const char *dir = g_getenv ("KVTIER_CONTRACT_TIERS_DIR");
  g_autofree char *path = NULL;
  g_auto(GStrv) names = NULL;

  if (dir == NULL)
    {
      *skip_reason = g_strdup ("KVTIER_CONTRACT_TIERS_DIR is not set (run it through meson test)");
      return FALSE;
    }
  path = g_build_filename (dir, file, NULL);
  registry = kv_tier_registry_new ();
  names = kv_tier_registry_load_tier_module (registry, path, &error);
  if (g_error_matches (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_NO_LOADER))
    {
      *skip_reason = g_strdup_printf ("no loader for %s here: %s", file, error->message);
      g_clear_object (&registry);
      return FALSE;
    }
  g_assert_no_error (error);
  /* a module that imports another defining tiers (kvtier.vllm) registers
   * each class under file.Class */
  for (guint i = 0; names[i] != NULL && tier_type == 0; i++)
    {
      GType type = kv_tier_registry_lookup_tier_type (registry, names[i], &error);

      g_assert_no_error (error);
      if (strstr (g_type_name (type), class_name) != NULL)
        tier_type = type;
    }
  if (tier_type == 0)
    g_error ("tier module %s defines no %s", path, class_name);
  return TRUE;
}

static void
teardown (void)
{
  g_clear_object (&registry);
}

static gboolean
python_push_setup (char **skip_reason)
{
  return load_module ("contract_push.py", "ContractPushTier", skip_reason);
}

static gboolean
python_pull_setup (char **skip_reason)
{
  return load_module ("contract_pull.py", "ContractPyPullTier", skip_reason);
}

static gboolean
gjs_setup (char **skip_reason)
{
  return load_module ("contractTier.js", "ContractJsTier", skip_reason);
}

static gboolean
vllm_setup (char **skip_reason)
{
  return load_module ("contract_vllm.py", "ContractVllmTier", skip_reason);
}

static KvSecondaryTier *
new_tier (KvHostBuffer  *buffer,
          KvClock       *clock,
          gpointer      *state,
          gboolean       main_loop)
{
  g_autoptr(TestProperties) props = test_properties_new (tier_type);
  g_autoptr(GError) error = NULL;
  GObject *tier;

  test_properties_set (props, "tier-type", G_TYPE_STRING, "contract");
  test_properties_set (props, "primary", KV_TYPE_HOST_BUFFER, buffer);
  test_properties_set (props, "clock", KV_TYPE_CLOCK, clock);
  /* a JavaScript tier reports from main-loop callbacks: whatever waits
   * for its jobs iterates the owner thread's context */
  if (main_loop)
    test_properties_set (props, "completion-context", G_TYPE_MAIN_CONTEXT,
                         g_main_context_default ());
  /* Nothing says whether the tier can cancel stores: a Python class made
   * from C gets that from its class (kvtier.vllm's wrapper states it with
   * Kv.SecondaryTier.type_set_can_cancel_stores()). */
  tier = test_properties_new_initable (props, &error);
  g_assert_no_error (error);
  return KV_SECONDARY_TIER (tier);
}

static KvSecondaryTier *
thread_tier_new (KvHostBuffer  *buffer,
                 KvClock       *clock,
                 gpointer      *state)
{
  return new_tier (buffer, clock, state, FALSE);
}

static KvSecondaryTier *
main_loop_tier_new (KvHostBuffer  *buffer,
                    KvClock       *clock,
                    gpointer      *state)
{
  return new_tier (buffer, clock, state, TRUE);
}

static void
no_state (gpointer state)
{
}

static void
stall (gpointer         state,
       KvSecondaryTier *tier,
       gboolean         stalled)
{
  g_object_set (tier, "stalled", stalled, NULL);
}

static void
damage (gpointer         state,
        KvSecondaryTier *tier,
        KvKey           *key)
{
  g_object_set (tier, "damage", key, NULL);
}

static gboolean
is_idle (gpointer         state,
         KvSecondaryTier *tier)
{
  gboolean idle = FALSE;

  g_object_get (tier, "idle", &idle, NULL);
  return idle;
}

#define SLOT 8192
#define CAPS (CONTRACT_CAN_STORE | CONTRACT_CANCELS | CONTRACT_CAN_DAMAGE)

const ContractFactory contract_factories[] = {
  { "python-push", CAPS, SLOT, 0,
    python_push_setup, teardown, thread_tier_new, no_state, stall, damage, is_idle,
    test_chunk_key, test_chunk_fill },
  { "python-pull", CAPS, SLOT, 0,
    python_pull_setup, teardown, thread_tier_new, no_state, stall, damage, is_idle,
    test_chunk_key, test_chunk_fill },
  { "gjs", CAPS, SLOT, 0,
    gjs_setup, teardown, main_loop_tier_new, no_state, stall, damage, is_idle,
    test_chunk_key, test_chunk_fill },
  /* vLLM's interface has no cancellation: a vLLM tier's job runs to its
   * end, and its class says so (not CONTRACT_CANCELS) */
  { "vllm", CONTRACT_CAN_STORE | CONTRACT_CAN_DAMAGE, SLOT, 0,
    vllm_setup, teardown, thread_tier_new, no_state, stall, damage, is_idle,
    test_chunk_key, test_chunk_fill },
};

const guint contract_n_factories = G_N_ELEMENTS (contract_factories);
