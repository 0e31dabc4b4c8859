#!/bin/bash
# run_models.sh - one device call: kiln vs PyTorch on ResNet-50 and BERT-base
# (bench/gpu/bench_models.py). KILN_DIR holds kiln and libkiln.so built with
# -DKILN_CUDA=ON -DKILN_USE_DNNL=OFF -DKILN_USE_OPENBLAS=OFF (default .device),
# carried with the call; $OUT receives the logs and results.md.
set -u
# libkiln finds cuDNN/cuBLAS in the system paths; PyTorch keeps its own
export LD_LIBRARY_PATH="$PWD/${KILN_DIR:-.device}"
export PYTHONUNBUFFERED=1
export KILN_CLI_LIBS=/usr/local/cuda/lib64:/usr/local/cuda/lib:/usr/lib/x86_64-linux-gnu
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $OUT/env.txt
python3 -c "import torch, torchvision, transformers; print('torch', torch.__version__, 'tv', torchvision.__version__, 'tf', transformers.__version__)" | tee -a $OUT/env.txt
timeout 540 python3 bench/gpu/bench_models.py --kiln ${KILN_DIR:-.device}/libkiln.so --cli ${KILN_DIR:-.device}/kiln \
   --models ${MODELS:-resnet50,bert} --out $OUT/results.md 2>&1 | tee $OUT/bench.log | grep -vE "^\s*$" | tail -60
