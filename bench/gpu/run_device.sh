#!/bin/bash
# run_device.sh - one device call for the CUDA backend: the kernel tests, an
# end-to-end run of the tiny example model on cuda vs cpu, and the kernel
# micro benchmark. Run from the repository root with the build folder
# (configured without oneDNN/OpenBLAS) carried as build-cuda-dev. Logs go to
# $OUT (or ./out).
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
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
timeout 240 $B/tests/cuda/test_cuda_ops > "$OUT/test_cuda_ops.log" 2>&1
echo "test_cuda_ops rc=$?"
grep -E "^(FAIL|NOREF)" "$OUT/test_cuda_ops.log" | head -60
tail -4 "$OUT/test_cuda_ops.log"
echo "== test_cuda_ops, second seed"
KILN_TEST_VERBOSE=1 KILN_TEST_SEED=12345 timeout 120 $B/tests/cuda/test_cuda_ops > "$OUT/test_cuda_ops_seed2.log" 2>&1
echo "rc=$?"; grep -E "^(FAIL|NOREF)|declined in prepare" "$OUT/test_cuda_ops_seed2.log" | head -30; tail -2 "$OUT/test_cuda_ops_seed2.log"
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$CS" ]; then
    echo "== compute-sanitizer memcheck (time-limited)"
    timeout 150 "$CS" --tool memcheck --print-limit 20 $B/tests/cuda/test_cuda_ops > "$OUT/memcheck.log" 2>&1
    echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|Invalid|passed, " "$OUT/memcheck.log" | head -20
fi
echo "== tiny_cnn end to end"
$B/kiln exec --onnx=examples/tiny_cnn.onnx --duration=0 --iterations=5 --exportOutput="$OUT/tiny_cpu.json" > "$OUT/tiny_cpu.log" 2>&1
$B/kiln exec --onnx=examples/tiny_cnn.onnx --backend=cuda --duration=0 --iterations=20 --exportOutput="$OUT/tiny_cuda.json" > "$OUT/tiny_cuda.log" 2>&1
echo "cuda exec rc=$?"; tail -6 "$OUT/tiny_cuda.log"
python3 - "$OUT/tiny_cpu.json" "$OUT/tiny_cuda.json" <<'PY' 2>&1
import json, sys
def vals(p):
    d = json.load(open(p))
    out = []
    def walk(x):
        if isinstance(x, (int, float)): out.append(float(x))
        elif isinstance(x, list): [walk(v) for v in x]
        elif isinstance(x, dict): [walk(v) for k, v in sorted(x.items()) if k not in ("name", "dims", "shape", "dtype")]
    walk(d)
    return out
a, b = vals(sys.argv[1]), vals(sys.argv[2])
err = max(abs(x - y) / (1 + abs(x)) for x, y in zip(a, b)) if a and len(a) == len(b) else float("nan")
print("tiny_cnn cuda vs cpu: %d values, max rel err %.3g" % (len(a), err))
PY
echo "== bench"
timeout 240 $B/bench/bench_cuda_kernels 30 > "$OUT/bench.log" 2>&1
echo "bench rc=$?"
grep -E "^(=|device|ResNet|BERT|square|memory)" "$OUT/bench.log"
