#!/bin/bash
# bert_plan.sh PLAN [kiln exec arguments...] - build the BERT-base b64 plan
# from /tmp/kiln_bench/bert.onnx as bench_models.py builds it (batch 1..64,
# tuned at 64, FP16 with float16 inputs and outputs) into PLAN, with any
# further arguments (a timing cache, --verbose). Run from the repository
# root on the device after bench/gpu/session.sh; its output goes to stdout.
D=${KILN_DIR:-.device}
LIBS=/usr/local/cuda/lib64:/usr/local/cuda/lib:/usr/lib/x86_64-linux-gnu
S1=input_ids:1x128,attention_mask:1x128
S=input_ids:64x128,attention_mask:64x128
plan=$1
shift
LD_LIBRARY_PATH=$PWD/$D:$LIBS timeout 120 $D/kiln exec --onnx=/tmp/kiln_bench/bert.onnx \
    --saveEngine="$plan" --skipInference --minShapes=$S1 --optShapes=$S --maxShapes=$S \
    --backend=cuda --fp16 --inputIOFormats=fp16:chw --outputIOFormats=fp16:chw "$@"
