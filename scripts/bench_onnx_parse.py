#!/usr/bin/env python3
"""bench_onnx_parse.py - write an ONNX model with about 1 GB of float weights
for the ONNX reader benchmark (docs/decisions.md, "ONNX reader").

The model is a chain of MatMul + Add layers, 1024x1024 float weights each,
stored as raw_data inside the .onnx file (no external data), written to /tmp
by default so that nothing large lands in the repository.

usage: bench_onnx_parse.py [--out /tmp/kiln_bench_1gb.onnx] [--layers 256]
"""
import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/kiln_bench_1gb.onnx")
    ap.add_argument("--layers", type=int, default=256, help="each layer holds 4 MiB + 4 KiB")
    ap.add_argument("--width", type=int, default=1024)
    args = ap.parse_args()

    n = args.width
    rng = np.random.default_rng(7)
    inits, nodes = [], []
    x = "x"
    for i in range(args.layers):
        w = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n,), dtype=np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        inits.append(numpy_helper.from_array(b, f"b{i}"))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"mm{i}"], name=f"matmul{i}"))
        nodes.append(helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"y{i}"], name=f"add{i}"))
        x = f"y{i}"
    graph = helper.make_graph(
        nodes, "bench",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", n])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", n])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="kiln-bench")
    data = model.SerializeToString()
    with open(args.out, "wb") as f:
        f.write(data)
    weights = sum(t.nbytes for t in map(numpy_helper.to_array, inits))
    print(f"{args.out}: {len(data)} bytes, {len(inits)} initializers, {weights} weight bytes, "
          f"{len(nodes)} nodes")


if __name__ == "__main__":
    main()
