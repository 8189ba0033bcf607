#!/bin/sh
# trace-env.sh PROGRAM RAP_TRACE_TOOL — RAP_TRACE in the environment: PROGRAM, traced, leaves a
# trace whose summary shows its allocators' calls.
set -eu
t=$(mktemp "${TMPDIR:-/tmp}/rap-env-trace.XXXXXX")
trap 'rm -f "$t"' EXIT
RAP_TRACE="$t" "$1" > /dev/null
"$2" summary "$t" > "$t.summary"
cat "$t.summary"
grep -q "user calls" "$t.summary" && grep -q "alloc " "$t.summary"
rm -f "$t.summary"
