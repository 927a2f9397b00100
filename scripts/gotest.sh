#!/usr/bin/env bash
# gotest.sh NAME CMD...: runs a go test command, its output as it comes and
# also in .cache/test-logs/NAME.log. When it fails, what failed is printed
# again at the end: the first lines of each panic, fatal error, data race
# and failed test. A crash of a package prints every goroutine, and a
# reader who sees only the end of the output would otherwise see only
# the last goroutines, not what went wrong.
set -uo pipefail
name=$1
shift
dir=.cache/test-logs
mkdir -p "$dir"
log=$dir/$name.log
"$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
	echo
	echo "=== $name failed (exit $rc); what failed, from $log:"
	awk '
		/^(panic: |fatal error: |WARNING: DATA RACE|--- FAIL|unexpected fault address|\[signal )/ { left = 12; shown++ }
		/^FAIL/ { print; next }
		left > 0 && shown <= 20 { print; left-- }
	' "$log" | head -n 200
fi
exit "$rc"
