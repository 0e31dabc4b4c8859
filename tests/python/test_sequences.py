"""Sequences and optionals through the Python API (issue 32): a sequence is
a list of numpy arrays, an empty optional is None, and the engine's I/O
descriptions carry the kind. Models made here with onnx.helper
(SplitToSequence, SequenceConstruct, SequenceInsert, ConcatFromSequence,
SequenceLength, Optional, OptionalHasElement, OptionalGetElement), run by
kiln on the CPU and by ONNX Runtime (sequence I/O) or onnx.reference
(optional inputs, which ONNX Runtime's Python API cannot give as None)."""
import numpy as np
import pytest

import kiln

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402

V = h.make_tensor_value_info


def _save(g, path, opset=18):
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, path)
    return m


def _seq_type(elem=T.FLOAT, shape=None):
    return h.make_sequence_type_proto(h.make_tensor_type_proto(elem, shape))


def _produce_model(path):
    """Tensor inputs; sequence, tensor and optional outputs."""
    g = h.make_graph([
        h.make_node("SplitToSequence", ["x", "split"], ["parts"], axis=1),
        h.make_node("SequenceConstruct", ["x", "y"], ["pair"]),
        h.make_node("ConcatFromSequence", ["parts"], ["joined"], axis=1),
        h.make_node("SequenceLength", ["pair"], ["n"]),
        h.make_node("Optional", ["y"], ["opt_y"]),
    ], "produce", [V("x", T.FLOAT, [2, 6]), V("y", T.FLOAT, [3, 6])],
        [h.make_value_info("parts", _seq_type(T.FLOAT, [2, None])),
         h.make_value_info("pair", _seq_type(T.FLOAT, [None, 6])),
         V("joined", T.FLOAT, [None, None]),
         V("n", T.INT64, []),
         h.make_value_info("opt_y", h.make_optional_type_proto(
             h.make_tensor_type_proto(T.FLOAT, [3, 6])))],
        [h.make_tensor("split", T.INT64, [3], [1, 2, 3])])
    return _save(g, path)


def _consume_model(path):
    """Sequence and optional inputs; sequence, optional and tensor outputs."""
    opt_t = h.make_optional_type_proto(h.make_tensor_type_proto(T.FLOAT, [2]))
    g = h.make_graph([
        h.make_node("ConcatFromSequence", ["seq"], ["stacked"], axis=0, new_axis=1),
        h.make_node("SequenceLength", ["seq"], ["len"]),
        h.make_node("SequenceInsert", ["seq", "t"], ["seq_out"]),
        h.make_node("OptionalHasElement", ["opt"], ["has"]),
        h.make_node("Identity", ["opt"], ["opt_out"]),
    ], "consume",
        [h.make_value_info("seq", _seq_type(T.FLOAT, [2, 3])), V("t", T.FLOAT, [2, 3]),
         h.make_value_info("opt", opt_t)],
        [V("stacked", T.FLOAT, [None, 2, 3]), V("len", T.INT64, []),
         h.make_value_info("seq_out", _seq_type(T.FLOAT, [2, 3])),
         V("has", T.BOOL, []), h.make_value_info("opt_out", opt_t)])
    return _save(g, path)


def _optseq_model(path):
    """An optional of a sequence in and out."""
    opt_s = h.make_optional_type_proto(_seq_type(T.INT64, [None]))
    g = h.make_graph([
        h.make_node("OptionalHasElement", ["os"], ["has"]),
        h.make_node("Identity", ["os"], ["os_out"]),
    ], "optseq", [h.make_value_info("os", opt_s)],
        [V("has", T.BOOL, []), h.make_value_info("os_out", opt_s)])
    return _save(g, path)


def _ref(model, feeds):
    from onnx.reference import ReferenceEvaluator
    names = [o.name for o in model.graph.output]
    return dict(zip(names, ReferenceEvaluator(model).run(None, feeds)))


def _without(model, output):
    """A copy of `model` without graph output `output` and its node."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep = [n for n in m.graph.node if output not in n.output]
    del m.graph.node[:]
    m.graph.node.extend(keep)
    outs = [o for o in m.graph.output if o.name != output]
    del m.graph.output[:]
    m.graph.output.extend(outs)
    return m


def _same(got, want):
    """kiln's value against the reference's: lists element by element."""
    if want is None:
        assert got is None
        return
    if isinstance(want, (list, tuple)):
        assert isinstance(got, list) and len(got) == len(want)
        for a, b in zip(got, want):
            _same(a, b)
        return
    want = np.asarray(want)
    assert isinstance(got, np.ndarray)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


def test_sequence_outputs_match_onnxruntime(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    path = str(tmp_path / "produce.onnx")
    model = _produce_model(path)
    e = kiln.build(path)
    kinds = {i.name: i.kind for i in e.outputs}
    assert kinds == {"parts": kiln.TensorKind.SEQUENCE, "pair": kiln.TensorKind.SEQUENCE,
                     "joined": kiln.TensorKind.TENSOR, "n": kiln.TensorKind.TENSOR,
                     "opt_y": kiln.TensorKind.OPTIONAL}
    info = e.get_tensor_info("opt_y")
    assert info.holds == kiln.TensorKind.TENSOR and info.dtype == kiln.float32
    assert info.mode == kiln.TensorIOMode.OUTPUT and info.shape is None
    assert e.get_tensor_info("parts").dtype == kiln.float32
    assert e.get_tensor_kind("x") == kiln.TensorKind.TENSOR
    assert "parts: sequence" in repr(e) and "opt_y: optional" in repr(e)

    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((2, 6)).astype(np.float32),
             "y": rng.standard_normal((3, 6)).astype(np.float32)}
    got = e.infer(feeds)
    assert list(got) == ["parts", "pair", "joined", "n", "opt_y"]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    for name in want:
        _same(got[name], want[name])
    assert [p.shape for p in got["parts"]] == [(2, 1), (2, 2), (2, 3)]
    np.testing.assert_array_equal(got["joined"], feeds["x"])


def test_sequence_and_optional_inputs_match_reference(tmp_path):
    path = str(tmp_path / "consume.onnx")
    model = _consume_model(path)
    e = kiln.build(path)
    ins = {i.name: (i.kind, i.holds) for i in e.inputs}
    assert ins == {"seq": (kiln.TensorKind.SEQUENCE, None), "t": (kiln.TensorKind.TENSOR, None),
                   "opt": (kiln.TensorKind.OPTIONAL, kiln.TensorKind.TENSOR)}
    rng = np.random.default_rng(2)
    t = rng.standard_normal((2, 3)).astype(np.float32)
    for n, opt in ((3, rng.standard_normal(2).astype(np.float32)), (1, None), (5, None),
                   (2, np.arange(2, dtype=np.float64))):   # float64: converted to float32
        seq = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(n)]
        got = e.infer({"seq": seq, "t": t, "opt": opt})
        ref_feeds = {"seq": seq, "t": t, "opt": None if opt is None else opt.astype(np.float32)}
        if opt is None:
            # onnx.reference's Identity refuses None: the reference runs
            # without that node, and Identity of an empty optional is one
            want = _ref(_without(model, "opt_out"), ref_feeds)
            want["opt_out"] = None
        else:
            want = _ref(model, ref_feeds)
        for name in want:
            _same(got[name], want[name])
        assert int(got["len"]) == n and bool(got["has"]) == (opt is not None)
        assert got["opt_out"] is None if opt is None else got["opt_out"].dtype == np.float32


def test_optional_of_sequence(tmp_path):
    path = str(tmp_path / "optseq.onnx")
    model = _optseq_model(path)
    e = kiln.build(path)
    info = e.get_tensor_info("os")
    assert info.kind == kiln.TensorKind.OPTIONAL and info.holds == kiln.TensorKind.SEQUENCE
    assert info.dtype == kiln.int64
    for v in (None, [], [np.arange(3, dtype=np.int64), np.arange(5, dtype=np.int64)]):
        got = e.infer({"os": v})
        if v is None:   # as above: onnx.reference's Identity refuses None
            want = _ref(_without(model, "os_out"), {"os": v})
            want["os_out"] = None
        else:
            want = _ref(model, {"os": v})
        _same(got["has"], want["has"])
        _same(got["os_out"], want["os_out"])
        assert bool(got["has"]) == (v is not None)
    # an optional holding an empty sequence is not an empty optional
    assert e.infer({"os": []})["os_out"] == []


def test_context_values_and_errors(tmp_path):
    path = str(tmp_path / "consume.onnx")
    _consume_model(path)
    e = kiln.build(path)
    ctx = e.create_execution_context()
    t = np.ones((2, 3), np.float32)
    seq = [np.full((2, 3), float(i), np.float32) for i in range(2)]
    ctx.set_input_value("seq", seq)
    ctx.set_input_value("opt", None)
    ctx.set_tensor_address("t", t)
    # the tensor outputs are left unbound: the context allocates them
    ctx.execute_async_v3()
    out = ctx.get_output_value("seq_out")
    assert len(out) == 3 and np.array_equal(out[2], t) and np.array_equal(out[1], seq[1])
    assert ctx.get_output_value("opt_out") is None
    # the values were copied: changing the arrays afterwards changes nothing
    seq[0][:] = 7
    ctx.execute_async_v3()
    assert np.all(ctx.get_output_value("seq_out")[0] == 0)

    with pytest.raises(kiln.InvalidArgumentError, match="list of arrays"):
        ctx.set_input_value("seq", np.zeros((2, 3), np.float32))
    with pytest.raises(kiln.InvalidArgumentError, match="not None"):
        ctx.set_input_value("seq", None)
    with pytest.raises(kiln.InvalidArgumentError, match="not a list"):
        ctx.set_input_value("opt", [np.zeros(2, np.float32)])
    with pytest.raises(kiln.InvalidArgumentError, match="is a tensor"):
        ctx.set_input_value("t", [t])
    with pytest.raises(kiln.InvalidArgumentError, match="not a sequence or optional"):
        ctx.get_output_value("len")
    with pytest.raises(kiln.InvalidArgumentError, match="set_sequence_input"):
        ctx.set_tensor_address("seq", seq[0])
    with pytest.raises(kiln.NotFoundError):
        e.get_tensor_kind("nothing")
    # elements that cannot be stacked: kiln's run error, naming the node
    with pytest.raises(kiln.ExecutionError, match="ConcatFromSequence"):
        e.infer({"seq": [np.zeros((2, 3), np.float32), np.zeros((2, 4), np.float32)], "t": t,
                 "opt": None})
    # the engine's infer context stays usable after the error
    assert int(e.infer({"seq": seq, "t": t, "opt": None})["len"]) == 2


def test_compare_sequence_outputs(tmp_path):
    pytest.importorskip("onnxruntime")
    path = str(tmp_path / "produce.onnx")
    _produce_model(path)
    r = kiln.compare(path)   # tensor inputs: random feeds; ONNX Runtime's results
    assert r.passed, r.table()
    names = [o.name for o in r.outputs]
    assert names == ["parts[0]", "parts[1]", "parts[2]", "pair[0]", "pair[1]", "joined", "n",
                     "opt_y"]
    # a reference of another length, another element, or None where kiln has a value
    ref = dict(r.ref_outputs)
    bad = dict(ref, parts=ref["parts"][:2])
    assert not kiln.compare(path, inputs=r.inputs, reference=bad).passed
    bad = dict(ref, pair=[ref["pair"][0], ref["pair"][1] + 1])
    res = kiln.compare(path, inputs=r.inputs, reference=bad)
    assert [o.name for o in res.outputs if not o.passed] == ["pair[1]"]
    assert not kiln.compare(path, inputs=r.inputs, reference=dict(ref, opt_y=None)).passed

    consume = str(tmp_path / "consume.onnx")
    _consume_model(consume)
    with pytest.raises(ValueError, match="sequence or optional"):
        kiln.compare(consume)
