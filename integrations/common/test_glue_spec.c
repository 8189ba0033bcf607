/* test_glue_spec.c — the spec each device's pool is made from (rap_glue.c's build_spec): one
 * RAP_*_SPEC serves every device, so device platforms and device options get the device's number
 * unless the spec names one. Also: a memory fraction outside (0, 1] is refused with a sentence
 * before anything else is looked at. No GPU needed: nothing here calls CUDA. Prints "N passed, N
 * failed". */
#include "rap_glue.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const rap_glue_config glue_cfg = {"test", "RAP_TEST_GLUE_SPEC",
                                  "ResourceAwarePool(DEVICE::{device}, initial_size=64MiB)", NULL, NULL};

int main(void) {
  static const char *const cases[][2] = {
      {"", "ResourceAwarePool(DEVICE::2, initial_size=64MiB)"},   /* the default */
      {"QuickPool(DEVICE, initial_size=1GiB)", "QuickPool(DEVICE::2, initial_size=1GiB)"},
      {"ResourceAwarePool(DEVICE_VMM, initial_size=2MiB)", "ResourceAwarePool(DEVICE_VMM::2, initial_size=2MiB)"},
      {"QuickPool(DeviceVmm(reserve=40GiB))", "QuickPool(DeviceVmm(device=2, reserve=40GiB))"},
      {"ThreadSafe(StreamOrdered())", "ThreadSafe(StreamOrdered(device=2))"},
      {"StreamOrdered(pool=new)", "StreamOrdered(device=2, pool=new)"},
      {"StreamOrdered(device=0, pool=new)", "StreamOrdered(device=0, pool=new)"},   /* named */
      {"QuickPool(DEVICE::1)", "QuickPool(DEVICE::1)"},
      {"QuickPool(DEVICE_VMM::0)", "QuickPool(DEVICE_VMM::0)"},
      {"QuickPool(MYDEVICE)", "QuickPool(MYDEVICE)"},
      {"QuickPool(DEVICE::{device})", "QuickPool(DEVICE::2)"},
      {"QuickPool(DEVICE_VMM::{device}), x=DEVICE", "QuickPool(DEVICE_VMM::2), x=DEVICE"},   /* placeholder: as written */
  };
  int passed = 0, failed = 0;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    setenv("RAP_TEST_GLUE_SPEC", cases[i][0], 1);
    char buf[512];
    int st = glue_spec(2, buf, sizeof buf);
    if (st == RAP_OK && strcmp(buf, cases[i][1]) == 0) {
      passed++;
    } else {
      failed++;
      printf("'%s' gave '%s' (status %d), expected '%s'\n", cases[i][0], buf, st, cases[i][1]);
    }
  }
  static const double bad_fractions[] = {0.0, -0.5, 1.5, 1.0000001, NAN, INFINITY};
  for (size_t i = 0; i < sizeof bad_fractions / sizeof *bad_fractions; i++) {
    int st = glue_set_memory_fraction(0, bad_fractions[i]);
    if (st == RAP_ERR_INVALID && strstr(rap_last_error(), "(0, 1]") != NULL) {
      passed++;
    } else {
      failed++;
      printf("memory fraction %g gave status %d ('%s'), expected RAP_ERR_INVALID with a sentence\n",
             bad_fractions[i], st, rap_last_error());
    }
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
