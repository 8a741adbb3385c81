/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <glib.h>

#include "kv-version.h"

#ifndef _KVTIER_EXTERN
# define _KVTIER_EXTERN __attribute__((visibility ("default"))) extern
#endif

#define KVTIER_VERSION_1_0 (G_ENCODE_VERSION (1, 0))

#ifndef KVTIER_VERSION_MIN_REQUIRED
# define KVTIER_VERSION_MIN_REQUIRED KVTIER_VERSION_1_0
#endif

#ifndef KVTIER_VERSION_MAX_ALLOWED
# define KVTIER_VERSION_MAX_ALLOWED KVTIER_VERSION_1_0
#endif

#define KVTIER_AVAILABLE_IN_ALL _KVTIER_EXTERN
#define KVTIER_AVAILABLE_IN_1_0 _KVTIER_EXTERN
