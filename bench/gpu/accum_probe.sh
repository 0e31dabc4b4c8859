#!/bin/bash
# accum_probe.sh - what float16 accumulation buys BERT-base at batch 64. Run
# after bench/gpu/session.sh (MODELS=bert) in the same device call: builds
# the BERT b64 plan again with --fp16Accumulation (a timing cache of its
# own, so every GEMM times its "lt" and "lth" tactics), lists the GEMM
# tactics it kept, and times it against the default plan with
# plan_probe.py in two orders (which also prints the largest output
# difference to the default plan). Output under $OUT/accum/.
set -u
D=${KILN_DIR:-.device}
LIBS=/usr/local/cuda/lib64:/usr/local/cuda/lib:/usr/lib/x86_64-linux-gnu
W=/tmp/kiln_bench
mkdir -p $OUT/accum
if [ ! -f $W/bert_opt64.plan ]; then
    echo "accum_probe: run bench/gpu/session.sh with MODELS=bert first"; exit 1
fi
rm -f $W/acc16.cache
KILN_DIR=$D bash bench/gpu/bert_plan.sh $W/bert_acc16.plan --fp16Accumulation \
    --timingCacheFile=$W/acc16.cache > $OUT/accum/build.txt 2>&1
echo "build --fp16Accumulation rc=$?"; grep -E "Engine built|rror" $OUT/accum/build.txt
LD_LIBRARY_PATH=$PWD/$D:$LIBS $D/kiln inspect $W/bert_acc16.plan > $OUT/accum/inspect.txt 2>&1
grep -o "kiln::MatMul *lth*[0-9]*" $OUT/accum/inspect.txt | sort | uniq -c
for order in "built acc16" "acc16 built"; do
    args=()
    for t in $order; do
        [ $t = built ] && args+=(--plan "built=$W/bert_opt64.plan") || args+=(--plan "acc16=$W/bert_acc16.plan")
    done
    LD_LIBRARY_PATH=$PWD/$D:$LIBS timeout 150 python3 bench/gpu/plan_probe.py --kiln $D/libkiln.so \
        --rounds 10 "${args[@]}" > "$OUT/accum/probe_${order// /_}.txt" 2>&1
    echo "probe ($order) rc=$?"; grep -E "median|diff" "$OUT/accum/probe_${order// /_}.txt"
done
