#!/bin/bash
# session.sh - one device call for the CUDA backend, everything that belongs
# together: the CUDA kernel tests, the ONNX node conformance cases on the GPU,
# and the ResNet-50 / BERT-base benchmark against PyTorch with kiln's
# per-layer profiles, and the model zoo on the GPU (SKIP_TESTS=1 /
# SKIP_CONFORMANCE=1 / SKIP_MODELS=1 / SKIP_BENCH=1 leave parts out; MICRO lists the kernel
# micro-benchmarks, default attn; WGMMA=1 runs bench/gpu/wgmma_probe.cu; BENCH_ARGS
# go to bench_models.py; EXEC=1 times the benchmark's plans with kiln exec; TRACE=1 traces BERT b64 batches under load (trace_probe.py); ENERGY=1 measures energy a batch (energy_probe.py); TACTIC_LOG=1 rebuilds the BERT b64 plan with every tactic's time logged; ZOO=all or ZOO=model,... runs bench/gpu/zoo.py, more real models against PyTorch; ZOO_USERS=model,... runs bench/gpu/zoo_users.py, the zoo exported through the libraries' own forwards (ZOO_EXPORTERS); with a list, ZOO_PROFILE=1 adds PyTorch eager's kernels for them, bench/gpu/torch_profile.py).
# Prepare on the build machine (scripts/device_pack.sh
# fills .device/), carry .device, run from the repository root; logs and
# results land in $OUT.
set -u
D=${KILN_DIR:-.device}
export PYTHONUNBUFFERED=1
LIBS=/usr/local/cuda/lib64:/usr/local/cuda/lib:/usr/lib/x86_64-linux-gnu
[ -f $D/bins.tgz ] && tar xzf $D/bins.tgz -C $D  # scripts/device_pack.sh packs them
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $OUT/env.txt
# clocks, power and temperature through the whole call (throttling shows here)
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv,noheader -lms 250 > $OUT/smi.txt 2>&1 &
SMI=$!
if [ "${SKIP_TESTS:-0}" != 1 ]; then
    echo "== CUDA kernel tests"
    LD_LIBRARY_PATH=$PWD/$D:$LIBS timeout 200 $D/test_cuda_ops > $OUT/test_cuda_ops.log 2>&1
    echo "test_cuda_ops rc=$?"; grep -E "^(FAIL|NOREF)" $OUT/test_cuda_ops.log | head -20; tail -2 $OUT/test_cuda_ops.log
fi
if [ -x $D/bench_cuda_kernels ]; then
    for m in ${MICRO:-attn}; do  # attn, bert64, r50nhwc, ltsearch, mem (bench_cuda_kernels.c); none
        [ "$m" = none ] && continue
        echo "== kernel micro-benchmark $m (every tactic)"
        LD_LIBRARY_PATH=$PWD/$D:$LIBS timeout 120 $D/bench_cuda_kernels 30 $m > $OUT/micro_$m.log 2>&1
        grep -E "^=|per batch" $OUT/micro_$m.log
    done
fi
if [ "${WGMMA:-0}" = 1 ] && [ -x $D/wgmma_probe ]; then
    echo "== wgmma GEMM probe against cuBLAS"
    LD_LIBRARY_PATH=$PWD/$D:$LIBS timeout 120 $D/wgmma_probe 30 > $OUT/wgmma_probe.log 2>&1
    echo "wgmma_probe rc=$?"; cat $OUT/wgmma_probe.log
fi
if [ -n "${NCU_MICRO:-}" ] && command -v ncu >/dev/null; then
    # hardware counters of chosen kernels in the micro-benchmark: entries
    # "mode:tactic:kernel-regex" (base clocks, as ncu locks them)
    mkdir -p $OUT/prof
    for e in $NCU_MICRO; do
        IFS=: read -r mode tac rx <<< "$e"
        echo "== ncu: $mode $tac ($rx)"
        BENCH_TACTIC=$tac LD_LIBRARY_PATH=$PWD/$D:$LIBS timeout 120 ncu --set detailed -k regex:"$rx" \
            --launch-skip 2 --launch-count 1 $D/bench_cuda_kernels 3 $mode > $OUT/prof/ncu_${mode}_${tac}.txt 2>&1
        echo "ncu rc=$?"; grep -E "Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Memory Throughput|Compute \(SM\)" $OUT/prof/ncu_${mode}_${tac}.txt | head -8
    done
fi
if [ -f $D/node.tgz ] && [ "${SKIP_CONFORMANCE:-0}" != 1 ]; then
    echo "== ONNX node conformance on the GPU"
    mkdir -p /tmp/kiln_node && tar xzf $D/node.tgz -C /tmp/kiln_node
    LD_LIBRARY_PATH=$PWD/$D:$LIBS timeout 240 $D/run_node_tests --backend cuda --data /tmp/kiln_node/node \
        --jobs 16 --results $OUT/conformance_cuda.txt > $OUT/conformance_cuda.log 2>&1
    echo "conformance rc=$?"; tail -1 $OUT/conformance_cuda.log
    grep -E "^test_\S+ failed" $OUT/conformance_cuda.txt | cut -c1-200 | head -40
fi
if [ "${SKIP_MODELS:-0}" != 1 ]; then
    echo "== model zoo on the GPU against ONNX Runtime (FP32, then FP16)"
    for cfg in "fp32|--backend=cuda|1e-3" "fp16|--backend=cuda --fp16|3e-2"; do
        IFS='|' read -r tag flags tol <<< "$cfg"
        LD_LIBRARY_PATH=$PWD/$D:$LIBS timeout 300 python3 tests/models/run_model_tests.py \
            --kiln $D/kiln --work /tmp/kiln_models_$tag --build-args="$flags" --tol $tol \
            > $OUT/models_$tag.log 2>&1
        echo "models $tag rc=$?"; grep -E "FAIL|PASSED|error" $OUT/models_$tag.log | head -12
    done
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
    echo "== ResNet-50 and BERT-base against PyTorch"
    KILN_CLI_LIBS=$LIBS LD_LIBRARY_PATH=$PWD/$D timeout ${BENCH_TIMEOUT:-420} python3 bench/gpu/bench_models.py \
        --kiln $D/libkiln.so --cli $D/kiln --models ${MODELS:-resnet50,bert} --profile $OUT/prof \
        --out $OUT/results.md ${BENCH_ARGS:-} > $OUT/bench.log 2>&1
    echo "bench rc=$?"; grep -E "^\||Runtime on|rror" $OUT/bench.log | tail -24
    if [ "${EXEC:-0}" = 1 ]; then
        # kiln exec's own summary (trtexec's method) on the benchmark's plans:
        # with and without the copies in and out, one stream and two
        mkdir -p $OUT/prof
        echo "== kiln exec on the benchmark plans"
        for m in resnet50 bert; do
            for b in 1 64; do
                p=/tmp/kiln_bench/${m}_opt$b.plan
                [ -f $p ] || continue
                if [ $m = resnet50 ]; then sh=input:${b}x3x224x224; else sh=input_ids:${b}x128,attention_mask:${b}x128; fi
                for v in "copies|" "nocopies|--noDataTransfers" "streams2|--noDataTransfers --infStreams=2"; do
                    IFS='|' read -r tag fl <<< "$v"
                    f=$OUT/prof/exec_${m}_b${b}_$tag.txt
                    LD_LIBRARY_PATH=$PWD/$D:$LIBS timeout 60 $D/kiln exec --loadEngine=$p --shapes=$sh \
                        --duration=3 --avgRuns=100 --exportTimes=$OUT/prof/times_${m}_b${b}_$tag.json $fl > $f 2>&1
                    echo "$m b$b $tag rc=$? $(grep -E '^\[I\] Throughput' $f) $(grep -E 'GPU Compute Time: min' $f | grep -oE 'median = [0-9.e+-]+ ms')"
                done
            done
        done
        gzip -f $OUT/prof/times_*.json 2>/dev/null
    fi
    if [ "${TACTIC_LOG:-0}" = 1 ] && [ -f /tmp/kiln_bench/bert.onnx ]; then
        # the BERT b64 plan built again, no timing cache, with every tactic's time
        # as the builder measured it (the layers' picks against bench_cuda_kernels')
        mkdir -p $OUT/prof
        KILN_DIR=$D bash bench/gpu/bert_plan.sh /tmp/kiln_bench/bert_tactics.plan --verbose \
            > $OUT/prof/bert_tactics.txt 2>&1
        echo "tactic log rc=$?"; grep -E "layer.0/(attention/output|output)/dense.*tactic" $OUT/prof/bert_tactics.txt | cut -c1-160 | head -20
    fi
    if [ "${TRACE:-0}" = 1 ] && [ -f /tmp/kiln_bench/bert_opt64.plan ]; then
        # kernel times inside BERT b64 batches under sustained load (PyTorch's
        # profiler), kiln's plan and torch.compile; TRACE_ARGS go to trace_probe.py
        echo "== trace: BERT b64 under load, kiln and torch.compile"
        LD_LIBRARY_PATH=$PWD/$D:$LIBS timeout 300 python3 bench/gpu/trace_probe.py --kiln $D/libkiln.so \
            --plan kiln=/tmp/kiln_bench/bert_opt64.plan ${TRACE_ARGS:-} > $OUT/trace.txt 2>&1
        echo "trace rc=$?"; grep -vE "^ +[0-9.-]+ +[0-9.]+  " $OUT/trace.txt | tail -70
    fi
    if [ "${ENERGY:-0}" = 1 ] && [ -f /tmp/kiln_bench/bert_opt64.plan ]; then
        # energy a batch at the power cap (NVML's counter): kiln's BERT b64 plan, a
        # kiln plan of its GEMMs alone, PyTorch's cuBLASLt GEMMs and torch.compile;
        # ENERGY_ARGS go to energy_probe.py
        echo "== energy: BERT b64 and its GEMMs alone at the power cap"
        LD_LIBRARY_PATH=$PWD/$D:$LIBS timeout 400 python3 bench/gpu/energy_probe.py --kiln $D/libkiln.so \
            --cli $D/kiln ${ENERGY_ARGS:-} > $OUT/energy.txt 2>&1
        echo "energy rc=$?"; grep -vE "^ {4}" $OUT/energy.txt | grep -vi warn | tail -24
    fi
    if [ "${NCU:-0}" = 1 ] && command -v ncu >/dev/null && [ -f /tmp/kiln_bench/bert_opt64.plan ]; then
        # every kernel of a BERT b64 run (graph replay) with its device time, caches left warm,
        # clocks as the GPU sets them
        echo "== ncu: BERT b64 kernel times"
        mkdir -p $OUT/prof
        LD_LIBRARY_PATH=$PWD/$D:$LIBS timeout 200 ncu --metrics gpu__time_duration.sum --cache-control none --clock-control none \
            --csv --launch-skip ${NCU_SKIP:-0} --launch-count ${NCU_COUNT:-600} $D/kiln exec \
            --loadEngine=/tmp/kiln_bench/bert_opt64.plan --shapes=input_ids:64x128,attention_mask:64x128 \
            --backend=cuda --warmUp=0 --iterations=3 --duration=0 > $OUT/prof/ncu_bert64.csv 2> $OUT/prof/ncu_bert64.err
        echo "ncu rc=$?"; tail -3 $OUT/prof/ncu_bert64.err; wc -l $OUT/prof/ncu_bert64.csv
    fi
    if [ -n "${NCU_PLAN:-}" ] && command -v ncu >/dev/null && [ -f /tmp/kiln_bench/bert_opt64.plan ]; then
        # Nsight Compute's full report (stall reasons included) of the BERT b64
        # plan's kernels matching the regex, in the graph's order and with warm
        # caches at the boost clock (no CUDA graph, so each launch is seen);
        # NCU_PLAN_ARGS replaces "--set full" (e.g. "--section WarpStateStats --page raw")
        echo "== ncu: BERT b64 kernels matching $NCU_PLAN"
        mkdir -p $OUT/prof
        LD_LIBRARY_PATH=$PWD/$D:$LIBS timeout 200 ncu ${NCU_PLAN_ARGS:---set full} --cache-control none --clock-control none \
            -k regex:"$NCU_PLAN" --launch-skip ${NCU_SKIP:-40} --launch-count ${NCU_COUNT:-4} $D/kiln exec \
            --loadEngine=/tmp/kiln_bench/bert_opt64.plan --shapes=input_ids:64x128,attention_mask:64x128 \
            --backend=cuda --warmUp=0 --iterations=2 --duration=0 --noCudaGraph > $OUT/prof/ncu_plan.txt 2>&1
        echo "ncu rc=$?"; grep -E "^  [a-z_]+.*\(|Duration" $OUT/prof/ncu_plan.txt | cut -c1-150 | head -16
    fi
    [ -d $OUT/prof ] && tar czf $OUT/prof.tgz -C $OUT prof && rm -rf $OUT/prof
fi
if [ -n "${ZOO:-}" ]; then
    # more real models against PyTorch (bench/gpu/zoo.py): ZOO=all or a list
    echo "== model survey against PyTorch: $ZOO"
    ZM=""; [ "$ZOO" != all ] && ZM="--models $ZOO"  # all: zoo.py's own list
    KILN_CLI_LIBS=$LIBS LD_LIBRARY_PATH=$PWD/$D timeout ${ZOO_TIMEOUT:-540} python3 bench/gpu/zoo.py \
        --kiln $D/libkiln.so --cli $D/kiln $ZM --out $OUT/zoo.md ${ZOO_ARGS:-} > $OUT/zoo.log 2>&1
    echo "zoo rc=$?"; grep -E "^\||rror" $OUT/zoo.log | tail -12
    if [ "${ZOO_PROFILE:-0}" = 1 ] && [ "$ZOO" != all ]; then
        # PyTorch eager's kernels for the same models at batch 64, the reference
        # a slow kiln layer is compared with (zoo.py's --profile gives kiln's)
        mkdir -p $OUT/prof
        timeout 300 python3 bench/gpu/torch_profile.py --models $ZOO > $OUT/prof/torch_profile.txt 2>&1
        echo "torch profile rc=$?"
    fi
    [ -d $OUT/prof ] && tar czf $OUT/zoo_prof.tgz -C $OUT prof && rm -rf $OUT/prof
fi
if [ -n "${ZOO_USERS:-}" ]; then
    # the zoo made as users make it (bench/gpu/zoo_users.py: transformers'
    # own forwards through both exporters): ZOO_USERS=model,... and
    # ZOO_EXPORTERS=torchscript17,dynamo23
    echo "== users' zoo against PyTorch: $ZOO_USERS (${ZOO_EXPORTERS:-torchscript17,dynamo23})"
    KILN_CLI_LIBS=$LIBS LD_LIBRARY_PATH=$PWD/$D timeout ${ZOO_TIMEOUT:-540} python3 bench/gpu/zoo_users.py \
        --kiln $D/libkiln.so --cli $D/kiln --models $ZOO_USERS --exporters ${ZOO_EXPORTERS:-torchscript17,dynamo23} \
        --out $OUT/zoo_users.md ${ZOO_USERS_ARGS:-} > $OUT/zoo_users.log 2>&1
    echo "zoo_users rc=$?"; grep -E "^\||^###|rror" $OUT/zoo_users.log | tail -24
fi
kill $SMI 2>/dev/null
# few files back: the device tool returns a limited count
(cd $OUT && tar czf logs.tgz --remove-files *.log *.txt 2>/dev/null)
ls $OUT
