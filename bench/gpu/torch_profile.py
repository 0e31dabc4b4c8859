#!/usr/bin/env python3
"""torch_profile.py - which CUDA kernels PyTorch eager FP16 runs for a zoo.py
model at a batch, and how long each takes: the reference a slow kiln layer
is compared with. Prints the top kernels by total time over --iters runs.

Usage: python3 bench/gpu/torch_profile.py --models convnext_tiny,... [--batch 64]
"""
import argparse
import copy
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zoo import CHANNELS_LAST, forward, inputs_for, make_model  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    for name in a.models.split(","):
        model, _ = make_model(name)
        mh = copy.deepcopy(model).cuda().half()
        x = {k: (v.half() if v.is_floating_point() else v) for k, v in inputs_for(name, a.batch, "cuda").items()}
        if name in CHANNELS_LAST:
            mh = mh.to(memory_format=torch.channels_last)
            x = {k: v.contiguous(memory_format=torch.channels_last) for k, v in x.items()}
        with torch.no_grad():
            for _ in range(5):
                forward(mh, x)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(a.iters):
                    forward(mh, x)
                torch.cuda.synchronize()
        print(f"== {name} batch {a.batch}, eager FP16, {a.iters} runs")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=a.top, max_name_column_width=110))


if __name__ == "__main__":
    main()
