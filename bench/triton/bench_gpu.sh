#!/bin/bash
# bench_gpu.sh - the H200 part of the Triton benchmark (docs/serving.md): ResNet-50
# and BERT-base (bench/gpu/bench_models.py's models, exported by torch.onnx)
# built into FP16 kiln plans for the cuda backend (batch 1..64, tuned at 64),
# served by the tritonserver of the nvidia-pytriton wheel through kiln's backend
# (KIND_GPU, dynamic batching), loaded by closed-loop clients at concurrency 1
# and 64 (bench/triton/load_test.py, standard library only, tensors in system
# shared memory), every response checked against `kiln exec` on the same input,
# and `kiln exec` on the same plan at the batch Triton formed.
#
# Build here: bench/triton/pack_gpu.sh (fills .device/ with triton.txz and
# kiln_triton.tgz); carry .device; run there from the repository root:
#   bash bench/triton/bench_gpu.sh           (MODELS="resnet50 bert" by default)
# MODELS=tiny serves examples/tiny_cnn.onnx (a smoke test of the carried server:
# seconds); BACKEND=cpu KIND=KIND_CPU runs the same steps on a machine without
# a GPU; ONNX_DIR holds resnet50.onnx / bert.onnx already exported (else
# torch exports them); LEVELS, DURATION, PROCS, INSTANCES, QUEUE_US tune the
# load; PARAMS the backend's parameters (key=value,...); PREFERRED the
# batcher's preferred sizes (buckets | triton | 4,8,16). Per model, also
# triton_exec_bench (EXEC_BENCH=0 leaves it out): the backend's own time per
# execution with no server, 1 and EXEC_REQUESTS ("13 64") requests an
# execution, against kiln's API doing the same work; and, when pack_gpu.sh
# packed perf_analyzer.txz, bench/triton/pa_bench.py (PERF_ANALYZER=0 leaves
# it out) at PA_LEVELS (1,64,128) with perf_analyzer as the client. Then
# bench/triton/overhead.py (OVERHEAD=0 leaves it out) measures the backend's
# time per request at batch 1 against kiln exec.
# Results land in $OUT: triton_<model>.md/.json, triton_<model>.server.log (the
# backend's warm-up line among it), exec_bench_<model>.md/_<k>.json,
# pa_<model>.md/.json, overhead.md, build logs.
set -u
D=${KILN_DIR:-.device}
OUT=${OUT:-/tmp/kiln_triton_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
T=/tmp/kiln_triton_gpu
mkdir -p $T
if command -v xz >/dev/null; then tar xJf $D/triton.txz -C $T
else python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" $D/triton.txz $T; fi
tar xzf $D/kiln_triton.tgz -C $T
# perf_analyzer (pack_gpu.sh's perf_analyzer.txz: the binary, libcudart.so.12, libb64.so.0d)
PA=""
if [ -f $D/perf_analyzer.txz ]; then
    mkdir -p $T/pa
    if command -v xz >/dev/null; then tar xJf $D/perf_analyzer.txz -C $T/pa
    else python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" $D/perf_analyzer.txz $T/pa; fi
    PA=$T/pa/perf_analyzer
fi
# the commit pack_gpu.sh packed (load_test.py prints it; "unknown" without it)
export KILN_COMMIT=${KILN_COMMIT:-$(cat $T/COMMIT 2>/dev/null || echo unknown)}
export KILN_TRITONSERVER=$T/pytriton/tritonserver/bin/tritonserver
export LD_LIBRARY_PATH=$T:$T/pa:/usr/local/cuda/lib64:/usr/local/cuda/lib:/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
PY=${PYTHON:-python3}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $OUT/env.txt
$KILN_TRITONSERVER --help > /dev/null 2>&1 || echo "tritonserver does not start: $($KILN_TRITONSERVER --help 2>&1 | tail -3)"
BACKEND=${BACKEND:-cuda}
# the backend's defaults: a context (and its CUDA graph) per batch bucket
# (1,2,4,8,12,16,24,32,48,64), and the batcher's preferred sizes from them
PARAMS=${PARAMS:-}
# the batcher's preferred sizes: "buckets" (the backend's, so no batch needs
# padding rows), "triton" (none given: Triton fills in [64] since the
# configuration has a dynamic_batching block; session 24 ran so), or a list
PREFERRED=${PREFERRED:-buckets}
KIND=${KIND:-KIND_GPU}
ONNX_DIR=${ONNX_DIR:-$T}
cp examples/tiny_cnn.onnx $ONNX_DIR/tiny.onnx 2>/dev/null
# the models, as bench/gpu/bench_models.py makes them (seeded)
for name in ${MODELS:-resnet50 bert}; do
    [ -f $ONNX_DIR/$name.onnx ] && continue
    $PY - $name $ONNX_DIR <<'PYEOF' >> $OUT/export.log 2>&1
import sys; sys.path.insert(0, "bench/gpu")
import bench_models as bm
name, d = sys.argv[1], sys.argv[2]
m, _ = bm.make_resnet50(0) if name == "resnet50" else bm.make_bert(0, "eager")
bm.export(name, m, "%s/%s.onnx" % (d, name))
print("exported", name)
PYEOF
    echo "export $name rc=$? ($(tail -1 $OUT/export.log))"
done
for model in ${MODELS:-resnet50 bert}; do
    if [ $model = resnet50 ]; then
        spec() { echo "input:$1x3x224x224"; }; io="--inputIOFormats=fp16:chw"
    elif [ $model = tiny ]; then
        spec() { echo "input:$1x3x64x64"; }; io="--inputIOFormats=fp16:chw"
    else
        spec() { echo "input_ids:$1x128,attention_mask:$1x128"; }; io=""
    fi
    plan=$T/$model.fp16.plan
    echo "== $model: FP16 plan"
    timeout 600 $T/kiln exec --onnx=$ONNX_DIR/$model.onnx --saveEngine=$plan --skipInference --backend=$BACKEND \
        --minShapes=$(spec 1) --optShapes=$(spec 64) --maxShapes=$(spec 64) \
        --fp16 --outputIOFormats=fp16:chw $io --timingCacheFile=$T/$model.timing > $OUT/build_$model.log 2>&1
    echo "build rc=$?"
    echo "== $model: Triton ($KIND, dynamic batching) against kiln exec"
    timeout 420 $PY bench/triton/load_test.py --kiln $T/kiln --build $T --backends $T/triton/backends \
        --plan $plan --name $model --max-batch 64 --kind $KIND --instances ${INSTANCES:-2} \
        --proto raw-shm --procs ${PROCS:-16} --levels ${LEVELS:-1,64} --duration ${DURATION:-10} \
        --rtol 5e-2 --atol 5e-2 --queue-delay-us ${QUEUE_US:-100} --params "$PARAMS" --preferred $PREFERRED \
        --title "kiln Triton backend, $model FP16 on $(head -1 $OUT/env.txt | cut -d, -f1)" \
        --out $OUT/triton_$model.md 2>&1 | tee $OUT/load_$model.log | tail -6
    # the backend's own time per execution, no server (bench/triton/exec_bench.c):
    # 1 request (the batch-1 target) and EXEC_REQUESTS requests an execution
    if [ "${EXEC_BENCH:-1}" = 1 ] && [ -x $T/triton_exec_bench ]; then
        for k in 1 ${EXEC_REQUESTS:-13 64}; do
            echo "== $model: backend per execution, $k request(s), no server"
            timeout 120 $T/triton_exec_bench --backend $T/triton/backends/kiln/libtriton_kiln.so --plan $plan \
                --requests $k --iters ${EXEC_ITERS:-1000} --json $OUT/exec_bench_${model}_$k.json \
                $(for kv in ${PARAMS//,/ }; do echo --param $kv; done) 2>> $OUT/exec_bench_$model.log |
                tee -a $OUT/exec_bench_$model.md | tail -4
        done
    fi
    # perf_analyzer (C++ client: no Python client limit) at PA_LEVELS
    if [ "${PERF_ANALYZER:-1}" = 1 ] && [ -n "$PA" ]; then
        echo "== $model: perf_analyzer, $KIND x ${INSTANCES:-2}, preferred sizes $PREFERRED"
        timeout 420 $PY bench/triton/pa_bench.py --kiln $T/kiln --backends $T/triton/backends --plan $plan \
            --name $model --kind $KIND --instances ${INSTANCES:-2} --levels ${PA_LEVELS:-1,64,128} --max-batch 64 \
            --queue-delay-us ${QUEUE_US:-100} --preferred $PREFERRED --params "$PARAMS" --perf-analyzer $PA \
            --window-ms ${PA_WINDOW_MS:-3000} --stability ${PA_STABILITY:-25} --out $OUT/pa_$model.md 2>&1 | tee $OUT/pa_$model.log | grep -v "^  " | tail -5
    fi
done
# the backend's own time per request at batch 1 (an almost empty plan and
# tiny_cnn, one client in a loop, zero_copy on and off) against kiln exec
if [ "${OVERHEAD:-1}" = 1 ]; then
    echo "== overhead per request at batch 1 ($KIND)"
    timeout 300 $PY bench/triton/overhead.py --kiln $T/kiln --build $T --backends $T/triton/backends \
        --kind $KIND --protos raw --requests ${REQUESTS:-2000} --out $OUT/overhead.md 2>&1 | tee $OUT/overhead.log | tail -5
fi
ls $OUT
