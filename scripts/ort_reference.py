#!/usr/bin/env python3
"""ort_reference.py - ONNX Runtime as the reference for `kiln compare` and
`kiln debug`: runs a model on inputs from a .npz and writes its outputs to a
.npz. kiln calls it as a subprocess.

Usage: ort_reference.py MODEL INPUTS.npz OUTPUTS.npz [--outputs NAMES.txt]

--outputs names the tensors to return, one per line (intermediate tensors
are made graph outputs first); without it, the model's outputs. Exit status:
0 done, 3 onnxruntime (or onnx) cannot be imported, 1 anything else.
"""
import sys
import zipfile


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 1
    model_path, in_path, out_path = argv[0], argv[1], argv[2]
    names = None
    if len(argv) >= 5 and argv[3] == "--outputs":
        with open(argv[4], encoding="utf-8") as f:
            names = [line.rstrip("\n") for line in f if line.rstrip("\n")]
    try:
        import numpy as np
        import onnx
        import onnxruntime as ort
    except Exception as e:  # noqa: BLE001 - any import failure means "no reference"
        print(f"ort_reference: cannot import onnxruntime/onnx/numpy: {e}", file=sys.stderr)
        return 3

    model = onnx.load(model_path)
    if names is not None:
        present = {o.name for o in model.graph.output}
        # a typed value_info lets ORT accept the new outputs
        try:
            inferred = onnx.shape_inference.infer_shapes(model)
            typed = {v.name: v for v in inferred.graph.value_info}
        except Exception:  # noqa: BLE001 - shape inference is a nicety here
            typed = {}
        for n in names:
            if n in present:
                continue
            vi = typed.get(n)
            if vi is not None and vi.type.tensor_type.elem_type:
                new = onnx.ValueInfoProto()
                new.CopyFrom(vi)
            else:
                new = onnx.ValueInfoProto(name=n)
            model.graph.output.append(new)
            present.add(n)

    so = ort.SessionOptions()
    # the reference runs the graph as written: no fusions that change rounding
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    data = np.load(in_path)
    feeds = {}
    for i in sess.get_inputs():
        if i.name not in data.files:
            print(f"ort_reference: no value for input '{i.name}' in {in_path}", file=sys.stderr)
            return 1
        feeds[i.name] = data[i.name]
    wanted = names if names is not None else [o.name for o in sess.get_outputs()]
    results = sess.run(wanted, feeds)
    # written member by member: np.savez would take a tensor named "file" as its argument
    with zipfile.ZipFile(out_path, "w", zipfile.ZIP_STORED) as z:
        for n, r in zip(wanted, results):
            with z.open(n + ".npy", "w", force_zip64=True) as f:
                # asarray keeps a scalar 0-d (ascontiguousarray would make it [1])
                np.lib.format.write_array(f, np.asarray(r, order="C"), allow_pickle=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
