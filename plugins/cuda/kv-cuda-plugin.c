/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <kvtier.h>

#include "kv-cuda-device.h"

/* Registers the CUDA device under the name `cuda`. Registering touches no
 * CUDA API, so `kvtier plugins` lists the device and its properties on a
 * machine without a GPU or driver; initializing one there fails with
 * KV_CUDA_DEVICE_ERROR_NOT_AVAILABLE. */
static void
kv_cuda_plugin_register (KvTierRegistry *registry,
                         GTypeModule    *module)
{
  g_autoptr(GError) error = NULL;

  if (!kv_tier_registry_register_device_type (registry, "cuda",
                                              KV_TYPE_CUDA_DEVICE, &error))
    g_message ("Cannot register the cuda device: %s", error->message);
}

KV_PLUGIN_DEFINE (kv_cuda_plugin_register);
