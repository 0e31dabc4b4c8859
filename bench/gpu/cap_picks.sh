#!/bin/bash
# cap_picks.sh - do the builder's GEMM picks hold at the power cap? Run after
# bench/gpu/session.sh (MODELS=bert) in the same device call: it rebuilds the
# BERT b64 plan from copies of its timing cache in which every layer that got
# tactic FROM (default lt3: attention-output and FFN2 in session 8) gets
# each tactic of TO instead (default "lt lt2 lt4"), then times the plans
# against the built one with plan_probe.py, in two orders. Output: one
# ratio a plan, and the plans' tactic lists, under $OUT/cap_picks/.
set -u
D=${KILN_DIR:-.device}
LIBS=/usr/local/cuda/lib64:/usr/local/cuda/lib:/usr/lib/x86_64-linux-gnu
W=/tmp/kiln_bench
FROM=${FROM:-lt3}
TO=${TO:-lt lt2 lt4}
mkdir -p $OUT/cap_picks
if [ ! -f $W/bert.cache ] || [ ! -f $W/bert_opt64.plan ]; then
    echo "cap_picks: run bench/gpu/session.sh with MODELS=bert first"; exit 1
fi
plans=(--plan "built=$W/bert_opt64.plan")
for t in $TO; do
    sed "s/ $FROM / $t /" $W/bert.cache > $W/cap_$t.cache
    KILN_DIR=$D bash bench/gpu/bert_plan.sh $W/cap_$t.plan --timingCacheFile=$W/cap_$t.cache \
        > $OUT/cap_picks/build_$t.txt 2>&1
    echo "build $FROM -> $t rc=$?"
    LD_LIBRARY_PATH=$PWD/$D:$LIBS $D/kiln inspect $W/cap_$t.plan 2>&1 | grep -o "kiln::MatMul *lt[0-9]*" | sort | uniq -c
    plans+=(--plan "$t=$W/cap_$t.plan")
done
LD_LIBRARY_PATH=$PWD/$D:$LIBS timeout 200 python3 bench/gpu/plan_probe.py --kiln $D/libkiln.so --rounds 10 \
    "${plans[@]}" > $OUT/cap_picks/probe1.txt 2>&1
echo "probe rc=$?"; grep -E "median" $OUT/cap_picks/probe1.txt
# the same plans, the built one last
rev=("${plans[@]:2}" "${plans[@]:0:2}")
LD_LIBRARY_PATH=$PWD/$D:$LIBS timeout 200 python3 bench/gpu/plan_probe.py --kiln $D/libkiln.so --rounds 10 \
    "${rev[@]}" > $OUT/cap_picks/probe2.txt 2>&1
echo "probe rc=$?"; grep -E "median" $OUT/cap_picks/probe2.txt
