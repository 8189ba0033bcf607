#!/usr/bin/env bash
# readme-example.sh — reads an example out of README.md, so that checks use the README's own text:
#   bash scripts/readme-example.sh code HEADING        the first ```c block under "## HEADING"
#   bash scripts/readme-example.sh build-line HEADING  the command in "Build it ... `...`" there
#   bash scripts/readme-example.sh check HEADING FILE  fails, showing the difference, unless the
#                                                      block is FILE as it stands
# RAP_DOC names another page than README.md, RAP_LANG another block language than c.
set -euo pipefail
cd "$(dirname "$0")/.."
what=$1 heading=$2
doc=${RAP_DOC:-README.md} lang=${RAP_LANG:-c}
section=$(awk -v h="## $heading" '$0 == h { on = 1; next } on && /^## / { exit } on' "$doc")
[ -n "$section" ] || { echo "readme-example: $doc has no section \"## $heading\"" >&2; exit 1; }
code() { awk -v f="\`\`\`$lang" '$0 == f && !seen { on = 1; seen = 1; next } on && /^```$/ { exit } on' <<<"$section"; }
case $what in
  code) code ;;
  build-line)
    line=$(tr '\n' ' ' <<<"$section" | grep -o 'Build it [a-z ]*`[^`]*`' | head -1 | sed 's/^[^`]*`//; s/`$//')
    [ -n "$line" ] || { echo "readme-example: no \"Build it ... \`...\`\" under \"## $heading\"" >&2; exit 1; }
    echo "$line" ;;
  check)
    diff -u --label "$doc: ## $heading" --label "$3" <(code) "$3" ||
      { echo "readme-example: $doc's block under \"## $heading\" is not $3: copy the file into it"; exit 1; } ;;
  *) echo "readme-example: code, build-line or check, not '$what'" >&2; exit 1 ;;
esac
