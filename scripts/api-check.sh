#!/usr/bin/env bash
# api-check.sh [SOURCE_DIR] — every public name the C headers declare has an entry in docs/api.md.
#
# The names are taken from include/rap/*.h (the C headers only: a C++ header beside them is not
# this check's) with comments removed: functions and types (rap_...), enum constants and macros
# (RAP_...). Left out: include guards (RAP_*_H) and helper macros ending in '_' that a header
# #undefs. A name counts as documented where docs/api.md has it as a word. A ctest (api.check)
# and `make test` run it; it prints each missing name and fails.
set -euo pipefail
# --self-test SOURCE_DIR: the check fails on a copy of the headers that declares a function, an
# enum constant and a macro docs/api.md does not have, naming each, and passes on the copy as it was.
if [ "${1:-}" = "--self-test" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/include/rap" "$tmp/docs"
  cp "$2"/include/rap/*.h "$tmp/include/rap/"
  cp "$2/docs/api.md" "$tmp/docs/"
  bash "$0" "$tmp" > /dev/null || { echo "api-check self-test: the copy as it was fails" >&2; exit 1; }
  printf '%s\n' 'int rap_selftest_undocumented(void); /* rap_in_a_comment */' \
    'enum { RAP_SELFTEST_CONSTANT = 1 };' '#define RAP_SELFTEST_MACRO 1' > "$tmp/include/rap/extra.h"
  printf '%s\n' 'int rap_selftest_in_cpp(void);' > "$tmp/include/rap/extra.hpp"   # not a C header
  if bash "$0" "$tmp" 2> "$tmp/said"; then
    echo "api-check self-test: undocumented names passed" >&2
    exit 1
  fi
  for n in rap_selftest_undocumented RAP_SELFTEST_CONSTANT RAP_SELFTEST_MACRO; do
    grep -q "'$n'" "$tmp/said" || { echo "api-check self-test: '$n' was not named" >&2; exit 1; }
  done
  ! grep -qE "rap_in_a_comment|rap_selftest_in_cpp" "$tmp/said" ||
    { echo "api-check self-test: a comment or a C++ header was read" >&2; exit 1; }
  echo "api-check self-test: undocumented names are found and named"
  exit 0
fi
src=${1:-$(cd "$(dirname "$0")/.." && pwd)}
doc="$src/docs/api.md"
[ -f "$doc" ] || { echo "api-check: $doc is missing" >&2; exit 1; }
names() {
  for h in "$src"/include/rap/*.h; do
    # Comments out (block and line), then every rap_/RAP_ identifier.
    perl -0777 -pe 's{/\*.*?\*/}{ }gs; s{//[^\n]*}{}g' "$h" |
      grep -oE '\b(rap|RAP)_[A-Za-z0-9_]+\b' || true
  done | sort -u | grep -vE '^RAP_[A-Z0-9_]*_H$|_$'
}
missing=0
count=0
while read -r name; do
  count=$((count + 1))
  if ! grep -qw -- "$name" "$doc"; then
    echo "api-check: '$name' (include/rap/) has no entry in docs/api.md" >&2
    missing=$((missing + 1))
  fi
done < <(names)
if [ "$missing" -ne 0 ]; then
  echo "api-check: $missing of $count public names undocumented" >&2
  exit 1
fi
echo "api-check: all $count public names of include/rap/*.h are in docs/api.md"
