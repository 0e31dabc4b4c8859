"""ort_exact.py - the ONNX Runtime reference of an 8-bit model, made exact.

ONNX Runtime's CPU kernels for u8 x s8 products (QLinearConv, QLinearMatMul,
MatMulInteger and the QDQ fusions onto them) use VPMADDUBSW on x86 CPUs
without VNNI: it adds pairs of products in 16 bits with saturation, so
255 * 127 * 2 overflows and the reference is off by many quantization steps
on such machines (its documentation calls this the U8S8 saturation issue).
Its u8 x u8 kernels widen to 16 bits first and are exact everywhere.

shifted(model) returns the same computation with every int8 tensor carried
as uint8 + 128: int8 initializers and Constant values (weights and zero
points) and the int8 outputs of QuantizeLinear (their zero points shifted)
become uint8. q - zp is unchanged for every value, and so is the clipping
range (int8's [-128, 127] maps onto uint8's [0, 255]), so the model means the
same and ONNX Runtime runs it on exact kernels on any CPU. Ops that only
move or compare 8-bit values (Transpose, Reshape, MaxPool, Concat, ...) give
the shifted result of the original. Only the reference changes: kiln runs
the file as the user has it.
"""
import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

I8, U8 = TensorProto.INT8, TensorProto.UINT8


def _shift(t):
    a = numpy_helper.to_array(t).astype(np.int16) + 128
    n = numpy_helper.from_array(a.astype(np.uint8), t.name)
    return n


def shifted(model):
    """A copy of `model` (onnx.ModelProto) with int8 tensors as uint8 + 128."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph

    def fix(graph):
        for i, t in enumerate(graph.initializer):
            if t.data_type == I8:
                graph.initializer[i].CopyFrom(_shift(t))
        for nd in graph.node:
            for a in nd.attribute:
                if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == I8:
                    a.t.CopyFrom(_shift(a.t))
                if a.type == onnx.AttributeProto.GRAPH:
                    fix(a.g)
                if a.type == onnx.AttributeProto.INT and a.name in ("output_dtype", "to") and a.i == I8:
                    a.i = U8
        for vi in list(graph.value_info) + list(graph.input) + list(graph.output):
            tt = vi.type.tensor_type
            if tt.elem_type == I8:
                tt.elem_type = U8
    fix(g)
    return m


def session(path_or_model, so=None):
    """An onnxruntime CPU session of the shifted model."""
    import onnxruntime as ort
    m = path_or_model if isinstance(path_or_model, onnx.ModelProto) else onnx.load(path_or_model)
    if so is None:
        so = ort.SessionOptions()
        so.log_severity_level = 3
    return ort.InferenceSession(shifted(m).SerializeToString(), so, providers=["CPUExecutionProvider"])
