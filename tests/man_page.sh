#!/bin/sh
# hgsim(1) renders (man -l, groff warnings on and fatal) and names every command of hgsim.
# Usage: man_page.sh MAN PAGE
set -eu
man=$1 page=$2
[ -s "$page" ] || { echo "man_page.sh: $page is missing or empty (the hgsim_man target writes it)" >&2; exit 1; }
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
MANWIDTH=100 MANROFFOPT=-ww "$man" -l "$page" > "$out" 2> "$err" </dev/null
if [ -s "$err" ]; then
  echo "man_page.sh: man -l $page warned:" >&2
  cat "$err" >&2
  exit 1
fi
for section in NAME SYNOPSIS DESCRIPTION COMMANDS "EXIT STATUS" ENVIRONMENT; do
  grep -q "^$section" "$out" || { echo "man_page.sh: no section $section" >&2; exit 1; }
done
for command in check models gpus run plan sweep results plot live "validate live" codecs profile; do
  grep -q "^   hgsim $command\$" "$out" || { echo "man_page.sh: no subsection for hgsim $command" >&2; exit 1; }
done
# Every option of hgsim run is on the page.
for option in --plan --fidelity --profile --layer-profile --trace --trace-filter --plot --allow-oom; do
  grep -q -- "$option" "$out" || { echo "man_page.sh: hgsim run's $option is not on the page" >&2; exit 1; }
done
echo "man_page.sh: $page renders ($(wc -l < "$out") lines)"
