#!/usr/bin/env bash
# callgrind-pairs.sh — instructions per allocate+free pair, as docs/benchmarks.md counts them:
# a driver linked against a librap.a makes one allocator from a spec, does 100 warm-up pairs and
# then N pairs of one size on one resource (the host resource, or a host_async queue); callgrind
# counts the whole program at N = 0 and at N = 100 000, and the difference over 100 000 is one
# pair through the public entry points. Needs valgrind and a default build (make build).
#   bash scripts/callgrind-pairs.sh [path/to/librap.a]     (default build/librap.a)
# SIZES (default "256 65536 1048576 67108864") picks the sizes, in bytes.
set -euo pipefail
lib=${1:-build/librap.a}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/pair.c" <<'C'
#include <rap/rap.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  size_t size = strtoull(argv[2], 0, 0);
  long n = atol(argv[3]);
  rap_manager *rm;
  rap_allocator *a;
  rap_resource *r = NULL;
  if (rap_manager_create(&rm) || rap_allocator_make_spec(rm, "p", argv[1], &a)) return 1;
  if (atoi(argv[4]) && rap_resource_create_host_async(rm, &r)) return 1;
  void *p;
  for (int i = 0; i < 100; i++)
    if (rap_allocate(a, &p, size, r) || rap_deallocate(a, p, r)) return 2;
  for (long i = 0; i < n; i++)
    if (rap_allocate(a, &p, size, r) || rap_deallocate(a, p, r)) return 2;
  if (r) rap_resource_destroy(r);
  return rap_manager_destroy(rm) != 0;
}
C
cuda=()
[ -f /usr/local/cuda/lib64/libcudart_static.a ] && cuda=(-L/usr/local/cuda/lib64 -lcudart_static -lrt)
cc -O2 -Iinclude "$work/pair.c" "$lib" "${cuda[@]}" -lpthread -lm -ldl -o "$work/pair"
count() {
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" "$work/pair" "$@" > /dev/null 2>&1
  awk '/^(summary|totals):/ {print $2; exit}' "$work/cg.out"
}
tc="max_size=64MiB, cache_bytes=256MiB"
sizes=${SIZES:-256 65536 1048576 67108864}
printf 'instructions per pair\tresource'
for size in $sizes; do printf '\t%s B' "$size"; done
printf '\n'
for spec in "QuickPool(HOST)" "DynamicPoolList(HOST)" "ResourceAwarePool(HOST)" \
            "ThreadSafe(QuickPool(HOST))" "ThreadCache(QuickPool(HOST), $tc)" \
            "ThreadCache(ResourceAwarePool(HOST), $tc)"; do
  for queue in 0 1; do
    case "$spec" in QuickPool*|DynamicPool*|ThreadSafe*) [ $queue = 1 ] && continue ;; esac
    line="$spec	$([ $queue = 1 ] && echo host_async || echo host)"
    for size in $sizes; do
      a=$(count "$spec" $size 0 $queue)
      b=$(count "$spec" $size 100000 $queue)
      line="$line	$(( (b - a + 50000) / 100000 ))"
    done
    printf '%s\n' "$line"
  done
done
