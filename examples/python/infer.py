#!/usr/bin/env python3
"""Load a kiln plan and run it: TensorRT's execution-context flow (named
tensors, set_input_shape, set_tensor_address, execute_async_v3), then the
same run through kiln's one-call engine.infer.

    python examples/python/infer.py tiny.plan [--batch 4] [--iterations 20]

On a CPU plan the buffers are numpy arrays bound in place. On a GPU plan
(built with --backend cuda) they are device buffers from engine.alloc (or,
with torch installed, torch CUDA tensors) and the run is on a stream."""
import argparse
import time

import numpy as np

import kiln as trt


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plan")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    logger = trt.Logger(trt.Logger.WARNING)
    runtime = trt.Runtime(logger)
    with open(args.plan, "rb") as f:
        engine = runtime.deserialize_cuda_engine(f.read())
    context = engine.create_execution_context()
    rng = np.random.default_rng(args.seed)

    host = {}
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        if engine.get_tensor_mode(name) != trt.TensorIOMode.INPUT:
            continue
        shape = list(engine.get_tensor_shape(name))
        if any(d < 0 for d in shape):
            shape = list(engine.get_tensor_profile_shape(name, 0)[1])
        if args.batch:
            shape[0] = args.batch
        dtype = trt.nptype(engine.get_tensor_dtype(name))
        host[name] = rng.standard_normal(shape).astype(dtype)
        context.set_input_shape(name, shape)
    for name in engine.output_names:
        host[name] = np.empty(context.get_tensor_shape(name), trt.nptype(engine.get_tensor_dtype(name)))

    gpu = engine.backend != "cpu"
    stream = engine.create_stream() if gpu else None
    device = {}
    for name, arr in host.items():
        if gpu:   # device buffers through kiln (no CUDA Python package needed)
            device[name] = engine.alloc(arr.nbytes)
            if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT:
                engine.memcpy_htod(device[name], arr)
            context.set_tensor_address(name, device[name])
        else:     # a CPU engine reads and writes the numpy arrays in place
            context.set_tensor_address(name, arr)

    context.execute_async_v3(stream)       # warm up
    t0 = time.perf_counter()
    for _ in range(args.iterations):
        context.execute_async_v3(stream)
    context.synchronize(stream)
    ms = (time.perf_counter() - t0) * 1e3 / max(1, args.iterations)
    if gpu:
        for name in engine.output_names:
            engine.memcpy_dtoh(host[name], device[name])
        for ptr in device.values():
            engine.free(ptr)
        engine.destroy_stream(stream)

    feeds = {n: host[n] for n in engine.input_names}
    again = engine.infer(feeds)
    for name in engine.output_names:
        same = np.array_equal(again[name], host[name])
        print(f"{name}: shape {host[name].shape}, mean {float(host[name].mean()):.6g}, "
              f"engine.infer agrees: {same}")
        if not same and not gpu:
            raise SystemExit("engine.infer and execute_async_v3 disagree")
    print(f"{engine.backend}: {ms:.3f} ms per execute_async_v3 over {args.iterations} runs")


if __name__ == "__main__":
    main()
