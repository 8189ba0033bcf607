/* registry.c — the built-in strategies, in one table, and the platform allocator names.
 *
 * Strategy names are matched without regard to case ("QuickPool", "quickpool"). Platform names are
 * exact: HOST, DEVICE, DEVICE::N, PINNED, UM, and the growable HOST_VMM, DEVICE_VMM, DEVICE_VMM::N
 * (HostVmm and DeviceVmm with their defaults). A platform allocator is created the first time its
 * name is asked for.
 */
#include "rap_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const rap_strategy *const builtins[] = {
    &rapi_quick_pool_strategy,
    &rapi_fault_strategy,
    &rapi_resource_aware_pool_strategy,
    &rapi_dynamic_pool_list_strategy,
    &rapi_thread_safe_strategy,
    &rapi_thread_cache_strategy,
    &rapi_size_limiter_strategy,
    &rapi_fixed_pool_strategy,
    &rapi_stream_ordered_strategy,
    &rapi_pinned_strategy,
    &rapi_host_vmm_strategy,
    &rapi_device_vmm_strategy,
    &rapi_planned_strategy,
};

const rap_strategy *rapi_registry_builtin(const char *name) {
  for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
    if (strcasecmp(builtins[i]->name, name) == 0) return builtins[i];
  return NULL;
}

int rapi_registry_platform(const char *name, const rap_strategy **strategy, char *opts, size_t cap) {
  if (strcmp(name, "HOST") == 0) {
    *strategy = &rapi_host_platform;
    snprintf(opts, cap, "%s", "");
    return RAP_OK;
  }
  if (strcmp(name, "DEVICE") == 0 || strcmp(name, "PINNED") == 0 || strcmp(name, "UM") == 0) {
    *strategy = &rapi_cuda_platform;
    snprintf(opts, cap, "kind=%s", name[0] == 'D' ? "device" : name[0] == 'P' ? "pinned" : "managed");
    return RAP_OK;
  }
  if (strcmp(name, "HOST_VMM") == 0 || strcmp(name, "DEVICE_VMM") == 0) {
    *strategy = name[0] == 'H' ? &rapi_host_vmm_strategy : &rapi_device_vmm_strategy;
    snprintf(opts, cap, "%s", "");
    return RAP_OK;
  }
  bool vmm = strncmp(name, "DEVICE_VMM::", 12) == 0;
  if (vmm || strncmp(name, "DEVICE::", 8) == 0) {
    const char *n = name + (vmm ? 12 : 8);
    char *end = NULL;
    unsigned long id = (*n >= '0' && *n <= '9') ? strtoul(n, &end, 10) : 0;
    if (end == NULL || *end != '\0' || id > 4096)
      return rapi_fail(RAP_ERR_NOT_FOUND, "'%s' is not a platform allocator: %s::N needs a "
                       "device number", name, vmm ? "DEVICE_VMM" : "DEVICE");
    *strategy = vmm ? &rapi_device_vmm_strategy : &rapi_cuda_platform;
    snprintf(opts, cap, vmm ? "device=%lu" : "kind=device device=%lu", id);
    return RAP_OK;
  }
  static const char *const platforms[] = {"HOST", "DEVICE", "PINNED", "UM", "HOST_VMM", "DEVICE_VMM"};
  for (size_t i = 0; i < sizeof platforms / sizeof platforms[0]; i++)
    if (strcasecmp(name, platforms[i]) == 0)
      return rapi_fail(RAP_ERR_NOT_FOUND, "no allocator named '%s' (platform names are exact: '%s')",
                       name, platforms[i]);
  return rapi_fail(RAP_ERR_NOT_FOUND, "no allocator named '%s' (the platforms are HOST, DEVICE, "
                   "DEVICE::N, PINNED, UM, HOST_VMM, DEVICE_VMM and DEVICE_VMM::N)", name);
}

/* The built-in strategy one slip away from name (QuikPool), or NULL. */
const char *rapi_registry_closest(const char *name) {
  const char *best = NULL;
  size_t best_d = 3;
  for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++) {
    size_t d = rapi_edit_distance(name, builtins[i]->name);
    if (d < best_d) {
      best = builtins[i]->name;
      best_d = d;
    }
  }
  return best;
}

/* The built-in strategies' names, comma-separated, for sentences. */
void rapi_registry_names(char *buf, size_t cap) {
  size_t n = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < sizeof builtins / sizeof builtins[0] && n < cap; i++) {
    int w = snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", builtins[i]->name);
    if (w < 0) break;
    n += (size_t)w;
  }
}

/* RAP_ALLOCATOR_<NAME>, with the name upper-cased and every other character made '_': the variable
 * whose spec overrides the allocator's (spec.c reads it). */
void rapi_env_var(const char *name, char *var, size_t cap) {
  size_t n = (size_t)snprintf(var, cap, "%s", "RAP_ALLOCATOR_");
  for (const char *c = name; *c && n + 1 < cap; c++)
    var[n++] = isalnum((unsigned char)*c) ? (char)toupper((unsigned char)*c) : '_';
  var[n] = '\0';
}
