#!/usr/bin/env bash
# The man page documents every long option of every command and every exit
# code. Usage: man_drift.sh MTPQ MANPAGE
set -u
MTPQ=$1 MAN=$2
fail=0 pass=0
while read -r cmd opt _help; do
  # roff escapes dashes: --json is written \-\-json
  esc=$(printf '%s' "$opt" | sed 's/-/\\\\-/g')
  if grep -q -- "$esc" "$MAN"; then pass=$((pass + 1))
  else echo "FAIL: option $opt of '$cmd' missing from $MAN"; fail=$((fail + 1)); fi
done < <("$MTPQ" help options)
for code in $("$MTPQ" help exit-codes | awk '{print $1}' | sort -un); do
  if sed -n '/^\.SH "EXIT STATUS"/,/^\.SH "STATUS NAMES"/p' "$MAN" | grep -q "^\.B $code\$"; then pass=$((pass + 1))
  else echo "FAIL: exit code $code missing from EXIT STATUS"; fail=$((fail + 1)); fi
done
for name in $("$MTPQ" help exit-codes | awk '{print $2}'); do
  if grep -qw -- "$name" "$MAN"; then pass=$((pass + 1))
  else echo "FAIL: status $name missing from $MAN"; fail=$((fail + 1)); fi
done
for fmt in $("$MTPQ" help formats | awk '/^[a-z]/{print $1}'); do
  esc=$(printf "%s" "$fmt" | sed 's/-/\\\\-/g')
  if sed -n '/^\.SH FORMATS/,/^\.SH [^F]/p' "$MAN" | grep -q -- "^\.B $esc\$"; then pass=$((pass + 1))
  else echo "FAIL: format $fmt missing from FORMATS"; fail=$((fail + 1)); fi
done
echo "man_drift: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
