"""Plugins from Python: libraries, the registry, plugins defined in Python."""
import gc
import os

import numpy as np
import pytest
from onnx import TensorProto, helper

import kiln
from conftest import make_model


class PyScale(kiln.Plugin):
    name = "PyScaleT"
    fields = {"alpha": kiln.FieldType.FLOAT32, "tag": kiln.FieldType.STRING}
    dtypes = (kiln.float32, kiln.float16)

    def __init__(self, alpha=1.0, tag=""):
        self.alpha = alpha
        self.tag = tag

    def enqueue(self, inputs, outputs, workspace, stream):
        assert stream is None and isinstance(inputs[0], np.ndarray)
        np.multiply(inputs[0], np.asarray(self.alpha, inputs[0].dtype), out=outputs[0])


def concat_shapes(shapes, fields):
    s = shapes[0]
    return [[s[0] * 2, s[1]]]        # DimExpr arithmetic


def concat_enqueue(inputs, outputs, fields, stream):
    outputs[0][...] = np.concatenate([inputs[0], inputs[0]])


@pytest.fixture(scope="module")
def py_plugins():
    kiln.register_plugin(PyScale)
    tile = kiln.define_plugin("PyTwiceT", concat_enqueue, output_shapes=concat_shapes)
    yield
    gc.collect()
    kiln.deregister_plugin(PyScale)
    kiln.deregister_plugin(tile)


def plugin_model(path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("PyScaleT", ["r"], ["s"], name="scale", domain="kiln.plugins",
                              alpha=2.5, tag="hello"),
             helper.make_node("PyTwiceT", ["s"], ["y"], name="twice", domain="kiln.plugins")]
    return make_model(path, nodes, [x], [y])


def test_python_plugins_build_run_and_serialize(py_plugins, tmp_path, rng):
    ids = {(p.name, p.source) for p in kiln.list_plugins()}
    assert ("PyScaleT", "python") in ids and ("PyTwiceT", "python") in ids
    reg = kiln.get_plugin_registry()
    c = reg.get_creator("PyScaleT", "1")
    assert c is not None and [f.name for f in c.fields] == ["alpha", "tag"]

    model = plugin_model(str(tmp_path / "p.onnx"))
    engine = kiln.build(model, shapes={"x": ((1, 4), (2, 4), (8, 4))})
    assert [op for _, op, _ in engine.layers][-2:] == ["PyScaleT", "PyTwiceT"]
    a = (np.arange(12, dtype=np.float32).reshape(3, 4) - 5)
    want = np.concatenate([np.maximum(a, 0) * 2.5] * 2)
    np.testing.assert_array_equal(engine.infer({"x": a})["y"], want)
    # the fields went into the plan: a fresh load recreates the plugin from them
    recs = kiln.plugin.plan_plugins(engine.serialize())["plugins"]
    assert {r["name"] for r in recs} == {"PyScaleT", "PyTwiceT"}
    again = kiln.Runtime().deserialize_cuda_engine(engine.serialize())
    np.testing.assert_array_equal(again.infer({"x": a})["y"], want)


def test_python_plugin_in_use_cannot_go(py_plugins, tmp_path):
    engine = kiln.build(plugin_model(str(tmp_path / "p.onnx")), shapes={"x": (2, 4)})
    with pytest.raises(kiln.PluginError, match="in use"):
        kiln.deregister_plugin(PyScale)
    np.testing.assert_array_equal(engine.infer({"x": np.ones((2, 4), np.float32)})["y"],
                                  np.full((4, 4), 2.5, np.float32))
    del engine
    gc.collect()
    kiln.deregister_plugin(PyScale)      # free now
    kiln.register_plugin(PyScale)


def test_python_errors_become_kiln_errors(tmp_path):
    class Boom(kiln.Plugin):
        name = "PyBoomT"

        def enqueue(self, inputs, outputs, workspace, stream):
            raise RuntimeError("boom in enqueue")

    class BadShape(kiln.Plugin):
        name = "PyBadShapeT"

        def output_shapes(self, shapes):
            raise ValueError("no shape for you")

        def enqueue(self, inputs, outputs, workspace, stream):
            pass
    kiln.register_plugin(Boom)
    kiln.register_plugin(BadShape)
    try:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
        m1 = make_model(str(tmp_path / "b.onnx"),
                        [helper.make_node("PyBoomT", ["x"], ["y"], name="boom", domain="kiln.plugins")], [x], [y])
        e = kiln.build(m1)
        with pytest.raises(kiln.Error, match="boom in enqueue") as err:
            e.infer({"x": np.ones((2, 2), np.float32)})
        assert "RuntimeError" in str(err.value)
        del err          # its traceback holds the engine
        m2 = make_model(str(tmp_path / "s.onnx"),
                        [helper.make_node("PyBadShapeT", ["x"], ["y"], name="bad", domain="kiln.plugins")], [x], [y])
        with pytest.raises(kiln.Error, match="no shape for you") as err2:
            kiln.build(m2)
        del e, err2
        gc.collect()
    finally:
        kiln.deregister_plugin(Boom)
        kiln.deregister_plugin(BadShape)


def test_duplicate_identity_refused(py_plugins):
    with pytest.raises(kiln.Error):
        kiln.register_plugin(PyScale)


def test_plugin_library(plugin_dir, tmp_path, rng):
    lib_path = os.path.join(plugin_dir, "libkiln_plugin_custom_act.so")
    if not os.path.exists(lib_path):
        pytest.skip(f"{lib_path} not built")
    lib = kiln.load_plugin_library(lib_path, namespace="pytest")
    try:
        assert len(lib.sha256) == 64 and lib.path.endswith("libkiln_plugin_custom_act.so")
        mine = [p for p in kiln.list_plugins() if p.name == "CustomAct" and p.namespace == "pytest"]
        assert mine and mine[0].library == lib.path
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
        node = helper.make_node("CustomAct", ["x"], ["y"], name="act", domain="kiln.plugins",
                                alpha=0.8, plugin_namespace="pytest")
        e = kiln.build(make_model(str(tmp_path / "c.onnx"), [node], [x], [y]))
        a = rng.standard_normal((3, 5)).astype(np.float32)
        want = a * 0.5 * (1 + np.tanh(0.8 * (a + 0.044715 * a ** 3)))
        np.testing.assert_allclose(e.infer({"x": a})["y"], want, rtol=1e-5, atol=1e-6)
        with pytest.raises(kiln.PluginError):
            lib.deregister()          # an engine uses it
        del e
        gc.collect()
    finally:
        lib.deregister()
    assert not [p for p in kiln.list_plugins() if p.namespace == "pytest"]
    with pytest.raises(kiln.FileError, match="missing.so"):
        kiln.load_plugin_library(str(tmp_path / "missing.so"))


def test_dim_expr_outside_its_call():
    kept = []

    class Keeper(kiln.Plugin):
        name = "PyKeeperT"

        def output_shapes(self, shapes):
            kept.append(shapes[0][0])
            return [shapes[0]]

        def enqueue(self, inputs, outputs, workspace, stream):
            outputs[0][...] = inputs[0]
    kiln.register_plugin(Keeper)
    try:
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])
            y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
            e = kiln.build(make_model(os.path.join(d, "k.onnx"),
                                      [helper.make_node("PyKeeperT", ["x"], ["y"], domain="kiln.plugins")], [x], [y]))
            del e
        gc.collect()
        with pytest.raises(ValueError, match="outside"):
            kept[0] + 1
    finally:
        kiln.deregister_plugin(Keeper)


def test_formats_are_negotiated(tmp_path):
    seen = []

    def enqueue(inputs, outputs, fields, stream):
        seen.append(inputs[0].dtype)
        outputs[0][...] = inputs[0] + 1

    def half_only(pos, descs, n_in, n_out):
        return int(descs[pos].format) == 0 and descs[pos].dtype == kiln.float16
    cls = kiln.define_plugin("PyHalfOnlyT", enqueue, supports_format=half_only)
    try:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
        m = make_model(str(tmp_path / "h.onnx"),
                       [helper.make_node("PyHalfOnlyT", ["x"], ["y"], domain="kiln.plugins")], [x], [y])
        e = kiln.build(m, logger=kiln.Logger(kiln.Logger.ERROR))
        assert [op for _, op, _ in e.layers] == ["Cast", "PyHalfOnlyT", "Cast"]
        out = e.infer({"x": np.arange(4, dtype=np.float32)})["y"]
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out, np.arange(1, 5, dtype=np.float32))
        assert seen == [np.dtype(np.float16)]
        del e
    finally:
        gc.collect()
        kiln.deregister_plugin(cls)
