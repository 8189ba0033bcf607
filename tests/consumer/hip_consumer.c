/* hip_consumer.c — an outside program that includes rap/hip.h from an installed HIP build of rap:
 * the package must carry HIP's include directory and platform macro. Runs with or without a GPU. */
#include <rap/hip.h>
#include <stdio.h>

int main(void) {
  rap_manager *rm;
  rap_resource *r;
  if (rap_manager_create(&rm) != RAP_OK) return 1;
  int st = rap_resource_create_hip_stream(rm, &r);   /* RAP_ERR_UNSUPPORTED without a GPU */
  if (st != RAP_OK && st != RAP_ERR_UNSUPPORTED) {
    fprintf(stderr, "hip_consumer: %s (%s)\n", rap_status_name(st), rap_last_error());
    return 1;
  }
  hipStream_t s = st == RAP_OK ? rap_resource_hip_stream(r) : 0;
  (void)s;
  if (rap_manager_destroy(rm) != RAP_OK) return 1;
  printf("hip consumer: ok (%s)\n", st == RAP_OK ? "a stream was made" : "no GPU here");
  return 0;
}
