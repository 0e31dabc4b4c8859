#!/bin/bash
# run_device.sh - one device call for the CUDA backend: the kernel tests, an
# end-to-end run of the tiny example model on cuda vs cpu, and the kernel
# micro benchmark. Run from the repository root with the build folder
# (configured without oneDNN/OpenBLAS) carried as build-cuda-dev. Logs go to
# $OUT (or ./out).
set -u
DEST=${OUT:-out}
W=/tmp/kiln_run
OUT=$W
BUDGET=${BUDGET:-440}   # seconds for the whole script; later stages shrink or are skipped
cap() { # the smaller of $1 and what is left of the budget (at least 1)
    local left=$((BUDGET - SECONDS)); [ $left -lt 1 ] && left=1
    [ "$1" -lt $left ] && echo "$1" || echo $left
}
mkdir -p "$OUT" "$DEST"
B=build-cuda-dev
# the CUDA libraries: the system's, then the toolkit's, then pip wheels'
for d in /usr/lib/x86_64-linux-gnu /usr/local/cuda/lib64 /usr/local/cuda/lib \
         $(python3 -c 'import nvidia,os;print(" ".join(os.path.join(os.path.dirname(nvidia.__file__),p,"lib") for p in os.listdir(os.path.dirname(nvidia.__file__))))' 2>/dev/null); do
    [ -d "$d" ] && LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:$d"
done
export LD_LIBRARY_PATH="$PWD/$B:$PWD/$B/lib:${LD_LIBRARY_PATH#:}"
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    ldd $B/tests/cuda/test_cuda_ops | grep -E "cud|cublas|not found"
} 2>&1 | tee "$OUT/env.txt"
echo "== test_cuda_ops"
timeout $(cap 120) $B/tests/cuda/test_cuda_ops > "$OUT/test_cuda_ops.log" 2>&1
echo "test_cuda_ops rc=$?"
grep -E "^(FAIL|NOREF)" "$OUT/test_cuda_ops.log" | head -60
tail -4 "$OUT/test_cuda_ops.log"
echo "== test_cuda_ops, second seed"
KILN_TEST_VERBOSE=1 KILN_TEST_SEED=12345 timeout $(cap 90) $B/tests/cuda/test_cuda_ops > "$OUT/test_cuda_ops_seed2.log" 2>&1
echo "rc=$?"; grep -E "^(FAIL|NOREF)|declined in prepare" "$OUT/test_cuda_ops_seed2.log" | head -30; tail -2 "$OUT/test_cuda_ops_seed2.log"
echo "== tiny_cnn end to end"
$B/kiln exec --onnx=examples/tiny_cnn.onnx --duration=0 --iterations=5 --exportOutput="$OUT/tiny_cpu.json" > "$OUT/tiny_cpu.log" 2>&1
$B/kiln exec --onnx=examples/tiny_cnn.onnx --backend=cuda --duration=0 --iterations=20 --exportOutput="$OUT/tiny_cuda.json" > "$OUT/tiny_cuda.log" 2>&1
echo "cuda exec rc=$?"; tail -6 "$OUT/tiny_cuda.log"
python3 bench/gpu/compare_json.py "$OUT/tiny_cpu.json" "$OUT/tiny_cuda.json" "tiny_cnn cuda fp32 vs cpu"
$B/kiln exec --onnx=examples/tiny_cnn.onnx --backend=cuda --fp16 --duration=0 --iterations=20 --exportOutput="$OUT/tiny_cuda16.json" > "$OUT/tiny_cuda16.log" 2>&1
echo "cuda fp16 exec rc=$?"
python3 bench/gpu/compare_json.py "$OUT/tiny_cpu.json" "$OUT/tiny_cuda16.json" "tiny_cnn cuda fp16 vs cpu"
echo "== bench"
timeout $(cap 150) $B/bench/bench_cuda_kernels 30 > "$OUT/bench.log" 2>&1
echo "bench rc=$?"
grep -E "^(=|device|ResNet|BERT|square|memory)" "$OUT/bench.log"

echo "== ResNet-50 and BERT-base end to end (scripts/gen_models.py, kiln exec)"
timeout $(cap 100) python3 scripts/gen_models.py --out /tmp/models --models resnet50,bert > "$OUT/gen.log" 2>&1
echo "gen rc=$?"; ls -la /tmp/models 2>&1 | tail -3
e2e() { # name args...
    local name=$1; shift
    timeout $(cap 60) $B/kiln exec "$@" --duration=0 --iterations=20 --warmUp=200 > "$OUT/$name.log" 2>&1
    echo "$name rc=$?"; grep -E "Throughput|Latency: .*median|GPU Compute|\[E\]" "$OUT/$name.log" | head -4
}
e2e r50_cpu --onnx=/tmp/models/resnet50.onnx --shapes=input:2x3x224x224 --exportOutput="$OUT/r50_cpu.json" --iterations=2
e2e r50_cuda32 --onnx=/tmp/models/resnet50.onnx --backend=cuda --shapes=input:2x3x224x224 --exportOutput="$OUT/r50_cuda32.json"
python3 bench/gpu/compare_json.py "$OUT/r50_cpu.json" "$OUT/r50_cuda32.json" "resnet50 batch 2 cuda fp32 vs cpu"
e2e r50_cuda16_b32 --onnx=/tmp/models/resnet50.onnx --backend=cuda --fp16 --shapes=input:32x3x224x224
e2e bert_cpu --onnx=/tmp/models/bert.onnx --shapes=input_ids:2x128,attention_mask:2x128 --exportOutput="$OUT/bert_cpu.json" --iterations=2
e2e bert_cuda32 --onnx=/tmp/models/bert.onnx --backend=cuda --shapes=input_ids:2x128,attention_mask:2x128 --exportOutput="$OUT/bert_cuda32.json"
python3 bench/gpu/compare_json.py "$OUT/bert_cpu.json" "$OUT/bert_cuda32.json" "bert batch 2 cuda fp32 vs cpu"
e2e bert_cuda16_b32 --onnx=/tmp/models/bert.onnx --backend=cuda --fp16 --shapes=input_ids:32x128,attention_mask:32x128
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$CS" ]; then
    echo "== compute-sanitizer memcheck (time-limited)"
    timeout $(cap 100) "$CS" --tool memcheck --print-limit 20 $B/tests/cuda/test_cuda_ops > "$OUT/memcheck.log" 2>&1
    echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|Invalid|passed, " "$OUT/memcheck.log" | head -20
fi
echo "script time ${SECONDS}s"
# at most 8 files come back: the main logs, and everything in one archive
for f in env.txt test_cuda_ops.log test_cuda_ops_seed2.log bench.log memcheck.log; do
    [ -f "$W/$f" ] && cp "$W/$f" "$DEST/"
done
tar czf "$DEST/all_logs.tgz" -C "$W" . 2>/dev/null
