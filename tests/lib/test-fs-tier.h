/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The fs tier (plugins/fs, linked statically) as its tests make it: a
 * variant (engine, O_DIRECT mode, layout), small slots, a manual clock and
 * any property set. */

#include <kvtier.h>

#include "kv-chunk-format.h"
#include "kv-fs-config.h"
#include "kv-fs-tier.h"

G_BEGIN_DECLS

/* A small chunk: tests move many of them on 2 cores. */
#define FS_TEST_SLOT 8192
/* The slots of a layout=slab test tier unless a test sets max-size. */
#define FS_TEST_SLAB_SLOTS 64

/* The identity vLLM's FileMapper would digest, for layout=vllm tests. */
#define FS_TEST_VLLM_IDENTITY \
  "{\"model_name\": \"meta-llama/Llama-3.1-8B\", \"tokens_per_hash\": 16, " \
  "\"blocks_per_file\": 1, \"tp_size\": 1, \"pp_size\": 1, \"pcp_size\": 1, " \
  "\"dcp_size\": 1, \"dtype\": \"torch.bfloat16\", " \
  "\"kv_cache_groups\": [{\"tokens_per_block\": 16, \"layer_names\": " \
  "[\"model.layers.0.self_attn.attn\", \"model.layers.1.self_attn.attn\"]}], " \
  "\"inference_engine\": \"vllm\"}"

typedef struct
{
  KvFsIoEngine   engine;
  KvFsODirect    o_direct;
  KvFsLayoutKind layout;
} FsVariant;

gboolean      fs_test_skip_engine     (KvFsIoEngine     engine);
KvFsIoEngine  fs_test_engine          (KvFsIoEngine     engine);
const char   *fs_engine_name          (KvFsIoEngine     engine);
void          fs_test_make_parent     (const char      *path);
char         *fs_test_python          (const char      *script);

KvFsTier     *fs_test_tier_new_valist (KvHostBuffer    *buffer,
                                       const char      *root,
                                       const FsVariant *variant,
                                       KvClock         *clock,
                                       GError         **error,
                                       const char      *first_property,
                                       va_list          args);
KvFsTier     *fs_test_tier_new_full   (KvHostBuffer    *buffer,
                                       const char      *root,
                                       const FsVariant *variant,
                                       KvClock         *clock,
                                       GError         **error,
                                       const char      *first_property,
                                       ...);
KvFsTier     *fs_test_tier_new        (KvHostBuffer    *buffer,
                                       const char      *root,
                                       const FsVariant *variant,
                                       const char      *first_property,
                                       ...);
void          fs_test_shutdown        (KvFsTier        *tier);

G_END_DECLS
