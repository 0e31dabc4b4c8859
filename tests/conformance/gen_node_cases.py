#!/usr/bin/env python3
"""gen_node_cases.py - write ONNX's own node test cases for the given op
types, from the installed onnx package's case definitions, in the layout
run_node_tests reads (model.onnx, test_data_set_0/{input,output}_K.pb).
For ops newer than the Debian libonnx-testdata set (RotaryEmbedding,
RMSNormalization: opset 23). Exit 77 (skipped) without onnx.
Usage: gen_node_cases.py OUT_DIR OP_TYPE..."""
import os
import subprocess
import sys
import warnings

try:
    from onnx import TensorProto, numpy_helper
    import onnx.backend.test.case.node as node
except ImportError as e:
    print("skipped: %s" % e)
    sys.exit(77)


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    out = sys.argv[1]
    if len(sys.argv) > 3:  # onnx caches the first op's cases: one process per op
        for op in sys.argv[2:]:
            rc = subprocess.call([sys.executable, __file__, out, op])
            if rc:
                return rc
        return 0
    n = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for op in sys.argv[2:]:
            for c in node.collect_testcases(op):
                d = os.path.join(out, c.name, "test_data_set_0")
                os.makedirs(d, exist_ok=True)
                with open(os.path.join(out, c.name, "model.onnx"), "wb") as f:
                    f.write(c.model.SerializeToString())
                ins, outs = c.data_sets[0]
                for kind, arrs, vis in (("input", ins, c.model.graph.input),
                                        ("output", outs, c.model.graph.output)):
                    for k, a in enumerate(arrs):
                        if isinstance(a, TensorProto):  # cases that give raw protos
                            t = TensorProto()
                            t.CopyFrom(a)
                            t.name = vis[k].name
                        else:
                            t = numpy_helper.from_array(a, vis[k].name)
                        with open(os.path.join(d, "%s_%d.pb" % (kind, k)), "wb") as f:
                            f.write(t.SerializeToString())
                n += 1
    print("%d cases written to %s" % (n, out))
    return 0 if n else 1


if __name__ == "__main__":
    sys.exit(main())
