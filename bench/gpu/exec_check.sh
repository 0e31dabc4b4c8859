#!/bin/bash
# exec_check.sh - one device call: kiln exec on the GPU with the bundled model
# (scripts/device_pack.sh fills .device/; run from the repository root): the
# outputs with one stream and three agree, the per-iteration times are in
# order, a profile with streams, graphs off with a separate profile run, and
# --timeDeserialize with --device=0.
set -u
(cd .device && tar xzf bins.tgz)
export LD_LIBRARY_PATH=$PWD/.device:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu
K=.device/kiln
$K exec --onnx=examples/tiny_cnn.onnx --backend=cuda --fp16 --shapes=input:4x3x64x64 --saveEngine=/tmp/t.plan --skipInference > $OUT/build.txt 2>&1; echo build rc=$?
$K exec --loadEngine=/tmp/t.plan --shapes=input:4x3x64x64 --iterations=50 --duration=0 --exportOutput=$OUT/o1.json --exportTimes=$OUT/t1.json > $OUT/s1.txt 2>&1; echo one rc=$?
$K exec --loadEngine=/tmp/t.plan --shapes=input:4x3x64x64 --iterations=50 --duration=0 --infStreams=3 --useSpinWait --exportOutput=$OUT/o3.json --exportTimes=$OUT/t3.json --exportProfile=$OUT/p3.json > $OUT/s3.txt 2>&1; echo three rc=$?
$K exec --loadEngine=/tmp/t.plan --shapes=input:4x3x64x64 --iterations=20 --duration=0 --infStreams=2 --noCudaGraph --separateProfileRun --dumpProfile > $OUT/s2.txt 2>&1; echo nograph rc=$?
$K exec --loadEngine=/tmp/t.plan --timeDeserialize --device=0 > $OUT/deser.txt 2>&1; echo deserialize rc=$?
grep -E "Device|deserialization|Deserialization" $OUT/deser.txt
python3 - <<'PY'
import json, os
o=os.environ["OUT"]
a=json.load(open(o+"/o1.json")); b=json.load(open(o+"/o3.json"))
print("outputs equal:", a==b)
for f in ("t1","t3"):
    t=json.load(open(o+"/"+f+".json"))
    ok=all(x["startH2dMs"]<=x["endH2dMs"]<=x["endComputeMs"]<=x["endD2hMs"] and x["computeMs"]>0 and x["d2hMs"]>0 and x["h2dMs"]>0 for x in t)
    print(f, len(t), "ordered:", ok, "streams:", sorted(set(x.get("stream",0) for x in t)))
p=json.load(open(o+"/p3.json")); print("profile count", p[0])
PY
grep -E "Throughput|GPU Compute Time: min|H2D Latency: min|D2H Latency: min|\[W\]" $OUT/s1.txt $OUT/s3.txt $OUT/s2.txt | cut -c1-200
grep -c "Total" $OUT/s2.txt
