#!/usr/bin/env python3
"""Build an ONNX model into a kiln plan, the way a TensorRT script does it.

    python examples/python/build_engine.py examples/tiny_cnn.onnx tiny.plan \
        --shape input:1x3x64x64,8x3x64x64,32x3x64x64 [--fp16] [--backend cuda]

The script is TensorRT's build flow with `import kiln as trt`: only the
--backend line (kiln's own) has no TensorRT counterpart."""
import argparse
import sys

import kiln as trt


def parse_shape(text):
    name, dims = text.rsplit(":", 1)
    shapes = [tuple(int(d) for d in s.split("x")) for s in dims.split(",")]
    if len(shapes) == 1:
        shapes *= 3
    if len(shapes) != 3:
        raise SystemExit(f"--shape {text}: give one shape or min,opt,max")
    return name, shapes


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("onnx")
    ap.add_argument("plan")
    ap.add_argument("--shape", action="append", default=[], help="name:min[,opt,max] as 1x3x64x64")
    ap.add_argument("--fp16", action="store_true")
    ap.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--workspace", type=int, default=1 << 30)
    ap.add_argument("--timing-cache", default=None)
    args = ap.parse_args()

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(args.onnx):
        for i in range(parser.num_errors):
            print(parser.get_error(i), file=sys.stderr)
        sys.exit(1)

    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, args.workspace)
    config.backend = args.backend                      # kiln: "cpu" or "cuda"
    if args.fp16:
        config.set_flag(trt.BuilderFlag.FP16)
    if args.shape:
        profile = builder.create_optimization_profile()
        for s in args.shape:
            name, (mn, opt, mx) = parse_shape(s)
            profile.set_shape(name, mn, opt, mx)
        config.add_optimization_profile(profile)
    cache = None
    if args.timing_cache:
        cache = trt.ITimingCache(path=args.timing_cache)
        config.set_timing_cache(cache, ignore_mismatch=False)

    plan = builder.build_serialized_network(network, config)
    with open(args.plan, "wb") as f:
        f.write(plan)
    print(f"wrote {args.plan}: {plan.nbytes} bytes, backend {args.backend}, "
          f"{network.num_inputs} input(s), {network.num_outputs} output(s)")


if __name__ == "__main__":
    main()
