#!/bin/sh
# Usage: run-if-cpu-has.sh FLAG... -- COMMAND [ARG...]
# Runs COMMAND when /proc/cpuinfo lists every FLAG; otherwise says which
# flags this CPU lacks and exits 77, which ctest reports as a skipped test.
missing=""
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
  case " ${flags#*:} " in
    *" $1 "*) ;;
    *) missing="$missing $1" ;;
  esac
  shift
done
if [ "$1" != "--" ] || [ "$#" -lt 2 ]; then
  echo "usage: run-if-cpu-has.sh FLAG... -- COMMAND [ARG...]" >&2
  exit 2
fi
shift
if [ -n "$missing" ]; then
  echo "skipped: this CPU lacks$missing, so the tests built for it cannot run here"
  exit 77
fi
exec "$@"
