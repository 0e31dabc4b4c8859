#!/bin/sh
# replay.sh - what ctest runs for a fuzz target: every seed-corpus and
# regression input once, then a bounded number of mutations from a fixed
# seed, so a CI run is the same run every time (open-ended search is
# scripts/fuzz.sh). Run from the build's tests/fuzz folder.
# Usage: replay.sh TARGET SOURCE_DIR MUTATIONS SEED
set -eu
t=$1 src=$2 mutations=$3 seed=$4
work=work_$t
rm -rf "$work"
cp -r "$src/corpus_$t" "$work" # libFuzzer adds what it finds to the first folder
n=$(find "$work" "$src/regressions_$t" -type f | wc -l)
echo "fuzz_$t: replaying $n corpus and regression inputs, then $mutations mutations with -seed=$seed"
echo "fuzz_$t: to repeat: cd $(pwd) && $0 $*"
# -runs counts the replayed inputs too; -timeout is per input, generous for a
# sanitizer build on a loaded machine (alone each input takes under 2 s)
exec "./fuzz_$t" -seed="$seed" -runs=$((n + mutations)) -timeout=120 -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="crash-$t-" "$work" "$src/regressions_$t"
