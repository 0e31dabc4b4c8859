/* kiln_module.c - kiln._kiln, the CPython extension module over kiln's public
 * C API (include/kiln/). Written against the limited API of Python 3.11
 * (Py_LIMITED_API), so one abi3 build serves every CPython from 3.11 on.
 *
 * This layer is thin on purpose: one Python type per C handle (network,
 * builder config, engine, context, event, plugin library), module functions
 * for the rest, exceptions per kiln_status carrying kiln_last_error(), and
 * the GIL released around every call that parses, builds, loads, copies,
 * synchronises or runs. The TensorRT-shaped classes live in kiln/__init__.py
 * on top of it. Python-defined plugins are C creators here whose callbacks
 * take the GIL and call into a Python adapter object (kiln/plugin.py). */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/kiln.h"
#include "kiln/kiln_builder.h"
#include "kiln/kiln_network.h"
#include "kiln/kiln_onnx.h"
#include "kiln/kiln_plugin.h"
#include "kiln/kiln_runtime.h"
#include "kiln/kiln_tools.h"

/* ------------------------------------------------------------------------
 * Exceptions: kiln.Error and one subclass per kiln_status. */

#define N_STATUS 14
static PyObject *err_base;
static PyObject *err_by_status[N_STATUS];

static PyObject *raise_status(kiln_status st) {
    PyObject *cls = (st > 0 && st < N_STATUS && err_by_status[st]) ? err_by_status[st] : err_base;
    const char *msg = kiln_last_error();
    PyObject *text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
    if (!text)
        return NULL;
    PyObject *exc = PyObject_CallFunctionObjArgs(cls, text, NULL);
    Py_DECREF(text);
    if (!exc)
        return NULL;
    PyObject *code = PyLong_FromLong((long)st);
    if (code) {
        PyObject_SetAttrString(exc, "status", code);
        Py_DECREF(code);
    }
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

#define CHECK(call)                          \
    do {                                     \
        kiln_status st_ = (call);            \
        if (st_ != KILN_OK)                  \
            return raise_status(st_);        \
    } while (0)

/* dims from a Python sequence of ints */
static int parse_dims(PyObject *seq, int64_t *dims, int *rank, const char *what) {
    PyObject *fast = PySequence_Tuple(seq);
    if (!fast)
        return -1;
    Py_ssize_t n = PyTuple_Size(fast);
    if (n > KILN_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "%s: %zd dimensions, more than kiln's %d", what, n,
                     KILN_MAX_DIMS);
        Py_DECREF(fast);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyTuple_GetItem(fast, i);
        PyObject *idx = PyNumber_Index(o);
        if (!idx) {
            Py_DECREF(fast);
            return -1;
        }
        dims[i] = PyLong_AsLongLong(idx);
        Py_DECREF(idx);
        if (dims[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
    }
    *rank = (int)n;
    Py_DECREF(fast);
    return 0;
}

static PyObject *dims_tuple(const int64_t *dims, int rank) {
    PyObject *t = PyTuple_New(rank);
    if (!t)
        return NULL;
    for (int i = 0; i < rank; i++) {
        PyObject *v = PyLong_FromLongLong(dims[i]);
        if (!v) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SetItem(t, i, v);
    }
    return t;
}

/* a string list from a sequence of str, kept alive by `keep` */
static const char **parse_names(PyObject *seq, Py_ssize_t *n, PyObject **keep) {
    *keep = PySequence_Tuple(seq);
    if (!*keep)
        return NULL;
    *n = PyTuple_Size(*keep);
    const char **names = PyMem_Calloc((size_t)(*n ? *n : 1), sizeof *names);
    if (!names) {
        Py_CLEAR(*keep);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        names[i] = PyUnicode_AsUTF8AndSize(PyTuple_GetItem(*keep, i), NULL);
        if (!names[i]) {
            PyMem_Free(names);
            Py_CLEAR(*keep);
            return NULL;
        }
    }
    return names;
}

static void generic_free(PyObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

/* ------------------------------------------------------------------------
 * Network */

typedef struct {
    PyObject_HEAD
    kiln_network *net;
} NetworkObject;

static PyObject *NetworkType;

static PyObject *network_wrap(kiln_network *net) {
    NetworkObject *o = PyObject_New(NetworkObject, (PyTypeObject *)NetworkType);
    if (!o) {
        kiln_network_destroy(net);
        return NULL;
    }
    o->net = net;
    return (PyObject *)o;
}

static void network_dealloc(PyObject *self) {
    kiln_network_destroy(((NetworkObject *)self)->net);
    generic_free(self);
}

static PyObject *network_new(PyTypeObject *tp, PyObject *args, PyObject *kw) {
    kiln_network *net;
    CHECK(kiln_network_create(&net));
    return network_wrap(net);
}

#define NET(self) (((NetworkObject *)(self))->net)

static PyObject *network_add_input(PyObject *self, PyObject *args) {
    const char *name;
    int dtype, rank;
    PyObject *dims_o;
    int64_t dims[KILN_MAX_DIMS];
    if (!PyArg_ParseTuple(args, "siO", &name, &dtype, &dims_o))
        return NULL;
    if (parse_dims(dims_o, dims, &rank, name) < 0)
        return NULL;
    CHECK(kiln_network_add_input(NET(self), name, (kiln_dtype)dtype, rank, dims, NULL));
    Py_RETURN_NONE;
}

static PyObject *network_add_constant(PyObject *self, PyObject *args) {
    const char *name;
    int dtype, rank;
    PyObject *dims_o, *data_o;
    int64_t dims[KILN_MAX_DIMS];
    if (!PyArg_ParseTuple(args, "siOO", &name, &dtype, &dims_o, &data_o))
        return NULL;
    if (parse_dims(dims_o, dims, &rank, name) < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(data_o, &view, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    kiln_status st = kiln_network_add_constant(NET(self), name, (kiln_dtype)dtype, rank, dims,
                                               view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    CHECK(st);
    Py_RETURN_NONE;
}

static PyObject *network_add_node(PyObject *self, PyObject *args) {
    const char *name, *op, *domain;
    int opset;
    PyObject *ins_o, *outs_o, *kin = NULL, *kout = NULL;
    if (!PyArg_ParseTuple(args, "sssiOO", &name, &op, &domain, &opset, &ins_o, &outs_o))
        return NULL;
    Py_ssize_t n_in, n_out;
    const char **ins = parse_names(ins_o, &n_in, &kin);
    if (!ins)
        return NULL;
    const char **outs = parse_names(outs_o, &n_out, &kout);
    if (!outs) {
        PyMem_Free(ins);
        Py_DECREF(kin);
        return NULL;
    }
    int index = -1;
    kiln_status st = kiln_network_add_node(NET(self), name, op, domain, opset, (int)n_in, ins,
                                           (int)n_out, outs, &index);
    PyMem_Free(ins);
    PyMem_Free(outs);
    Py_DECREF(kin);
    Py_DECREF(kout);
    CHECK(st);
    return PyLong_FromLong(index);
}

static PyObject *network_set_attr(PyObject *self, PyObject *args) {
    int node;
    const char *name, *kind;
    PyObject *value;
    if (!PyArg_ParseTuple(args, "issO", &node, &name, &kind, &value))
        return NULL;
    kiln_status st;
    if (strcmp(kind, "int") == 0) {
        long long v = PyLong_AsLongLong(value);
        if (v == -1 && PyErr_Occurred())
            return NULL;
        st = kiln_network_set_attr_int(NET(self), node, name, v);
    } else if (strcmp(kind, "float") == 0) {
        double v = PyFloat_AsDouble(value);
        if (v == -1.0 && PyErr_Occurred())
            return NULL;
        st = kiln_network_set_attr_float(NET(self), node, name, (float)v);
    } else if (strcmp(kind, "string") == 0) {
        const char *v = PyUnicode_AsUTF8AndSize(value, NULL);
        if (!v)
            return NULL;
        st = kiln_network_set_attr_string(NET(self), node, name, v);
    } else if (strcmp(kind, "ints") == 0 || strcmp(kind, "floats") == 0) {
        PyObject *t = PySequence_Tuple(value);
        if (!t)
            return NULL;
        Py_ssize_t n = PyTuple_Size(t);
        int ints = kind[0] == 'i';
        void *buf = PyMem_Calloc((size_t)(n ? n : 1), ints ? sizeof(int64_t) : sizeof(float));
        if (!buf) {
            Py_DECREF(t);
            return PyErr_NoMemory();
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *it = PyTuple_GetItem(t, i);
            if (ints)
                ((int64_t *)buf)[i] = PyLong_AsLongLong(it);
            else
                ((float *)buf)[i] = (float)PyFloat_AsDouble(it);
        }
        Py_DECREF(t);
        if (PyErr_Occurred()) {
            PyMem_Free(buf);
            return NULL;
        }
        st = ints ? kiln_network_set_attr_ints(NET(self), node, name, buf, (size_t)n)
                  : kiln_network_set_attr_floats(NET(self), node, name, buf, (size_t)n);
        PyMem_Free(buf);
    } else {
        PyErr_Format(PyExc_ValueError, "attribute kind '%s': use int, float, string, ints or floats",
                     kind);
        return NULL;
    }
    CHECK(st);
    Py_RETURN_NONE;
}

static PyObject *network_mark_output(PyObject *self, PyObject *arg) {
    const char *name = PyUnicode_AsUTF8AndSize(arg, NULL);
    if (!name)
        return NULL;
    CHECK(kiln_network_mark_output(NET(self), name));
    Py_RETURN_NONE;
}

static PyObject *str_or_none(const char *s) {
    if (!s)
        Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "replace");
}

static PyObject *network_counts(PyObject *self, PyObject *unused) {
    return Py_BuildValue("(iii)", kiln_network_num_inputs(NET(self)),
                         kiln_network_num_outputs(NET(self)), kiln_network_num_nodes(NET(self)));
}

static PyObject *network_name(PyObject *self, PyObject *args) {
    const char *what;
    int i;
    if (!PyArg_ParseTuple(args, "si", &what, &i))
        return NULL;
    const kiln_network *n = NET(self);
    const char *s = NULL;
    if (strcmp(what, "input") == 0)
        s = kiln_network_input_name(n, i);
    else if (strcmp(what, "output") == 0)
        s = kiln_network_output_name(n, i);
    else if (strcmp(what, "node") == 0)
        s = kiln_network_node_name(n, i);
    else if (strcmp(what, "op") == 0)
        s = kiln_network_node_op_type(n, i);
    return str_or_none(s);
}

static PyObject *network_node_io(PyObject *self, PyObject *args) {
    int node;
    if (!PyArg_ParseTuple(args, "i", &node))
        return NULL;
    const kiln_network *n = NET(self);
    int ni = kiln_network_node_num_inputs(n, node), no = kiln_network_node_num_outputs(n, node);
    if (ni < 0 || no < 0) {
        PyErr_Format(PyExc_IndexError, "no node %d", node);
        return NULL;
    }
    PyObject *a = PyList_New(0), *b = PyList_New(0);
    for (int i = 0; a && b && i < ni; i++) {
        PyObject *s = str_or_none(kiln_network_node_input(n, node, i));
        if (!s || PyList_Append(a, s) < 0)
            Py_CLEAR(a);
        Py_XDECREF(s);
    }
    for (int i = 0; a && b && i < no; i++) {
        PyObject *s = str_or_none(kiln_network_node_output(n, node, i));
        if (!s || PyList_Append(b, s) < 0)
            Py_CLEAR(b);
        Py_XDECREF(s);
    }
    if (!a || !b) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        return NULL;
    }
    return Py_BuildValue("(NN)", a, b);
}

static PyObject *network_tensor_info(PyObject *self, PyObject *arg) {
    const char *name = PyUnicode_AsUTF8AndSize(arg, NULL);
    if (!name)
        return NULL;
    kiln_dtype dt;
    int rank;
    int64_t dims[KILN_MAX_DIMS];
    CHECK(kiln_network_tensor_info(NET(self), name, &dt, &rank, dims));
    if (rank < 0)
        return Py_BuildValue("(iO)", (int)dt, Py_None);
    return Py_BuildValue("(iN)", (int)dt, dims_tuple(dims, rank));
}

static PyObject *network_set_tensor_info(PyObject *self, PyObject *args) {
    const char *name;
    int dtype, rank;
    PyObject *dims_o;
    int64_t dims[KILN_MAX_DIMS];
    if (!PyArg_ParseTuple(args, "siO", &name, &dtype, &dims_o))
        return NULL;
    if (parse_dims(dims_o, dims, &rank, name) < 0)
        return NULL;
    CHECK(kiln_network_set_tensor_info(NET(self), name, (kiln_dtype)dtype, rank, dims));
    Py_RETURN_NONE;
}

static PyObject *network_dim_name(PyObject *self, PyObject *args) {
    const char *name, *dn = NULL;
    int d;
    if (!PyArg_ParseTuple(args, "si", &name, &d))
        return NULL;
    CHECK(kiln_network_tensor_dim_name(NET(self), name, d, &dn));
    if (!dn)
        Py_RETURN_NONE;
    return PyUnicode_FromString(dn);
}

static PyObject *network_set_dim_name(PyObject *self, PyObject *args) {
    const char *name, *dn = NULL;
    int d;
    if (!PyArg_ParseTuple(args, "siz", &name, &d, &dn))
        return NULL;
    CHECK(kiln_network_set_dim_name(NET(self), name, d, dn));
    Py_RETURN_NONE;
}

static PyObject *network_extract(PyObject *self, PyObject *arg) {
    PyObject *t = PySequence_Tuple(arg);
    if (!t)
        return NULL;
    Py_ssize_t n = PyTuple_Size(t);
    int *idx = PyMem_Calloc((size_t)(n ? n : 1), sizeof *idx);
    if (!idx) {
        Py_DECREF(t);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++)
        idx[i] = (int)PyLong_AsLong(PyTuple_GetItem(t, i));
    Py_DECREF(t);
    if (PyErr_Occurred()) {
        PyMem_Free(idx);
        return NULL;
    }
    kiln_network *out = NULL;
    kiln_status st = kiln_network_extract(NET(self), (int)n, idx, &out);
    PyMem_Free(idx);
    CHECK(st);
    return network_wrap(out);
}

static PyObject *network_write_onnx(PyObject *self, PyObject *arg) {
    PyObject *b;
    if (!PyUnicode_FSConverter(arg, &b))
        return NULL;
    const char *path = PyBytes_AsString(b);
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS st = kiln_onnx_write_file(NET(self), path);
    Py_END_ALLOW_THREADS Py_DECREF(b);
    CHECK(st);
    Py_RETURN_NONE;
}

static PyMethodDef network_methods[] = {
    {"add_input", network_add_input, METH_VARARGS, "add_input(name, dtype, dims)"},
    {"add_constant", network_add_constant, METH_VARARGS, "add_constant(name, dtype, dims, buffer)"},
    {"add_node", network_add_node, METH_VARARGS,
     "add_node(name, op_type, domain, opset, inputs, outputs) -> index"},
    {"set_attr", network_set_attr, METH_VARARGS,
     "set_attr(node, name, kind, value); kind: int, float, string, ints, floats"},
    {"mark_output", network_mark_output, METH_O, "mark_output(name)"},
    {"counts", network_counts, METH_NOARGS, "(num_inputs, num_outputs, num_nodes)"},
    {"name", network_name, METH_VARARGS, "name(what, i); what: input, output, node, op"},
    {"node_io", network_node_io, METH_VARARGS, "node_io(node) -> (inputs, outputs)"},
    {"tensor_info", network_tensor_info, METH_O, "tensor_info(name) -> (dtype, dims or None)"},
    {"set_tensor_info", network_set_tensor_info, METH_VARARGS, "set_tensor_info(name, dtype, dims)"},
    {"dim_name", network_dim_name, METH_VARARGS, "dim_name(tensor, d) -> str or None"},
    {"set_dim_name", network_set_dim_name, METH_VARARGS, "set_dim_name(tensor, d, name or None)"},
    {"extract", network_extract, METH_O, "extract(node_indices) -> Network"},
    {"write_onnx", network_write_onnx, METH_O, "write_onnx(path)"},
    {NULL, NULL, 0, NULL}};

static PyType_Slot network_slots[] = {{Py_tp_new, network_new},
                                      {Py_tp_dealloc, network_dealloc},
                                      {Py_tp_methods, network_methods},
                                      {Py_tp_doc, "A kiln_network handle (kiln_network.h)."},
                                      {0, NULL}};
static PyType_Spec network_spec = {"kiln._kiln.Network", sizeof(NetworkObject), 0,
                                   Py_TPFLAGS_DEFAULT, network_slots};

/* onnx parsing: module functions, GIL released */
static PyObject *mod_onnx_parse_file(PyObject *m, PyObject *args) {
    PyObject *path_b;
    unsigned int flags = 0;
    if (!PyArg_ParseTuple(args, "O&|I", PyUnicode_FSConverter, &path_b, &flags))
        return NULL;
    const char *path = PyBytes_AsString(path_b);
    kiln_network *net = NULL;
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS st = kiln_onnx_parse_file_ex(path, flags, &net);
    Py_END_ALLOW_THREADS Py_DECREF(path_b);
    CHECK(st);
    return network_wrap(net);
}

static PyObject *mod_onnx_parse_memory(PyObject *m, PyObject *args) {
    PyObject *data_o, *base = Py_None;
    unsigned int flags = 0;
    if (!PyArg_ParseTuple(args, "O|OI", &data_o, &base, &flags))
        return NULL;
    PyObject *base_b = NULL;
    if (base != Py_None && !PyUnicode_FSConverter(base, &base_b))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(data_o, &view, PyBUF_C_CONTIGUOUS) < 0) {
        Py_XDECREF(base_b);
        return NULL;
    }
    const char *bd = base_b ? PyBytes_AsString(base_b) : NULL;
    kiln_network *net = NULL;
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS st = kiln_onnx_parse_memory_ex(view.buf, (size_t)view.len, bd, flags, &net);
    Py_END_ALLOW_THREADS PyBuffer_Release(&view);
    Py_XDECREF(base_b);
    CHECK(st);
    return network_wrap(net);
}

/* ------------------------------------------------------------------------
 * Builder config */

typedef struct {
    PyObject_HEAD
    kiln_builder_config *cfg;
} ConfigObject;

#define CFG(self) (((ConfigObject *)(self))->cfg)

static PyObject *config_new(PyTypeObject *tp, PyObject *args, PyObject *kw) {
    kiln_builder_config *cfg;
    CHECK(kiln_builder_config_create(&cfg));
    ConfigObject *o = PyObject_New(ConfigObject, tp);
    if (!o) {
        kiln_builder_config_destroy(cfg);
        return NULL;
    }
    o->cfg = cfg;
    return (PyObject *)o;
}

static void config_dealloc(PyObject *self) {
    kiln_builder_config_destroy(CFG(self));
    generic_free(self);
}

static PyObject *config_set_flags(PyObject *self, PyObject *arg) {
    unsigned long v = PyLong_AsUnsignedLong(arg);
    if (v == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    kiln_builder_config_set_flags(CFG(self), (uint32_t)v);
    Py_RETURN_NONE;
}

static PyObject *config_set_workspace_limit(PyObject *self, PyObject *arg) {
    unsigned long long v = PyLong_AsUnsignedLongLong(arg);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    kiln_builder_config_set_workspace_limit(CFG(self), v);
    Py_RETURN_NONE;
}

static PyObject *config_set_backend(PyObject *self, PyObject *arg) {
    const char *s = PyUnicode_AsUTF8AndSize(arg, NULL);
    if (!s)
        return NULL;
    CHECK(kiln_builder_config_set_backend(CFG(self), s));
    Py_RETURN_NONE;
}

static PyObject *config_set_optimization_level(PyObject *self, PyObject *arg) {
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    CHECK(kiln_builder_config_set_optimization_level(CFG(self), (int)v));
    Py_RETURN_NONE;
}

static PyObject *config_set_threads(PyObject *self, PyObject *arg) {
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    kiln_builder_config_set_threads(CFG(self), (int)v);
    Py_RETURN_NONE;
}

static PyObject *config_set_layer_precision(PyObject *self, PyObject *args) {
    const char *name;
    int dt;
    if (!PyArg_ParseTuple(args, "si", &name, &dt))
        return NULL;
    CHECK(kiln_builder_config_set_layer_precision(CFG(self), name, (kiln_dtype)dt));
    Py_RETURN_NONE;
}

static PyObject *config_set_io_type(PyObject *self, PyObject *args) {
    int is_out, index, dt;
    if (!PyArg_ParseTuple(args, "iii", &is_out, &index, &dt))
        return NULL;
    CHECK(kiln_builder_config_set_io_type(CFG(self), is_out, index, (kiln_dtype)dt));
    Py_RETURN_NONE;
}

static PyObject *config_set_timing_cache(PyObject *self, PyObject *arg) {
    if (arg == Py_None) {
        CHECK(kiln_builder_config_set_timing_cache(CFG(self), NULL));
        Py_RETURN_NONE;
    }
    PyObject *b;
    if (!PyUnicode_FSConverter(arg, &b))
        return NULL;
    kiln_status st = kiln_builder_config_set_timing_cache(CFG(self), PyBytes_AsString(b));
    Py_DECREF(b);
    CHECK(st);
    Py_RETURN_NONE;
}

static PyObject *config_add_profile(PyObject *self, PyObject *unused) {
    int idx;
    CHECK(kiln_builder_config_add_profile(CFG(self), &idx));
    return PyLong_FromLong(idx);
}

static PyObject *config_set_shape(PyObject *self, PyObject *args) {
    int profile;
    const char *name;
    PyObject *a, *b, *c;
    if (!PyArg_ParseTuple(args, "isOOO", &profile, &name, &a, &b, &c))
        return NULL;
    int64_t mn[KILN_MAX_DIMS], op[KILN_MAX_DIMS], mx[KILN_MAX_DIMS];
    int r1, r2, r3;
    if (parse_dims(a, mn, &r1, name) < 0 || parse_dims(b, op, &r2, name) < 0 ||
        parse_dims(c, mx, &r3, name) < 0)
        return NULL;
    if (r1 != r2 || r1 != r3) {
        PyErr_Format(PyExc_ValueError, "input '%s': min, opt and max shapes have ranks %d, %d, %d",
                     name, r1, r2, r3);
        return NULL;
    }
    CHECK(kiln_builder_config_set_shape(CFG(self), profile, name, r1, mn, op, mx));
    Py_RETURN_NONE;
}

static PyObject *config_set_input_values(PyObject *self, PyObject *args) {
    int profile, dt;
    const char *name;
    PyObject *a, *b, *c;
    if (!PyArg_ParseTuple(args, "isiOOO", &profile, &name, &dt, &a, &b, &c))
        return NULL;
    Py_buffer va, vb, vc;
    if (PyObject_GetBuffer(a, &va, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(b, &vb, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&va);
        return NULL;
    }
    if (PyObject_GetBuffer(c, &vc, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&va);
        PyBuffer_Release(&vb);
        return NULL;
    }
    size_t es = kiln_dtype_size((kiln_dtype)dt);
    kiln_status st = KILN_ERR_INVALID_ARGUMENT;
    if (es && va.len == vb.len && va.len == vc.len && va.len % (Py_ssize_t)es == 0)
        st = kiln_builder_config_set_input_values(CFG(self), profile, name, (kiln_dtype)dt,
                                                  (size_t)va.len / es, va.buf, vb.buf, vc.buf);
    PyBuffer_Release(&va);
    PyBuffer_Release(&vb);
    PyBuffer_Release(&vc);
    if (st == KILN_ERR_INVALID_ARGUMENT && !(es && va.len == vb.len && va.len == vc.len)) {
        PyErr_Format(PyExc_ValueError,
                     "input '%s': min, opt and max values must be buffers of one size of the type",
                     name);
        return NULL;
    }
    CHECK(st);
    Py_RETURN_NONE;
}

static PyMethodDef config_methods[] = {
    {"set_flags", config_set_flags, METH_O, "set_flags(bits)"},
    {"set_workspace_limit", config_set_workspace_limit, METH_O, "set_workspace_limit(bytes)"},
    {"set_backend", config_set_backend, METH_O, "set_backend(name)"},
    {"set_optimization_level", config_set_optimization_level, METH_O, "set_optimization_level(0..5)"},
    {"set_threads", config_set_threads, METH_O, "set_threads(n)"},
    {"set_layer_precision", config_set_layer_precision, METH_VARARGS, "set_layer_precision(layer, dtype)"},
    {"set_io_type", config_set_io_type, METH_VARARGS, "set_io_type(is_output, index, dtype)"},
    {"set_timing_cache", config_set_timing_cache, METH_O, "set_timing_cache(path or None)"},
    {"add_profile", config_add_profile, METH_NOARGS, "add_profile() -> index"},
    {"set_shape", config_set_shape, METH_VARARGS, "set_shape(profile, input, min, opt, max)"},
    {"set_input_values", config_set_input_values, METH_VARARGS,
     "set_input_values(profile, input, dtype, min, opt, max)"},
    {NULL, NULL, 0, NULL}};

static PyType_Slot config_slots[] = {{Py_tp_new, config_new},
                                     {Py_tp_dealloc, config_dealloc},
                                     {Py_tp_methods, config_methods},
                                     {Py_tp_doc, "A kiln_builder_config handle (kiln_builder.h)."},
                                     {0, NULL}};
static PyType_Spec config_spec = {"kiln._kiln.BuilderConfig", sizeof(ConfigObject), 0,
                                  Py_TPFLAGS_DEFAULT, config_slots};
static PyObject *ConfigType;

static PyObject *mod_build_serialized(PyObject *m, PyObject *args) {
    PyObject *net_o, *cfg_o;
    if (!PyArg_ParseTuple(args, "O!O!", (PyTypeObject *)NetworkType, &net_o,
                          (PyTypeObject *)ConfigType, &cfg_o))
        return NULL;
    void *plan = NULL;
    size_t size = 0;
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS st = kiln_build_serialized(NET(net_o), CFG(cfg_o), &plan, &size);
    Py_END_ALLOW_THREADS CHECK(st);
    PyObject *b = PyBytes_FromStringAndSize(plan, (Py_ssize_t)size);
    kiln_free(plan);
    return b;
}

/* ------------------------------------------------------------------------
 * Engine */

typedef struct {
    PyObject_HEAD
    kiln_engine *eng;
} EngineObject;

static PyObject *EngineType;
#define ENG(self) (((EngineObject *)(self))->eng)

static void engine_dealloc(PyObject *self) {
    kiln_engine *e = ENG(self);
    Py_BEGIN_ALLOW_THREADS kiln_engine_destroy(e);
    Py_END_ALLOW_THREADS generic_free(self);
}

static PyObject *engine_wrap(kiln_engine *e) {
    EngineObject *o = PyObject_New(EngineObject, (PyTypeObject *)EngineType);
    if (!o) {
        kiln_engine_destroy(e);
        return NULL;
    }
    o->eng = e;
    return (PyObject *)o;
}

static PyObject *mod_engine_load(PyObject *m, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    kiln_engine *e = NULL;
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS st = kiln_engine_load(view.buf, (size_t)view.len, &e);
    Py_END_ALLOW_THREADS PyBuffer_Release(&view);
    CHECK(st);
    return engine_wrap(e);
}

static PyObject *mod_engine_load_file(PyObject *m, PyObject *arg) {
    PyObject *b;
    if (!PyUnicode_FSConverter(arg, &b))
        return NULL;
    const char *path = PyBytes_AsString(b);
    kiln_engine *e = NULL;
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS st = kiln_engine_load_file(path, &e);
    Py_END_ALLOW_THREADS Py_DECREF(b);
    CHECK(st);
    return engine_wrap(e);
}

static const char *name_arg(PyObject *arg) { return PyUnicode_AsUTF8AndSize(arg, NULL); }

static PyObject *engine_num_io_tensors(PyObject *self, PyObject *u) {
    return PyLong_FromLong(kiln_engine_num_io_tensors(ENG(self)));
}
static PyObject *engine_io_tensor_name(PyObject *self, PyObject *arg) {
    long i = PyLong_AsLong(arg);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    return str_or_none(kiln_engine_io_tensor_name(ENG(self), (int)i));
}
static PyObject *engine_tensor_io_mode(PyObject *self, PyObject *arg) {
    const char *n = name_arg(arg);
    return n ? PyLong_FromLong(kiln_engine_tensor_io_mode(ENG(self), n)) : NULL;
}
static PyObject *engine_tensor_dtype(PyObject *self, PyObject *arg) {
    const char *n = name_arg(arg);
    return n ? PyLong_FromLong(kiln_engine_tensor_dtype(ENG(self), n)) : NULL;
}
static PyObject *engine_tensor_is_shape_input(PyObject *self, PyObject *arg) {
    const char *n = name_arg(arg);
    return n ? PyBool_FromLong(kiln_engine_tensor_is_shape_input(ENG(self), n)) : NULL;
}
static PyObject *engine_tensor_kind(PyObject *self, PyObject *arg) {
    const char *n = name_arg(arg);
    return n ? PyLong_FromLong(kiln_engine_tensor_kind(ENG(self), n)) : NULL;
}
static PyObject *engine_tensor_element_kind(PyObject *self, PyObject *arg) {
    const char *n = name_arg(arg);
    return n ? PyLong_FromLong(kiln_engine_tensor_element_kind(ENG(self), n)) : NULL;
}
static PyObject *engine_tensor_shape(PyObject *self, PyObject *arg) {
    const char *n = name_arg(arg);
    if (!n)
        return NULL;
    int64_t dims[KILN_MAX_DIMS];
    int r = kiln_engine_tensor_shape(ENG(self), n, dims);
    if (r < 0)
        Py_RETURN_NONE;
    return dims_tuple(dims, r);
}
static PyObject *engine_num_profiles(PyObject *self, PyObject *u) {
    return PyLong_FromLong(kiln_engine_num_profiles(ENG(self)));
}
static PyObject *engine_profile_shape(PyObject *self, PyObject *args) {
    int profile;
    const char *name;
    if (!PyArg_ParseTuple(args, "is", &profile, &name))
        return NULL;
    int rank = 0;
    int64_t a[KILN_MAX_DIMS], b[KILN_MAX_DIMS], c[KILN_MAX_DIMS];
    CHECK(kiln_engine_profile_shape(ENG(self), profile, name, &rank, a, b, c));
    return Py_BuildValue("(NNN)", dims_tuple(a, rank), dims_tuple(b, rank), dims_tuple(c, rank));
}
static PyObject *engine_layers(PyObject *self, PyObject *u) {
    int n = kiln_engine_num_layers(ENG(self));
    PyObject *l = PyList_New(0);
    for (int i = 0; l && i < n; i++) {
        PyObject *t = Py_BuildValue("(NNN)", str_or_none(kiln_engine_layer_name(ENG(self), i)),
                                    str_or_none(kiln_engine_layer_op(ENG(self), i)),
                                    str_or_none(kiln_engine_layer_tactic(ENG(self), i)));
        if (!t || PyList_Append(l, t) < 0)
            Py_CLEAR(l);
        Py_XDECREF(t);
    }
    return l;
}
static PyObject *engine_layer_info_json(PyObject *self, PyObject *u) {
    char *json = NULL;
    CHECK(kiln_engine_layer_info_json(ENG(self), &json));
    PyObject *s = str_or_none(json);
    kiln_free(json);
    return s;
}
static PyObject *engine_backend(PyObject *self, PyObject *u) {
    return str_or_none(kiln_engine_backend(ENG(self)));
}
static PyObject *engine_alloc(PyObject *self, PyObject *args) {
    unsigned long long n;
    int host = 0;
    if (!PyArg_ParseTuple(args, "K|p", &n, &host))
        return NULL;
    void *p = NULL;
    CHECK(host ? kiln_engine_alloc_host(ENG(self), (size_t)n, &p)
               : kiln_engine_alloc(ENG(self), (size_t)n, &p));
    return PyLong_FromVoidPtr(p);
}
static PyObject *engine_free(PyObject *self, PyObject *args) {
    PyObject *p;
    int host = 0;
    if (!PyArg_ParseTuple(args, "O|p", &p, &host))
        return NULL;
    void *ptr = PyLong_AsVoidPtr(p);
    if (!ptr && PyErr_Occurred())
        return NULL;
    if (host)
        kiln_engine_free_host(ENG(self), ptr);
    else
        kiln_engine_free(ENG(self), ptr);
    Py_RETURN_NONE;
}
static int ptr_conv(PyObject *o, void *out) {
    if (o == Py_None) {
        *(void **)out = NULL;
        return 1;
    }
    void *p = PyLong_AsVoidPtr(o);
    if (!p && PyErr_Occurred())
        return 0;
    *(void **)out = p;
    return 1;
}
static PyObject *engine_copy(PyObject *self, PyObject *args) {
    void *dst, *src, *stream = NULL;
    unsigned long long n;
    int dir, async = 0;
    if (!PyArg_ParseTuple(args, "O&O&Ki|pO&", ptr_conv, &dst, ptr_conv, &src, &n, &dir, &async,
                          ptr_conv, &stream))
        return NULL;
    kiln_status st;
    kiln_engine *e = ENG(self);
    Py_BEGIN_ALLOW_THREADS st = async ? kiln_engine_copy_async(e, dst, src, (size_t)n,
                                                              (kiln_copy_direction)dir, stream)
                                      : kiln_engine_copy(e, dst, src, (size_t)n,
                                                         (kiln_copy_direction)dir);
    Py_END_ALLOW_THREADS CHECK(st);
    Py_RETURN_NONE;
}
static PyObject *engine_stream_create(PyObject *self, PyObject *u) {
    void *s = NULL;
    CHECK(kiln_engine_stream_create(ENG(self), &s));
    return PyLong_FromVoidPtr(s);
}
static PyObject *engine_stream_destroy(PyObject *self, PyObject *arg) {
    void *s;
    if (!ptr_conv(arg, &s))
        return NULL;
    kiln_engine_stream_destroy(ENG(self), s);
    Py_RETURN_NONE;
}

static PyMethodDef engine_methods[] = {
    {"num_io_tensors", engine_num_io_tensors, METH_NOARGS, NULL},
    {"io_tensor_name", engine_io_tensor_name, METH_O, NULL},
    {"tensor_io_mode", engine_tensor_io_mode, METH_O, NULL},
    {"tensor_dtype", engine_tensor_dtype, METH_O, NULL},
    {"tensor_is_shape_input", engine_tensor_is_shape_input, METH_O, NULL},
    {"tensor_shape", engine_tensor_shape, METH_O, "shape as built (-1 dynamic) or None"},
    {"tensor_kind", engine_tensor_kind, METH_O, "0 tensor, 1 sequence, 2 optional, -1 none"},
    {"tensor_element_kind", engine_tensor_element_kind, METH_O,
     "what an optional holds: 1 a sequence, else 0; -1 none"},
    {"num_profiles", engine_num_profiles, METH_NOARGS, NULL},
    {"profile_shape", engine_profile_shape, METH_VARARGS, "profile_shape(profile, name) -> (min, opt, max)"},
    {"layers", engine_layers, METH_NOARGS, "[(name, op, tactic)]"},
    {"layer_info_json", engine_layer_info_json, METH_NOARGS, NULL},
    {"backend", engine_backend, METH_NOARGS, NULL},
    {"alloc", engine_alloc, METH_VARARGS, "alloc(bytes, host=False) -> address"},
    {"free", engine_free, METH_VARARGS, "free(address, host=False)"},
    {"copy", engine_copy, METH_VARARGS, "copy(dst, src, bytes, direction, async=False, stream=None)"},
    {"stream_create", engine_stream_create, METH_NOARGS, NULL},
    {"stream_destroy", engine_stream_destroy, METH_O, NULL},
    {NULL, NULL, 0, NULL}};

static PyType_Slot engine_slots[] = {{Py_tp_dealloc, engine_dealloc},
                                     {Py_tp_methods, engine_methods},
                                     {Py_tp_doc, "A kiln_engine handle (kiln_runtime.h)."},
                                     {0, NULL}};
static PyType_Spec engine_spec = {"kiln._kiln.Engine", sizeof(EngineObject), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
                                  engine_slots};

/* ------------------------------------------------------------------------
 * Context: holds its engine */

typedef struct {
    PyObject_HEAD
    kiln_context *ctx;
    PyObject *engine;
} ContextObject;

static PyObject *ContextType;
#define CTX(self) (((ContextObject *)(self))->ctx)

static PyObject *context_new(PyTypeObject *tp, PyObject *args, PyObject *kw) {
    PyObject *eng;
    if (!PyArg_ParseTuple(args, "O!", (PyTypeObject *)EngineType, &eng))
        return NULL;
    kiln_context *c = NULL;
    kiln_status st;
    kiln_engine *e = ENG(eng);
    Py_BEGIN_ALLOW_THREADS st = kiln_context_create(e, &c);
    Py_END_ALLOW_THREADS CHECK(st);
    ContextObject *o = PyObject_New(ContextObject, tp);
    if (!o) {
        kiln_context_destroy(c);
        return NULL;
    }
    o->ctx = c;
    Py_INCREF(eng);
    o->engine = eng;
    return (PyObject *)o;
}

static void context_dealloc(PyObject *self) {
    ContextObject *o = (ContextObject *)self;
    kiln_context *c = o->ctx;
    Py_BEGIN_ALLOW_THREADS kiln_context_destroy(c);
    Py_END_ALLOW_THREADS Py_XDECREF(o->engine); /* after the context: the engine outlives it */
    generic_free(self);
}

static PyObject *context_set_profile(PyObject *self, PyObject *arg) {
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    CHECK(kiln_context_set_profile(CTX(self), (int)v));
    Py_RETURN_NONE;
}
static PyObject *context_set_input_shape(PyObject *self, PyObject *args) {
    const char *name;
    PyObject *d;
    if (!PyArg_ParseTuple(args, "sO", &name, &d))
        return NULL;
    int64_t dims[KILN_MAX_DIMS];
    int rank;
    if (parse_dims(d, dims, &rank, name) < 0)
        return NULL;
    CHECK(kiln_context_set_input_shape(CTX(self), name, rank, dims));
    Py_RETURN_NONE;
}
static PyObject *context_tensor_shape(PyObject *self, PyObject *arg) {
    const char *n = name_arg(arg);
    if (!n)
        return NULL;
    int64_t dims[KILN_MAX_DIMS];
    int r = kiln_context_tensor_shape(CTX(self), n, dims);
    if (r < 0)
        return raise_status(KILN_ERR_SHAPE);
    return dims_tuple(dims, r);
}
static PyObject *context_set_tensor_address(PyObject *self, PyObject *args) {
    const char *name;
    void *p;
    if (!PyArg_ParseTuple(args, "sO&", &name, ptr_conv, &p))
        return NULL;
    CHECK(kiln_context_set_tensor_address(CTX(self), name, p));
    Py_RETURN_NONE;
}
static PyObject *context_tensor_address(PyObject *self, PyObject *arg) {
    const char *n = name_arg(arg);
    if (!n)
        return NULL;
    return PyLong_FromVoidPtr(kiln_context_tensor_address(CTX(self), n));
}
/* the hot path: one argument (the stream as an int or None) */
static PyObject *context_enqueue(PyObject *self, PyObject *arg) {
    void *stream;
    if (!ptr_conv(arg, &stream))
        return NULL;
    kiln_context *c = CTX(self);
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS st = kiln_context_enqueue(c, stream);
    Py_END_ALLOW_THREADS if (st != KILN_OK) return raise_status(st);
    Py_RETURN_NONE;
}
static PyObject *context_synchronize(PyObject *self, PyObject *arg) {
    void *stream;
    if (!ptr_conv(arg, &stream))
        return NULL;
    kiln_context *c = CTX(self);
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS st = kiln_context_synchronize(c, stream);
    Py_END_ALLOW_THREADS CHECK(st);
    Py_RETURN_NONE;
}
/* set_sequence_input(name, [(dims, address), ...]): the elements' bytes are
 * copied by kiln during the call */
static PyObject *context_set_sequence_input(PyObject *self, PyObject *args) {
    const char *name;
    PyObject *items;
    if (!PyArg_ParseTuple(args, "sO", &name, &items))
        return NULL;
    PyObject *t = PySequence_Tuple(items);
    if (!t)
        return NULL;
    Py_ssize_t n = PyTuple_Size(t);
    if (n > INT_MAX) {
        Py_DECREF(t);
        PyErr_Format(PyExc_ValueError, "input '%s': %zd elements, too many", name, n);
        return NULL;
    }
    size_t cap = (size_t)(n ? n : 1);
    int *ranks = PyMem_Calloc(cap, sizeof *ranks);
    int64_t *dims = PyMem_Calloc(cap * KILN_MAX_DIMS, sizeof *dims);
    const int64_t **dimp = PyMem_Calloc(cap, sizeof *dimp);
    const void **data = PyMem_Calloc(cap, sizeof *data);
    PyObject *ret = NULL;
    if (!ranks || !dims || !dimp || !data) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d, *a;
        void *p;
        if (!PyArg_ParseTuple(PyTuple_GetItem(t, i), "OO;element (dims, address)", &d, &a))
            goto done;
        if (parse_dims(d, dims + i * KILN_MAX_DIMS, &ranks[i], name) < 0 || !ptr_conv(a, &p))
            goto done;
        dimp[i] = dims + i * KILN_MAX_DIMS;
        data[i] = p;
    }
    kiln_status st;
    kiln_context *c = CTX(self);
    Py_BEGIN_ALLOW_THREADS st = kiln_context_set_sequence_input(c, name, (int)n, ranks, dimp, data);
    Py_END_ALLOW_THREADS
    ret = st == KILN_OK ? Py_NewRef(Py_None) : raise_status(st);
done:
    PyMem_Free(ranks);
    PyMem_Free(dims);
    PyMem_Free(dimp);
    PyMem_Free(data);
    Py_DECREF(t);
    return ret;
}
static PyObject *context_set_optional_none(PyObject *self, PyObject *arg) {
    const char *n = name_arg(arg);
    if (!n)
        return NULL;
    CHECK(kiln_context_set_optional_none(CTX(self), n));
    Py_RETURN_NONE;
}
static PyObject *context_sequence_length(PyObject *self, PyObject *arg) {
    const char *n = name_arg(arg);
    if (!n)
        return NULL;
    int64_t len = kiln_context_sequence_length(CTX(self), n);
    if (len < 0)
        return raise_status(KILN_ERR_INVALID_ARGUMENT);
    return PyLong_FromLongLong(len);
}
static PyObject *context_optional_has_element(PyObject *self, PyObject *arg) {
    const char *n = name_arg(arg);
    if (!n)
        return NULL;
    int has = kiln_context_optional_has_element(CTX(self), n);
    if (has < 0)
        return raise_status(KILN_ERR_INVALID_ARGUMENT);
    return PyBool_FromLong(has);
}
/* sequence_element(name, i) -> (dtype, dims, address): kiln's bytes, valid
 * until the next run */
static PyObject *context_sequence_element(PyObject *self, PyObject *args) {
    const char *name;
    long long i;
    if (!PyArg_ParseTuple(args, "sL", &name, &i))
        return NULL;
    kiln_dtype dt = KILN_DTYPE_FLOAT;
    int rank = 0;
    int64_t dims[KILN_MAX_DIMS];
    const void *data = NULL;
    CHECK(kiln_context_sequence_element(CTX(self), name, (int64_t)i, &dt, &rank, dims, &data));
    return Py_BuildValue("(iNN)", (int)dt, dims_tuple(dims, rank),
                         PyLong_FromVoidPtr((void *)data));
}
static PyObject *context_set_threads(PyObject *self, PyObject *arg) {
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    kiln_context_set_threads(CTX(self), (int)v);
    Py_RETURN_NONE;
}
static PyObject *context_set_graphs(PyObject *self, PyObject *arg) {
    int v = PyObject_IsTrue(arg);
    if (v < 0)
        return NULL;
    kiln_context_set_graphs(CTX(self), v);
    Py_RETURN_NONE;
}
static PyObject *context_set_profiling(PyObject *self, PyObject *arg) {
    int v = PyObject_IsTrue(arg);
    if (v < 0)
        return NULL;
    kiln_context_set_profiling(CTX(self), v);
    Py_RETURN_NONE;
}
static PyObject *context_layer_time(PyObject *self, PyObject *arg) {
    long i = PyLong_AsLong(arg);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    double ms = 0;
    uint64_t runs = 0;
    CHECK(kiln_context_layer_time(CTX(self), (int)i, &ms, &runs));
    return Py_BuildValue("(dK)", ms, (unsigned long long)runs);
}
/* time `n` back-to-back kiln_context_enqueue calls from C, for the overhead
 * benchmark (bench/python_overhead.py): seconds per call */
static PyObject *context_bench_enqueue(PyObject *self, PyObject *args) {
    long n;
    void *stream = NULL;
    if (!PyArg_ParseTuple(args, "l|O&", &n, ptr_conv, &stream))
        return NULL;
    kiln_context *c = CTX(self);
    kiln_status st = KILN_OK;
    struct timespec a, b;
    Py_BEGIN_ALLOW_THREADS clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n && st == KILN_OK; i++)
        st = kiln_context_enqueue(c, stream);
    clock_gettime(CLOCK_MONOTONIC, &b);
    Py_END_ALLOW_THREADS CHECK(st);
    double s = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    return PyFloat_FromDouble(n > 0 ? s / (double)n : 0.0);
}

static PyObject *context_engine(PyObject *self, void *u) {
    PyObject *e = ((ContextObject *)self)->engine;
    Py_INCREF(e);
    return e;
}

static PyMethodDef context_methods[] = {
    {"set_profile", context_set_profile, METH_O, NULL},
    {"set_input_shape", context_set_input_shape, METH_VARARGS, "set_input_shape(name, dims)"},
    {"tensor_shape", context_tensor_shape, METH_O, NULL},
    {"set_tensor_address", context_set_tensor_address, METH_VARARGS, "set_tensor_address(name, address)"},
    {"tensor_address", context_tensor_address, METH_O, NULL},
    {"enqueue", context_enqueue, METH_O, "enqueue(stream or None); GIL released"},
    {"synchronize", context_synchronize, METH_O, NULL},
    {"set_sequence_input", context_set_sequence_input, METH_VARARGS,
     "set_sequence_input(name, [(dims, address), ...]); the bytes are copied"},
    {"set_optional_none", context_set_optional_none, METH_O, NULL},
    {"sequence_length", context_sequence_length, METH_O, NULL},
    {"optional_has_element", context_optional_has_element, METH_O, NULL},
    {"sequence_element", context_sequence_element, METH_VARARGS,
     "sequence_element(name, i) -> (dtype, dims, address)"},
    {"set_threads", context_set_threads, METH_O, NULL},
    {"set_graphs", context_set_graphs, METH_O, NULL},
    {"set_profiling", context_set_profiling, METH_O, NULL},
    {"layer_time", context_layer_time, METH_O, "layer_time(layer) -> (total_ms, runs)"},
    {"bench_enqueue", context_bench_enqueue, METH_VARARGS, "bench_enqueue(n, stream=None) -> s/call"},
    {NULL, NULL, 0, NULL}};
static PyGetSetDef context_getset[] = {{"engine", context_engine, NULL, NULL, NULL},
                                       {NULL, NULL, NULL, NULL, NULL}};
static PyType_Slot context_slots[] = {{Py_tp_new, context_new},
                                      {Py_tp_dealloc, context_dealloc},
                                      {Py_tp_methods, context_methods},
                                      {Py_tp_getset, context_getset},
                                      {Py_tp_doc, "A kiln_context handle; keeps its Engine alive."},
                                      {0, NULL}};
static PyType_Spec context_spec = {"kiln._kiln.Context", sizeof(ContextObject), 0,
                                   Py_TPFLAGS_DEFAULT, context_slots};

/* ------------------------------------------------------------------------
 * Events: hold their engine */

typedef struct {
    PyObject_HEAD
    kiln_event *ev;
    PyObject *engine;
} EventObject;
static PyObject *EventType;
#define EV(self) (((EventObject *)(self))->ev)

static PyObject *event_new(PyTypeObject *tp, PyObject *args, PyObject *kw) {
    PyObject *eng;
    if (!PyArg_ParseTuple(args, "O!", (PyTypeObject *)EngineType, &eng))
        return NULL;
    kiln_event *e = NULL;
    CHECK(kiln_event_create(ENG(eng), &e));
    EventObject *o = PyObject_New(EventObject, tp);
    if (!o) {
        kiln_event_destroy(e);
        return NULL;
    }
    o->ev = e;
    Py_INCREF(eng);
    o->engine = eng;
    return (PyObject *)o;
}
static void event_dealloc(PyObject *self) {
    kiln_event_destroy(EV(self));
    Py_XDECREF(((EventObject *)self)->engine);
    generic_free(self);
}
static PyObject *event_record(PyObject *self, PyObject *arg) {
    void *s;
    if (!ptr_conv(arg, &s))
        return NULL;
    CHECK(kiln_event_record(EV(self), s));
    Py_RETURN_NONE;
}
static PyObject *event_done(PyObject *self, PyObject *u) {
    int d = kiln_event_done(EV(self));
    if (d < 0)
        return raise_status(KILN_ERR_RUNTIME);
    return PyBool_FromLong(d);
}
static PyObject *event_synchronize(PyObject *self, PyObject *u) {
    kiln_event *e = EV(self);
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS st = kiln_event_synchronize(e);
    Py_END_ALLOW_THREADS CHECK(st);
    Py_RETURN_NONE;
}
static PyObject *event_elapsed_ms(PyObject *self, PyObject *arg) {
    if (!PyObject_TypeCheck(arg, (PyTypeObject *)EventType)) {
        PyErr_SetString(PyExc_TypeError, "elapsed_ms takes the end Event");
        return NULL;
    }
    double ms = 0;
    CHECK(kiln_event_elapsed_ms(EV(self), EV(arg), &ms));
    return PyFloat_FromDouble(ms);
}
static PyMethodDef event_methods[] = {
    {"record", event_record, METH_O, "record(stream or None)"},
    {"done", event_done, METH_NOARGS, NULL},
    {"synchronize", event_synchronize, METH_NOARGS, NULL},
    {"elapsed_ms", event_elapsed_ms, METH_O, "start.elapsed_ms(end) -> ms"},
    {NULL, NULL, 0, NULL}};
static PyType_Slot event_slots[] = {{Py_tp_new, event_new},
                                    {Py_tp_dealloc, event_dealloc},
                                    {Py_tp_methods, event_methods},
                                    {Py_tp_doc, "A kiln_event (kiln_runtime.h); keeps its Engine alive."},
                                    {0, NULL}};
static PyType_Spec event_spec = {"kiln._kiln.Event", sizeof(EventObject), 0, Py_TPFLAGS_DEFAULT,
                                 event_slots};

/* ------------------------------------------------------------------------
 * Plugin libraries and the registry */

typedef struct {
    PyObject_HEAD
    kiln_plugin_library *lib;
} LibraryObject;
static PyObject *LibraryType;

static void library_dealloc(PyObject *self) { generic_free(self); } /* stays loaded */

static PyObject *library_path(PyObject *self, void *u) {
    LibraryObject *o = (LibraryObject *)self;
    if (!o->lib)
        Py_RETURN_NONE;
    return str_or_none(kiln_plugin_library_path(o->lib));
}
static PyObject *library_sha256(PyObject *self, void *u) {
    LibraryObject *o = (LibraryObject *)self;
    if (!o->lib)
        Py_RETURN_NONE;
    return str_or_none(kiln_plugin_library_sha256(o->lib));
}
static PyObject *library_set_embedded(PyObject *self, PyObject *arg) {
    LibraryObject *o = (LibraryObject *)self;
    int v = PyObject_IsTrue(arg);
    if (v < 0)
        return NULL;
    if (!o->lib) {
        PyErr_SetString(PyExc_ValueError, "the library was deregistered");
        return NULL;
    }
    CHECK(kiln_plugin_library_set_embedded(o->lib, v));
    Py_RETURN_NONE;
}
static PyObject *library_deregister(PyObject *self, PyObject *u) {
    LibraryObject *o = (LibraryObject *)self;
    if (!o->lib)
        Py_RETURN_NONE;
    CHECK(kiln_plugin_deregister_library(o->lib));
    o->lib = NULL;
    Py_RETURN_NONE;
}
static PyMethodDef library_methods[] = {
    {"set_embedded", library_set_embedded, METH_O, NULL},
    {"deregister", library_deregister, METH_NOARGS, "deregister and unload (refused while in use)"},
    {NULL, NULL, 0, NULL}};
static PyGetSetDef library_getset[] = {{"path", library_path, NULL, NULL, NULL},
                                       {"sha256", library_sha256, NULL, NULL, NULL},
                                       {NULL, NULL, NULL, NULL, NULL}};
static PyType_Slot library_slots[] = {{Py_tp_dealloc, library_dealloc},
                                      {Py_tp_methods, library_methods},
                                      {Py_tp_getset, library_getset},
                                      {Py_tp_doc, "A loaded plugin library (kiln_plugin.h)."},
                                      {0, NULL}};
static PyType_Spec library_spec = {"kiln._kiln.PluginLibrary", sizeof(LibraryObject), 0,
                                   Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
                                   library_slots};

static PyObject *mod_plugin_load_library(PyObject *m, PyObject *args) {
    PyObject *path_b;
    const char *ns = NULL, *sha = NULL;
    if (!PyArg_ParseTuple(args, "O&|zz", PyUnicode_FSConverter, &path_b, &ns, &sha))
        return NULL;
    const char *path = PyBytes_AsString(path_b);
    kiln_plugin_library *lib = NULL;
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS st = sha ? kiln_plugin_load_library_sha256(path, ns, sha, &lib)
                                    : kiln_plugin_load_library(path, ns, &lib);
    Py_END_ALLOW_THREADS Py_DECREF(path_b);
    CHECK(st);
    LibraryObject *o = PyObject_New(LibraryObject, (PyTypeObject *)LibraryType);
    if (!o)
        return NULL;
    o->lib = lib;
    return (PyObject *)o;
}

static PyObject *creator_tuple(const kiln_plugin_creator *c, const char *source) {
    PyObject *fields = PyList_New(0);
    for (int i = 0; fields && i < c->n_fields; i++) {
        const kiln_field_spec *f = &c->fields[i];
        PyObject *t = Py_BuildValue("(NiLi)", str_or_none(f->name), (int)f->type,
                                    (long long)f->length, (int)f->required);
        if (!t || PyList_Append(fields, t) < 0)
            Py_CLEAR(fields);
        Py_XDECREF(t);
    }
    if (!fields)
        return NULL;
    const kiln_plugin_library *lib = kiln_plugin_creator_library(c);
    return Py_BuildValue("(NNNNNN)", str_or_none(c->name), str_or_none(c->version),
                         str_or_none(c->plugin_namespace ? c->plugin_namespace : ""),
                         str_or_none(source), fields,
                         str_or_none(lib ? kiln_plugin_library_path(lib) : NULL));
}

static PyObject *mod_plugin_list(PyObject *m, PyObject *u) {
    PyObject *l = PyList_New(0);
    int n = kiln_plugin_count();
    for (int i = 0; l && i < n; i++) {
        const char *src = NULL;
        const kiln_plugin_creator *c = kiln_plugin_at(i, &src);
        if (!c)
            break;
        PyObject *t = creator_tuple(c, src);
        if (!t || PyList_Append(l, t) < 0)
            Py_CLEAR(l);
        Py_XDECREF(t);
    }
    return l;
}

static PyObject *mod_plugin_find(PyObject *m, PyObject *args) {
    const char *name, *version = NULL, *ns = NULL;
    if (!PyArg_ParseTuple(args, "s|zz", &name, &version, &ns))
        return NULL;
    const kiln_plugin_creator *c = kiln_plugin_find(name, version, ns);
    if (!c)
        Py_RETURN_NONE;
    return creator_tuple(c, NULL);
}

static PyObject *mod_plugin_allow_embedded(PyObject *m, PyObject *arg) {
    int v = PyObject_IsTrue(arg);
    if (v < 0)
        return NULL;
    kiln_plugin_allow_embedded_libraries(v);
    Py_RETURN_NONE;
}
static PyObject *mod_plugin_allow_embedded_sha256(PyObject *m, PyObject *arg) {
    const char *s = NULL;
    if (arg != Py_None && !(s = name_arg(arg)))
        return NULL;
    CHECK(kiln_plugin_allow_embedded_sha256(s));
    Py_RETURN_NONE;
}
static PyObject *mod_plan_plugins_json(PyObject *m, PyObject *arg) {
    Py_buffer v;
    if (PyObject_GetBuffer(arg, &v, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    char *json = NULL;
    kiln_status st = kiln_plan_plugins_json(v.buf, (size_t)v.len, &json);
    PyBuffer_Release(&v);
    CHECK(st);
    PyObject *s = str_or_none(json);
    kiln_free(json);
    return s;
}
static PyObject *mod_sha256_hex(PyObject *m, PyObject *arg) {
    Py_buffer v;
    if (PyObject_GetBuffer(arg, &v, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    char out[65];
    kiln_sha256_hex(v.buf, (size_t)v.len, out);
    PyBuffer_Release(&v);
    return PyUnicode_FromString(out);
}

/* ------------------------------------------------------------------------
 * Python-defined plugins. A creator here holds a Python factory; each
 * instance holds a Python adapter object (kiln/plugin.py) whose methods the
 * C callbacks call with the GIL taken. Python exceptions become the
 * plugin's error message (host->set_error) and KILN_ERR_PLUGIN. */

typedef struct DimExprObject {
    PyObject_HEAD
    const kiln_dim_expr *e;
    const kiln_expr_builder *eb;
    unsigned long gen;
} DimExprObject;
static PyObject *DimExprType;
static unsigned long dim_gen = 1; /* changes at each output_shapes call's start and end; under the GIL */

typedef struct pycreator {
    kiln_plugin_creator c;
    char *name, *version, *ns;
    kiln_field_spec *specs;
    PyObject *factory;
    int live; /* instances alive (atomic): deregistering waits for 0 */
    struct pycreator *next;
} pycreator;
static pycreator *pycreators; /* under the GIL */

typedef struct pyplugin {
    kiln_plugin pub;
    kiln_plugin_core core;
    char *name, *version, *ns;
    PyObject *obj;
    kiln_field *fields;
    PyObject *fields_keep;
    pycreator *creator;
} pyplugin;

static const kiln_plugin_build pyplugin_build;
static const kiln_plugin_runtime pyplugin_runtime;
static int module_alive = 1;

static char *dupstr(const char *s) {
    size_t n = strlen(s ? s : "") + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s ? s : "", n);
    return d;
}

/* the current Python exception as the plugin's error; GIL held */
static kiln_status py_fail(const char *plugin, const char *what) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *s = value ? PyObject_Str(value) : NULL;
    PyObject *tn = type ? PyObject_GetAttrString(type, "__name__") : NULL;
    const char *msg = s ? PyUnicode_AsUTF8AndSize(s, NULL) : NULL;
    const char *tname = tn ? PyUnicode_AsUTF8AndSize(tn, NULL) : NULL;
    PyErr_Clear();
    char buf[1024];
    snprintf(buf, sizeof buf, "Python plugin '%s' %s: %s: %s", plugin, what,
             tname ? tname : "error", msg ? msg : "(no message)");
    kiln_plugin_get_host()->set_error(buf);
    Py_XDECREF(s);
    Py_XDECREF(tn);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return KILN_ERR_PLUGIN;
}

static PyObject *descs_list(const kiln_tensor_desc *d, int32_t n) {
    PyObject *l = PyList_New(0);
    for (int32_t i = 0; l && i < n; i++) {
        /* positions not chosen yet may hold anything: clamp the rank */
        int rank = d[i].rank < 0 ? 0 : d[i].rank > KILN_MAX_DIMS ? KILN_MAX_DIMS : d[i].rank;
        PyObject *t = Py_BuildValue("(iiN)", (int)d[i].dtype, (int)d[i].layout,
                                    dims_tuple(d[i].dims, rank));
        if (!t || PyList_Append(l, t) < 0)
            Py_CLEAR(l);
        Py_XDECREF(t);
    }
    return l;
}

static pyplugin *pyplugin_make(pycreator *cr, const char *name, const char *version,
                               const char *ns, PyObject *obj, kiln_plugin_phase phase) {
    pyplugin *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->name = dupstr(name);
    p->version = dupstr(version);
    p->ns = dupstr(ns);
    if (!p->name || !p->version || !p->ns) {
        free(p->name);
        free(p->version);
        free(p->ns);
        free(p);
        return NULL;
    }
    p->core = (kiln_plugin_core){KILN_PLUGIN_ABI_VERSION, sizeof(kiln_plugin_core), p->name,
                                 p->version, p->ns};
    p->pub.abi_version = KILN_PLUGIN_ABI_VERSION;
    p->pub.struct_size = sizeof p->pub;
    p->pub.self = p;
    p->pub.core = &p->core;
    p->pub.build = phase == KILN_PLUGIN_PHASE_BUILD ? &pyplugin_build : NULL;
    p->pub.runtime = &pyplugin_runtime;
    Py_INCREF(obj);
    p->obj = obj;
    p->creator = cr;
    __atomic_add_fetch(&cr->live, 1, __ATOMIC_SEQ_CST);
    return p;
}

static int32_t pp_num_outputs(void *self) {
    pyplugin *p = self;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *r = PyObject_CallMethod(p->obj, "num_outputs", NULL);
    long n = r ? PyLong_AsLong(r) : -1;
    Py_XDECREF(r);
    if (PyErr_Occurred()) {
        py_fail(p->name, "num_outputs");
        n = -1;
    }
    PyGILState_Release(g);
    return (int32_t)n;
}

static kiln_status pp_output_dtypes(void *self, const kiln_dtype *in, int32_t n_in, kiln_dtype *out,
                                    int32_t n_out) {
    pyplugin *p = self;
    kiln_status st = KILN_OK;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *l = PyList_New(n_in);
    for (int32_t i = 0; l && i < n_in; i++)
        PyList_SetItem(l, i, PyLong_FromLong(in[i]));
    PyObject *r = l ? PyObject_CallMethod(p->obj, "output_dtypes", "O", l) : NULL;
    Py_XDECREF(l);
    PyObject *t = r ? PySequence_Tuple(r) : NULL;
    Py_XDECREF(r);
    if (t && PyTuple_Size(t) != n_out)
        PyErr_Format(PyExc_ValueError, "output_dtypes gave %zd types for %d outputs",
                     PyTuple_Size(t), (int)n_out);
    for (int32_t i = 0; t && !PyErr_Occurred() && i < n_out; i++)
        out[i] = (kiln_dtype)PyLong_AsLong(PyTuple_GetItem(t, i));
    Py_XDECREF(t);
    if (PyErr_Occurred())
        st = py_fail(p->name, "output_dtypes");
    PyGILState_Release(g);
    return st;
}

static PyObject *dimexpr_wrap(const kiln_dim_expr *e, const kiln_expr_builder *eb) {
    DimExprObject *o = PyObject_New(DimExprObject, (PyTypeObject *)DimExprType);
    if (!o)
        return NULL;
    o->e = e;
    o->eb = eb;
    o->gen = dim_gen;
    return (PyObject *)o;
}

static kiln_status pp_output_shapes(void *self, const kiln_dims_expr *in, int32_t n_in,
                                    kiln_dims_expr *out, int32_t n_out,
                                    const kiln_expr_builder *eb) {
    pyplugin *p = self;
    kiln_status st = KILN_OK;
    PyGILState_STATE g = PyGILState_Ensure();
    dim_gen += 2; /* expressions from earlier calls go stale */
    PyObject *l = PyList_New(0);
    for (int32_t i = 0; l && i < n_in; i++) {
        PyObject *d = PyList_New(0);
        for (int32_t k = 0; d && k < in[i].rank; k++) {
            PyObject *x = dimexpr_wrap(in[i].d[k], eb);
            if (!x || PyList_Append(d, x) < 0)
                Py_CLEAR(d);
            Py_XDECREF(x);
        }
        if (!d || PyList_Append(l, d) < 0)
            Py_CLEAR(l);
        Py_XDECREF(d);
    }
    PyObject *r = l ? PyObject_CallMethod(p->obj, "output_shapes", "O", l) : NULL;
    Py_XDECREF(l);
    PyObject *t = r ? PySequence_Tuple(r) : NULL;
    Py_XDECREF(r);
    if (t && PyTuple_Size(t) != n_out)
        PyErr_Format(PyExc_ValueError, "output_shapes gave %zd shapes for %d outputs",
                     PyTuple_Size(t), (int)n_out);
    for (int32_t i = 0; t && !PyErr_Occurred() && i < n_out; i++) {
        PyObject *s = PySequence_Tuple(PyTuple_GetItem(t, i));
        if (!s)
            break;
        Py_ssize_t rank = PyTuple_Size(s);
        if (rank > KILN_MAX_DIMS) {
            PyErr_Format(PyExc_ValueError, "output %d: rank %zd", (int)i, rank);
            Py_DECREF(s);
            break;
        }
        out[i].rank = (int32_t)rank;
        for (Py_ssize_t k = 0; k < rank; k++) {
            PyObject *x = PyTuple_GetItem(s, k);
            if (PyObject_TypeCheck(x, (PyTypeObject *)DimExprType)) {
                DimExprObject *dx = (DimExprObject *)x;
                if (dx->gen != dim_gen) {
                    PyErr_SetString(PyExc_ValueError, "a DimExpr from another call");
                    break;
                }
                out[i].d[k] = dx->e;
            } else {
                long long v = PyLong_AsLongLong(x);
                if (v == -1 && PyErr_Occurred())
                    break;
                out[i].d[k] = eb->constant(eb->ctx, v);
            }
        }
        Py_DECREF(s);
    }
    Py_XDECREF(t);
    if (PyErr_Occurred())
        st = py_fail(p->name, "output_shapes");
    dim_gen += 2;
    PyGILState_Release(g);
    return st;
}

static int32_t pp_supports_format(void *self, int32_t pos, const kiln_tensor_desc *descs,
                                  int32_t n_in, int32_t n_out) {
    pyplugin *p = self;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *l = descs_list(descs, n_in + n_out);
    PyObject *r = l ? PyObject_CallMethod(p->obj, "supports_format", "iOii", (int)pos, l,
                                          (int)n_in, (int)n_out)
                    : NULL;
    Py_XDECREF(l);
    int v = r ? PyObject_IsTrue(r) : -1;
    Py_XDECREF(r);
    if (v < 0) {
        /* a failing query says "no" and logs why */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyObject *s = value ? PyObject_Str(value) : NULL;
        char buf[512];
        snprintf(buf, sizeof buf, "Python plugin '%s' supports_format raised: %s", p->name,
                 s ? PyUnicode_AsUTF8AndSize(s, NULL) : "?");
        PyErr_Clear();
        kiln_plugin_get_host()->log(KILN_LOG_WARNING, buf);
        Py_XDECREF(s);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        v = 0;
    }
    PyGILState_Release(g);
    return v;
}

/* call method(in_descs, out_descs); returns the result or NULL */
static PyObject *call_io(pyplugin *p, const char *method, const kiln_tensor_desc *in, int32_t n_in,
                         const kiln_tensor_desc *out, int32_t n_out) {
    PyObject *a = descs_list(in, n_in), *b = descs_list(out, n_out);
    PyObject *r = (a && b) ? PyObject_CallMethod(p->obj, method, "OO", a, b) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return r;
}

static kiln_status pp_configure(void *self, const kiln_tensor_desc *in, int32_t n_in,
                                const kiln_tensor_desc *out, int32_t n_out) {
    pyplugin *p = self;
    kiln_status st = KILN_OK;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *r = call_io(p, "configure", in, n_in, out, n_out);
    Py_XDECREF(r);
    if (!r)
        st = py_fail(p->name, "configure");
    PyGILState_Release(g);
    return st;
}

static size_t pp_workspace_size(void *self, const kiln_tensor_desc *in, int32_t n_in,
                                const kiln_tensor_desc *out, int32_t n_out) {
    pyplugin *p = self;
    size_t n = 0;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *r = call_io(p, "workspace_size", in, n_in, out, n_out);
    if (r)
        n = PyLong_AsSize_t(r);
    Py_XDECREF(r);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        n = 0;
    }
    PyGILState_Release(g);
    return n;
}

static kiln_status pp_on_shape_change(void *self, const kiln_tensor_desc *in, int32_t n_in,
                                      const kiln_tensor_desc *out, int32_t n_out) {
    pyplugin *p = self;
    kiln_status st = KILN_OK;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *r = call_io(p, "on_shape_change", in, n_in, out, n_out);
    Py_XDECREF(r);
    if (!r)
        st = py_fail(p->name, "on_shape_change");
    PyGILState_Release(g);
    return st;
}

static PyObject *ptr_list(const void *const *ptrs, int32_t n) {
    PyObject *l = PyList_New(n);
    for (int32_t i = 0; l && i < n; i++)
        PyList_SetItem(l, i, PyLong_FromVoidPtr((void *)ptrs[i]));
    return l;
}

static kiln_status pp_enqueue(void *self, const kiln_tensor_desc *in, const void *const *inputs,
                              int32_t n_in, const kiln_tensor_desc *out, void *const *outputs,
                              int32_t n_out, void *workspace, void *stream) {
    pyplugin *p = self;
    kiln_status st = KILN_OK;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *a = descs_list(in, n_in), *b = descs_list(out, n_out);
    PyObject *ia = ptr_list(inputs, n_in), *oa = ptr_list((const void *const *)outputs, n_out);
    PyObject *r = NULL;
    if (a && b && ia && oa)
        r = PyObject_CallMethod(p->obj, "enqueue", "OOOONN", a, ia, b, oa,
                                PyLong_FromVoidPtr(workspace), PyLong_FromVoidPtr(stream));
    Py_XDECREF(a);
    Py_XDECREF(b);
    Py_XDECREF(ia);
    Py_XDECREF(oa);
    Py_XDECREF(r);
    if (!r)
        st = py_fail(p->name, "enqueue");
    PyGILState_Release(g);
    return st;
}

/* get_fields: the adapter returns [(name, field_type, length, bytes)] */
static kiln_status pp_get_fields(void *self, kiln_field_collection *outc) {
    pyplugin *p = self;
    kiln_status st = KILN_OK;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *r = PyObject_CallMethod(p->obj, "get_fields", NULL);
    PyObject *t = r ? PySequence_Tuple(r) : NULL;
    Py_XDECREF(r);
    if (t) {
        Py_ssize_t n = PyTuple_Size(t);
        kiln_field *f = calloc((size_t)(n ? n : 1), sizeof *f);
        if (!f) {
            PyErr_NoMemory();
        } else {
            for (Py_ssize_t i = 0; i < n; i++) {
                const char *name;
                int type;
                long long len;
                const char *data;
                Py_ssize_t dlen;
                if (!PyArg_ParseTuple(PyTuple_GetItem(t, i), "siLy#", &name, &type, &len, &data,
                                      &dlen))
                    break;
                f[i] = (kiln_field){name, (kiln_field_type)type, len, data};
            }
            if (PyErr_Occurred()) {
                free(f);
            } else {
                free(p->fields);
                Py_XDECREF(p->fields_keep);
                p->fields = f;
                p->fields_keep = t; /* the strings and bytes live in it */
                t = NULL;
                outc->count = (int32_t)n;
                outc->fields = f;
            }
        }
    }
    Py_XDECREF(t);
    if (PyErr_Occurred())
        st = py_fail(p->name, "get_fields");
    PyGILState_Release(g);
    return st;
}

static kiln_status pp_clone(void *self, kiln_plugin **outp) {
    pyplugin *p = self;
    kiln_status st = KILN_OK;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *r = PyObject_CallMethod(p->obj, "clone", NULL);
    if (!r) {
        st = py_fail(p->name, "clone");
    } else {
        pyplugin *q = pyplugin_make(p->creator, p->name, p->version, p->ns, r,
                                    p->pub.build ? KILN_PLUGIN_PHASE_BUILD
                                                 : KILN_PLUGIN_PHASE_RUNTIME);
        Py_DECREF(r);
        if (!q) {
            kiln_plugin_get_host()->set_error("Python plugin clone: out of memory");
            st = KILN_ERR_OUT_OF_MEMORY;
        } else {
            *outp = &q->pub;
        }
    }
    PyGILState_Release(g);
    return st;
}

static void pp_destroy(void *self) {
    pyplugin *p = self;
    if (module_alive && Py_IsInitialized()) {
        PyGILState_STATE g = PyGILState_Ensure();
        Py_XDECREF(p->obj);
        Py_XDECREF(p->fields_keep);
        PyGILState_Release(g);
    } /* else the interpreter is gone: the objects went with it */
    __atomic_sub_fetch(&p->creator->live, 1, __ATOMIC_SEQ_CST);
    free(p->fields);
    free(p->name);
    free(p->version);
    free(p->ns);
    free(p);
}

static const kiln_plugin_build pyplugin_build = {
    KILN_PLUGIN_ABI_VERSION, sizeof(kiln_plugin_build), pp_num_outputs,    pp_output_dtypes,
    pp_output_shapes,        pp_supports_format,        pp_configure,      pp_workspace_size};
static const kiln_plugin_runtime pyplugin_runtime = {
    KILN_PLUGIN_ABI_VERSION, sizeof(kiln_plugin_runtime), pp_on_shape_change, pp_enqueue,
    pp_get_fields,           pp_clone,                    pp_destroy};

static PyObject *fields_to_list(const kiln_field_collection *fc) {
    PyObject *l = PyList_New(0);
    for (int32_t i = 0; l && fc && i < fc->count; i++) {
        const kiln_field *f = &fc->fields[i];
        Py_ssize_t es = 1;
        switch (f->type) {
        case KILN_FIELD_INT16: case KILN_FIELD_FLOAT16: case KILN_FIELD_BFLOAT16: es = 2; break;
        case KILN_FIELD_INT32: case KILN_FIELD_FLOAT32: es = 4; break;
        case KILN_FIELD_INT64: case KILN_FIELD_FLOAT64: es = 8; break;
        default: es = 1;
        }
        PyObject *t = Py_BuildValue("(NiLN)", str_or_none(f->name), (int)f->type,
                                    (long long)f->length,
                                    PyBytes_FromStringAndSize(f->data, (Py_ssize_t)f->length * es));
        if (!t || PyList_Append(l, t) < 0)
            Py_CLEAR(l);
        Py_XDECREF(t);
    }
    return l;
}

static kiln_status pc_create(void *self, const char *layer, const kiln_field_collection *fields,
                             kiln_plugin_phase phase, kiln_plugin **out) {
    pycreator *c = self;
    kiln_status st = KILN_OK;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *fl = fields_to_list(fields);
    PyObject *r = fl ? PyObject_CallFunction(c->factory, "sOi", layer ? layer : "", fl, (int)phase)
                     : NULL;
    Py_XDECREF(fl);
    if (!r) {
        st = py_fail(c->name, "create");
    } else {
        pyplugin *p = pyplugin_make(c, c->name, c->version, c->ns, r, phase);
        Py_DECREF(r);
        if (!p) {
            kiln_plugin_get_host()->set_error("Python plugin create: out of memory");
            st = KILN_ERR_OUT_OF_MEMORY;
        } else {
            *out = &p->pub;
        }
    }
    PyGILState_Release(g);
    return st;
}

static void pycreator_free(pycreator *c) {
    for (int i = 0; c->specs && i < c->c.n_fields; i++)
        free((char *)c->specs[i].name);
    free(c->specs);
    free(c->name);
    free(c->version);
    free(c->ns);
    Py_XDECREF(c->factory);
    free(c);
}

static PyObject *mod_register_python_plugin(PyObject *m, PyObject *args) {
    const char *name, *version, *ns;
    PyObject *specs_o, *factory;
    if (!PyArg_ParseTuple(args, "sssOO", &name, &version, &ns, &specs_o, &factory))
        return NULL;
    if (!PyCallable_Check(factory)) {
        PyErr_SetString(PyExc_TypeError, "the factory must be callable");
        return NULL;
    }
    PyObject *specs = PySequence_Tuple(specs_o);
    if (!specs)
        return NULL;
    Py_ssize_t n = PyTuple_Size(specs);
    pycreator *c = calloc(1, sizeof *c);
    if (!c) {
        Py_DECREF(specs);
        return PyErr_NoMemory();
    }
    c->name = dupstr(name);
    c->version = dupstr(version);
    c->ns = dupstr(ns);
    c->specs = calloc((size_t)(n ? n : 1), sizeof *c->specs);
    c->c.n_fields = 0;
    if (!c->name || !c->version || !c->ns || !c->specs) {
        Py_DECREF(specs);
        pycreator_free(c);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *fname;
        int type, req;
        long long len;
        if (!PyArg_ParseTuple(PyTuple_GetItem(specs, i), "siLp", &fname, &type, &len, &req)) {
            Py_DECREF(specs);
            pycreator_free(c);
            return NULL;
        }
        c->specs[i] = (kiln_field_spec){dupstr(fname), (kiln_field_type)type, len, req};
        c->c.n_fields = (int32_t)(i + 1);
    }
    Py_DECREF(specs);
    c->c.abi_version = KILN_PLUGIN_ABI_VERSION;
    c->c.struct_size = sizeof c->c;
    c->c.name = c->name;
    c->c.version = c->version;
    c->c.plugin_namespace = c->ns;
    c->c.fields = c->specs;
    c->c.self = c;
    c->c.create = pc_create;
    Py_INCREF(factory);
    c->factory = factory;
    kiln_status st = kiln_plugin_register(&c->c, "python");
    if (st != KILN_OK) {
        pycreator_free(c);
        return raise_status(st);
    }
    c->next = pycreators;
    pycreators = c;
    Py_RETURN_NONE;
}

static PyObject *mod_plugin_deregister(PyObject *m, PyObject *args) {
    const char *name, *version, *ns;
    if (!PyArg_ParseTuple(args, "sss", &name, &version, &ns))
        return NULL;
    pycreator **at = NULL;
    for (pycreator **pp = &pycreators; *pp; pp = &(*pp)->next) {
        pycreator *c = *pp;
        if (!strcmp(c->name, name) && !strcmp(c->version, version) && !strcmp(c->ns, ns)) {
            at = pp;
            break;
        }
    }
    /* kiln counts the uses of library creators only; engines need the
     * creator of a Python plugin for every new context, so it stays while
     * any instance lives */
    int live = at ? __atomic_load_n(&(*at)->live, __ATOMIC_SEQ_CST) : 0;
    if (live > 0) {
        PyErr_Format(err_by_status[KILN_ERR_PLUGIN],
                     "plugin '%s' (version '%s', namespace '%s') is in use by %d instance(s) "
                     "(engines or builds); drop them first", name, version, ns, live);
        return NULL;
    }
    CHECK(kiln_plugin_deregister(name, version, ns));
    if (at) {
        pycreator *c = *at;
        *at = c->next;
        pycreator_free(c);
    }
    Py_RETURN_NONE;
}

/* DimExpr: +, -, *, //, ceil_div, min, max over kiln's expression builder */
static int dim_check(DimExprObject *o) {
    /* valid only inside the output_shapes call that made it */
    if (o->gen != dim_gen) {
        PyErr_SetString(PyExc_ValueError,
                        "DimExpr used outside the output_shapes call that made it");
        return -1;
    }
    return 0;
}

static const kiln_dim_expr *dim_operand(PyObject *x, const kiln_expr_builder *eb) {
    if (PyObject_TypeCheck(x, (PyTypeObject *)DimExprType)) {
        if (dim_check((DimExprObject *)x) < 0)
            return NULL;
        return ((DimExprObject *)x)->e;
    }
    if (PyLong_Check(x)) {
        long long v = PyLong_AsLongLong(x);
        if (v == -1 && PyErr_Occurred())
            return NULL;
        return eb->constant(eb->ctx, v);
    }
    return NULL;
}

static PyObject *dim_binop(PyObject *a, PyObject *b, kiln_dim_op op) {
    const kiln_expr_builder *eb = NULL;
    if (PyObject_TypeCheck(a, (PyTypeObject *)DimExprType))
        eb = ((DimExprObject *)a)->eb;
    else if (PyObject_TypeCheck(b, (PyTypeObject *)DimExprType))
        eb = ((DimExprObject *)b)->eb;
    if (!eb || !(PyLong_Check(a) || PyObject_TypeCheck(a, (PyTypeObject *)DimExprType)) ||
        !(PyLong_Check(b) || PyObject_TypeCheck(b, (PyTypeObject *)DimExprType)))
        Py_RETURN_NOTIMPLEMENTED;
    const kiln_dim_expr *x = dim_operand(a, eb);
    if (!x)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_NotImplemented);
    const kiln_dim_expr *y = dim_operand(b, eb);
    if (!y)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_NotImplemented);
    const kiln_dim_expr *r = eb->operation(eb->ctx, op, x, y);
    if (!r) {
        PyErr_SetString(PyExc_ValueError, "kiln could not make the dimension expression");
        return NULL;
    }
    return dimexpr_wrap(r, eb);
}
static PyObject *dim_add(PyObject *a, PyObject *b) { return dim_binop(a, b, KILN_DIM_SUM); }
static PyObject *dim_sub(PyObject *a, PyObject *b) { return dim_binop(a, b, KILN_DIM_SUB); }
static PyObject *dim_mul(PyObject *a, PyObject *b) { return dim_binop(a, b, KILN_DIM_PROD); }
static PyObject *dim_floordiv(PyObject *a, PyObject *b) { return dim_binop(a, b, KILN_DIM_FLOOR_DIV); }
static PyObject *dim_ceil_div(PyObject *a, PyObject *b) { return dim_binop(a, b, KILN_DIM_CEIL_DIV); }
static PyObject *dim_min(PyObject *a, PyObject *b) { return dim_binop(a, b, KILN_DIM_MIN); }
static PyObject *dim_max(PyObject *a, PyObject *b) { return dim_binop(a, b, KILN_DIM_MAX); }
static PyObject *dim_is_constant(PyObject *self, PyObject *u) {
    DimExprObject *o = (DimExprObject *)self;
    if (dim_check(o) < 0)
        return NULL;
    return PyBool_FromLong(o->eb->is_constant(o->eb->ctx, o->e));
}
static PyObject *dim_int(PyObject *self) {
    DimExprObject *o = (DimExprObject *)self;
    if (dim_check(o) < 0)
        return NULL;
    if (!o->eb->is_constant(o->eb->ctx, o->e)) {
        PyErr_SetString(PyExc_ValueError, "the dimension is not known at build time");
        return NULL;
    }
    return PyLong_FromLongLong(o->eb->constant_value(o->eb->ctx, o->e));
}
static PyObject *dim_constant_value(PyObject *self, PyObject *u) { return dim_int(self); }
static PyMethodDef dim_methods[] = {
    {"ceil_div", dim_ceil_div, METH_O, "ceil(self / other)"},
    {"min", dim_min, METH_O, NULL},
    {"max", dim_max, METH_O, NULL},
    {"is_constant", dim_is_constant, METH_NOARGS, NULL},
    {"constant_value", dim_constant_value, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};
static void dim_dealloc(PyObject *self) { generic_free(self); }
static PyType_Slot dim_slots[] = {
    {Py_tp_dealloc, dim_dealloc}, {Py_tp_methods, dim_methods},
    {Py_nb_add, dim_add},         {Py_nb_subtract, dim_sub},
    {Py_nb_multiply, dim_mul},    {Py_nb_floor_divide, dim_floordiv},
    {Py_nb_int, dim_int},
    {Py_tp_doc, "A symbolic dimension inside a plugin's output_shapes call (kiln_dim_expr)."},
    {0, NULL}};
static PyType_Spec dim_spec = {"kiln._kiln.DimExpr", sizeof(DimExprObject), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, dim_slots};

/* ------------------------------------------------------------------------
 * Logging: kiln's logger may be called from any thread, holding kiln's log
 * lock; taking the GIL there could deadlock against a thread that holds the
 * GIL and waits for that lock. So messages go into a queue under a lock of
 * our own that never waits on Python, and kiln/__init__.py hands them to the
 * Python logger after each call (drain_log). */

#define LOG_CAP 4096
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int sev;
    char *msg;
} log_q[LOG_CAP];
static int log_head, log_n;
static unsigned long log_dropped;

static void log_cb(void *user, kiln_severity sev, const char *message) {
    char *m = dupstr(message);
    pthread_mutex_lock(&log_mu);
    if (log_n == LOG_CAP) {
        free(log_q[log_head].msg);
        log_head = (log_head + 1) % LOG_CAP;
        log_n--;
        log_dropped++;
    }
    int at = (log_head + log_n) % LOG_CAP;
    log_q[at].sev = (int)sev;
    log_q[at].msg = m;
    log_n++;
    pthread_mutex_unlock(&log_mu);
}

static PyObject *mod_set_log_queue(PyObject *m, PyObject *arg) {
    if (arg == Py_None) {
        kiln_set_logger(NULL, NULL, KILN_LOG_WARNING);
        Py_RETURN_NONE;
    }
    long sev = PyLong_AsLong(arg);
    if (sev == -1 && PyErr_Occurred())
        return NULL;
    kiln_set_logger(log_cb, NULL, (kiln_severity)sev);
    Py_RETURN_NONE;
}

static PyObject *mod_drain_log(PyObject *m, PyObject *u) {
    PyObject *l = PyList_New(0);
    if (!l)
        return NULL;
    for (;;) {
        pthread_mutex_lock(&log_mu);
        if (!log_n) {
            pthread_mutex_unlock(&log_mu);
            break;
        }
        int sev = log_q[log_head].sev;
        char *msg = log_q[log_head].msg;
        log_q[log_head].msg = NULL;
        log_head = (log_head + 1) % LOG_CAP;
        log_n--;
        pthread_mutex_unlock(&log_mu);
        PyObject *t = Py_BuildValue("(iN)", sev, str_or_none(msg ? msg : "(out of memory)"));
        free(msg);
        if (!t || PyList_Append(l, t) < 0) {
            Py_XDECREF(t);
            Py_DECREF(l);
            return NULL;
        }
        Py_DECREF(t);
    }
    return l;
}

/* ------------------------------------------------------------------------
 * Small module functions */

static PyObject *mod_version(PyObject *m, PyObject *u) { return str_or_none(kiln_version_string()); }
static PyObject *mod_status_name(PyObject *m, PyObject *arg) {
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    return str_or_none(kiln_status_name((kiln_status)v));
}
static PyObject *mod_last_error(PyObject *m, PyObject *u) { return str_or_none(kiln_last_error()); }
static PyObject *mod_dtype_size(PyObject *m, PyObject *arg) {
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    return PyLong_FromSize_t(kiln_dtype_size((kiln_dtype)v));
}
static PyObject *mod_dtype_name(PyObject *m, PyObject *arg) {
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    return str_or_none(kiln_dtype_name((kiln_dtype)v));
}
static PyObject *mod_half_to_float(PyObject *m, PyObject *arg) {
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    return PyFloat_FromDouble(kiln_half_to_float((uint16_t)v));
}
static PyObject *mod_float_to_half(PyObject *m, PyObject *arg) {
    double v = PyFloat_AsDouble(arg);
    if (v == -1.0 && PyErr_Occurred())
        return NULL;
    return PyLong_FromLong(kiln_float_to_half((float)v));
}
static PyObject *mod_bfloat16_to_float(PyObject *m, PyObject *arg) {
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    return PyFloat_FromDouble(kiln_bfloat16_to_float((uint16_t)v));
}
static PyObject *mod_float_to_bfloat16(PyObject *m, PyObject *arg) {
    double v = PyFloat_AsDouble(arg);
    if (v == -1.0 && PyErr_Occurred())
        return NULL;
    return PyLong_FromLong(kiln_float_to_bfloat16((float)v));
}
static PyObject *mod_plan_read_info(PyObject *m, PyObject *arg) {
    Py_buffer v;
    if (PyObject_GetBuffer(arg, &v, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    kiln_plan_info info;
    kiln_status st = kiln_plan_read_info(v.buf, (size_t)v.len, &info);
    PyBuffer_Release(&v);
    CHECK(st);
    return Py_BuildValue("{s:I,s:I,s:s,s:s,s:s,s:K}", "format_version", info.format_version,
                         "kiln_version", info.kiln_version, "backend", info.backend, "target",
                         info.target, "libraries", info.libraries, "file_size",
                         (unsigned long long)info.file_size);
}
static PyObject *mod_backend_describe(PyObject *m, PyObject *arg) {
    const char *b = name_arg(arg);
    if (!b)
        return NULL;
    char target[128], libs[512];
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS st = kiln_backend_describe(b, target, sizeof target, libs, sizeof libs);
    Py_END_ALLOW_THREADS CHECK(st);
    return Py_BuildValue("(ss)", target, libs);
}
/* (address, bytes, readonly) of an object's contiguous buffer; the caller
 * keeps the object alive while the address is in use */
static PyObject *mod_buffer_address(PyObject *m, PyObject *args) {
    PyObject *o;
    int writable = 0;
    if (!PyArg_ParseTuple(args, "O|p", &o, &writable))
        return NULL;
    Py_buffer v;
    if (PyObject_GetBuffer(o, &v, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return NULL;
    PyObject *r = Py_BuildValue("(NnO)", PyLong_FromVoidPtr(v.buf), v.len,
                                v.readonly ? Py_True : Py_False);
    PyBuffer_Release(&v);
    return r;
}
/* a memoryview over raw host memory, for CPU plugin buffers */
static PyObject *mod_memory_at(PyObject *m, PyObject *args) {
    void *p;
    Py_ssize_t n;
    int writable = 0;
    if (!PyArg_ParseTuple(args, "O&n|p", ptr_conv, &p, &n, &writable))
        return NULL;
    if (!p && n) {
        PyErr_SetString(PyExc_ValueError, "memory_at: a NULL address");
        return NULL;
    }
    static char empty[1];
    return PyMemoryView_FromMemory(p ? p : empty, n, writable ? PyBUF_WRITE : PyBUF_READ);
}

/* DLPack: a capsule named "dltensor" holding a DLManagedTensor. The layout
 * is DLPack's stable ABI (v0.x); only what kiln needs is read. */
typedef struct {
    int32_t device_type, device_id;
} kp_dldevice;
typedef struct {
    uint8_t code, bits;
    uint16_t lanes;
} kp_dldtype;
typedef struct {
    void *data;
    kp_dldevice device;
    int32_t ndim;
    kp_dldtype dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} kp_dltensor;
typedef struct kp_dlmanaged {
    kp_dltensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct kp_dlmanaged *self);
} kp_dlmanaged;

static void dlpack_capsule_destructor(PyObject *cap) {
    /* a capsule still named "dltensor" was never consumed: free it */
    if (PyCapsule_IsValid(cap, "dltensor")) {
        kp_dlmanaged *t = PyCapsule_GetPointer(cap, "dltensor");
        if (t && t->deleter)
            t->deleter(t);
    }
}

/* dlpack_info(capsule) -> (address, device_type, device_id, shape, strides or
 * None, (code, bits, lanes)). The capsule stays unconsumed, owned by the
 * caller, which keeps it (and so the tensor) alive while it uses the address. */
static PyObject *mod_dlpack_info(PyObject *m, PyObject *cap) {
    if (!PyCapsule_IsValid(cap, "dltensor")) {
        PyErr_SetString(PyExc_TypeError, "not an unconsumed DLPack capsule ('dltensor')");
        return NULL;
    }
    kp_dlmanaged *t = PyCapsule_GetPointer(cap, "dltensor");
    if (!t)
        return NULL;
    if (!PyCapsule_GetDestructor(cap))
        PyCapsule_SetDestructor(cap, dlpack_capsule_destructor);
    const kp_dltensor *d = &t->dl_tensor;
    if (d->ndim < 0 || d->ndim > KILN_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "DLPack tensor of rank %d", (int)d->ndim);
        return NULL;
    }
    PyObject *strides = d->strides ? dims_tuple(d->strides, d->ndim) : Py_NewRef(Py_None);
    return Py_BuildValue("(NiiNN(iii))", PyLong_FromVoidPtr((char *)d->data + d->byte_offset),
                         (int)d->device.device_type, (int)d->device.device_id,
                         dims_tuple(d->shape, d->ndim), strides, (int)d->dtype.code,
                         (int)d->dtype.bits, (int)d->dtype.lanes);
}

static PyObject *mod_shutdown(PyObject *m, PyObject *u) {
    module_alive = 0;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------
 * Tensor files and the output comparison (kiln_tools.h): the same code as
 * `kiln compare` / `kiln exec --loadInputs`. Tensors cross as (name, dtype,
 * dims, bytearray); kiln/accuracy.py makes numpy arrays of them. */

static PyObject *tensor_tuple(const kiln_host_tensor *t) {
    PyObject *data = PyByteArray_FromStringAndSize((const char *)t->data, (Py_ssize_t)t->bytes);
    if (!data)
        return NULL;
    PyObject *dims = dims_tuple(t->dims, t->rank);
    if (!dims) {
        Py_DECREF(data);
        return NULL;
    }
    return Py_BuildValue("(siNN)", t->name ? t->name : "", (int)t->dtype, dims, data);
}

static PyObject *list_of(kiln_tensor_list *l) {
    PyObject *r = PyList_New(0);
    for (int i = 0; r && i < l->n; i++) {
        PyObject *t = tensor_tuple(&l->items[i]);
        if (!t || PyList_Append(r, t) < 0) {
            Py_XDECREF(t);
            Py_CLEAR(r);
            break;
        }
        Py_DECREF(t);
    }
    kiln_tensor_list_free(l);
    return r;
}

/* (name, dtype, dims, buffer) -> a borrowed host tensor over the buffer */
static int parse_tensor(PyObject *item, kiln_host_tensor *t, Py_buffer *view) {
    PyObject *dims_o, *data_o;
    const char *name;
    int dtype;
    if (!PyArg_ParseTuple(item, "siOO", &name, &dtype, &dims_o, &data_o))
        return -1;
    memset(t, 0, sizeof *t);
    if (parse_dims(dims_o, t->dims, &t->rank, name) < 0)
        return -1;
    if (PyObject_GetBuffer(data_o, view, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    t->name = (char *)name;
    t->dtype = (kiln_dtype)dtype;
    t->data = view->buf;
    t->bytes = (size_t)view->len;
    return 0;
}

static PyObject *mod_tensors_load_file(PyObject *m, PyObject *arg) {
    PyObject *b;
    if (!PyUnicode_FSConverter(arg, &b))
        return NULL;
    kiln_tensor_list l = {0};
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS st = kiln_tensors_load_file(PyBytes_AsString(b), &l);
    Py_END_ALLOW_THREADS Py_DECREF(b);
    if (st != KILN_OK)
        return raise_status(st);
    return list_of(&l);
}

static PyObject *mod_tensors_decode(PyObject *m, PyObject *args) {
    Py_buffer v;
    const char *file = NULL;
    int npz = 0;
    if (!PyArg_ParseTuple(args, "y*p|z", &v, &npz, &file))
        return NULL;
    kiln_tensor_list l = {0};
    kiln_host_tensor t;
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS
    if (npz)
        st = kiln_npz_decode(v.buf, (size_t)v.len, file, &l);
    else
        st = kiln_npy_decode(v.buf, (size_t)v.len, file, &t);
    Py_END_ALLOW_THREADS PyBuffer_Release(&v);
    if (st != KILN_OK)
        return raise_status(st);
    if (!npz) {
        PyObject *r = tensor_tuple(&t);
        kiln_host_tensor_free(&t);
        return r;
    }
    return list_of(&l);
}

/* tensors_save(path, [(name, dtype, dims, buffer)], npz) ; encode when path is None */
static PyObject *mod_tensors_save(PyObject *m, PyObject *args) {
    PyObject *path_o, *items;
    int npz = 1;
    if (!PyArg_ParseTuple(args, "OO|p", &path_o, &items, &npz))
        return NULL;
    PyObject *f = PySequence_Fast(items, "tensors must be a sequence of (name, dtype, dims, buffer)");
    if (!f)
        return NULL;
    Py_ssize_t n = PySequence_Size(f);
    if (!npz && n != 1) {
        Py_DECREF(f);
        PyErr_SetString(PyExc_ValueError, "a .npy file holds exactly one tensor");
        return NULL;
    }
    kiln_host_tensor *ts = calloc((size_t)(n ? n : 1), sizeof *ts);
    Py_buffer *views = calloc((size_t)(n ? n : 1), sizeof *views);
    PyObject *b = NULL, *result = NULL;
    Py_ssize_t got = 0;
    if (!ts || !views) {
        PyErr_NoMemory();
        goto out;
    }
    for (; got < n; got++) {
        PyObject *it = PySequence_GetItem(f, got);
        int r = it ? parse_tensor(it, &ts[got], &views[got]) : -1;
        Py_XDECREF(it);
        if (r < 0)
            goto out;
    }
    if (path_o != Py_None && !PyUnicode_FSConverter(path_o, &b))
        goto out;
    kiln_tensor_list l = {(int)n, (int)n, ts};
    void *buf = NULL;
    size_t size = 0;
    kiln_status st;
    const char *path = b ? PyBytes_AsString(b) : NULL;
    Py_BEGIN_ALLOW_THREADS
    if (path)
        st = npz ? kiln_npz_save_file(path, &l) : kiln_npy_save_file(path, &ts[0]);
    else
        st = npz ? kiln_npz_encode(&l, &buf, &size) : kiln_npy_encode(&ts[0], &buf, &size);
    Py_END_ALLOW_THREADS
    if (st != KILN_OK) {
        raise_status(st);
        goto out;
    }
    if (path) {
        result = Py_None;
        Py_INCREF(result);
    } else {
        result = PyBytes_FromStringAndSize(buf, (Py_ssize_t)size);
        kiln_free(buf);
    }
out:
    for (Py_ssize_t i = 0; i < got; i++)
        PyBuffer_Release(&views[i]);
    free(ts);
    free(views);
    Py_XDECREF(b);
    Py_DECREF(f);
    return result;
}

/* compare_tensors((name, dtype, dims, buf), (name, dtype, dims, buf), atol, rtol, stat, q) -> dict */
static PyObject *mod_compare_tensors(PyObject *m, PyObject *args) {
    PyObject *go, *ro;
    kiln_compare_options o = {1e-5, 1e-5, KILN_COMPARE_ELEMWISE, 0.99};
    int stat = 0;
    if (!PyArg_ParseTuple(args, "OO|ddid", &go, &ro, &o.atol, &o.rtol, &stat, &o.quantile))
        return NULL;
    o.stat = (kiln_compare_stat)stat;
    kiln_host_tensor g, r;
    Py_buffer gv, rv;
    if (parse_tensor(go, &g, &gv) < 0)
        return NULL;
    if (parse_tensor(ro, &r, &rv) < 0) {
        PyBuffer_Release(&gv);
        return NULL;
    }
    kiln_compare_result res;
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS st = kiln_compare_tensors(&g, &r, &o, &res);
    Py_END_ALLOW_THREADS PyBuffer_Release(&gv);
    PyBuffer_Release(&rv);
    if (st != KILN_OK)
        return raise_status(st);
    return Py_BuildValue(
        "{s:O,s:O,s:n,s:n,s:n,s:d,s:d,s:d,s:d,s:d,s:d,s:d,s:d,s:d,s:d,s:n,s:n,s:n,s:n,s:n,s:n,"
        "s:d,s:d,s:d,s:d,s:d,s:d}",
        "passed", res.passed ? Py_True : Py_False, "same_shape", res.same_shape ? Py_True : Py_False,
        "count", (Py_ssize_t)res.count, "mismatches", (Py_ssize_t)res.mismatches, "worst_index",
        (Py_ssize_t)res.worst_index, "worst_got", res.worst_got, "worst_ref", res.worst_ref,
        "max_abs", res.max_abs, "mean_abs", res.mean_abs, "median_abs", res.median_abs,
        "quantile_abs", res.quantile_abs, "max_rel", res.max_rel, "mean_rel", res.mean_rel,
        "median_rel", res.median_rel, "quantile_rel", res.quantile_rel, "nan_got",
        (Py_ssize_t)res.nan_got, "nan_ref", (Py_ssize_t)res.nan_ref, "inf_got",
        (Py_ssize_t)res.inf_got, "inf_ref", (Py_ssize_t)res.inf_ref, "finite_got",
        (Py_ssize_t)res.finite_got, "finite_ref", (Py_ssize_t)res.finite_ref, "mean_got",
        res.mean_got, "min_got", res.min_got, "max_got", res.max_got, "mean_ref", res.mean_ref,
        "min_ref", res.min_ref, "max_ref", res.max_ref);
}

static PyMethodDef module_methods[] = {
    {"tensors_load_file", mod_tensors_load_file, METH_O,
     "tensors_load_file(path) -> [(name, dtype, dims, bytearray)] (.npz, or one .npy)"},
    {"tensors_decode", mod_tensors_decode, METH_VARARGS,
     "tensors_decode(bytes, npz, file=None) -> [(name, dtype, dims, bytearray)] or one tuple"},
    {"tensors_save", mod_tensors_save, METH_VARARGS,
     "tensors_save(path or None, [(name, dtype, dims, buffer)], npz=True) -> None or bytes"},
    {"compare_tensors", mod_compare_tensors, METH_VARARGS,
     "compare_tensors(got, ref, atol, rtol, stat, quantile) -> dict (kiln_compare_tensors)"},
    {"version", mod_version, METH_NOARGS, "kiln_version_string()"},
    {"status_name", mod_status_name, METH_O, NULL},
    {"last_error", mod_last_error, METH_NOARGS, NULL},
    {"dtype_size", mod_dtype_size, METH_O, NULL},
    {"dtype_name", mod_dtype_name, METH_O, NULL},
    {"half_to_float", mod_half_to_float, METH_O, NULL},
    {"float_to_half", mod_float_to_half, METH_O, NULL},
    {"bfloat16_to_float", mod_bfloat16_to_float, METH_O, NULL},
    {"float_to_bfloat16", mod_float_to_bfloat16, METH_O, NULL},
    {"set_log_queue", mod_set_log_queue, METH_O, "queue kiln's log up to a severity (None: stderr)"},
    {"drain_log", mod_drain_log, METH_NOARGS, "[(severity, message)] queued since the last drain"},
    {"onnx_parse_file", mod_onnx_parse_file, METH_VARARGS, "onnx_parse_file(path, flags=0) -> Network"},
    {"onnx_parse_memory", mod_onnx_parse_memory, METH_VARARGS,
     "onnx_parse_memory(buffer, base_dir=None, flags=0) -> Network"},
    {"build_serialized", mod_build_serialized, METH_VARARGS, "build_serialized(network, config) -> bytes"},
    {"engine_load", mod_engine_load, METH_O, "engine_load(buffer) -> Engine"},
    {"engine_load_file", mod_engine_load_file, METH_O, "engine_load_file(path) -> Engine"},
    {"plan_read_info", mod_plan_read_info, METH_O, NULL},
    {"backend_describe", mod_backend_describe, METH_O, "backend_describe(name) -> (target, libraries)"},
    {"plugin_load_library", mod_plugin_load_library, METH_VARARGS,
     "plugin_load_library(path, namespace=None, sha256=None) -> PluginLibrary"},
    {"plugin_list", mod_plugin_list, METH_NOARGS,
     "[(name, version, namespace, source, fields, library_path)]"},
    {"plugin_find", mod_plugin_find, METH_VARARGS, NULL},
    {"plugin_deregister", mod_plugin_deregister, METH_VARARGS, NULL},
    {"plugin_allow_embedded_libraries", mod_plugin_allow_embedded, METH_O, NULL},
    {"plugin_allow_embedded_sha256", mod_plugin_allow_embedded_sha256, METH_O, NULL},
    {"plan_plugins_json", mod_plan_plugins_json, METH_O, NULL},
    {"sha256_hex", mod_sha256_hex, METH_O, NULL},
    {"register_python_plugin", mod_register_python_plugin, METH_VARARGS,
     "register_python_plugin(name, version, namespace, field_specs, factory)"},
    {"buffer_address", mod_buffer_address, METH_VARARGS, "buffer_address(obj, writable=False)"},
    {"memory_at", mod_memory_at, METH_VARARGS, "memory_at(address, bytes, writable=False)"},
    {"dlpack_info", mod_dlpack_info, METH_O, NULL},
    {"_shutdown", mod_shutdown, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "kiln._kiln",
                                        "kiln's C API (the low layer of the kiln package).", -1,
                                        module_methods, NULL, NULL, NULL, NULL};

static int add_type(PyObject *m, PyType_Spec *spec, PyObject **out, const char *name) {
    *out = PyType_FromSpec(spec);
    if (!*out)
        return -1;
    Py_INCREF(*out);
    return PyModule_AddObject(m, name, *out);
}

PyMODINIT_FUNC PyInit__kiln(void) {
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    if (add_type(m, &network_spec, &NetworkType, "Network") < 0 ||
        add_type(m, &config_spec, &ConfigType, "BuilderConfig") < 0 ||
        add_type(m, &engine_spec, &EngineType, "Engine") < 0 ||
        add_type(m, &context_spec, &ContextType, "Context") < 0 ||
        add_type(m, &event_spec, &EventType, "Event") < 0 ||
        add_type(m, &library_spec, &LibraryType, "PluginLibrary") < 0 ||
        add_type(m, &dim_spec, &DimExprType, "DimExpr") < 0)
        return NULL;
    err_base = PyErr_NewExceptionWithDoc("kiln.Error", "A kiln call failed; the message is kiln's.",
                                         NULL, NULL);
    if (!err_base)
        return NULL;
    Py_INCREF(err_base);
    PyModule_AddObject(m, "Error", err_base);
    static const struct {
        kiln_status st;
        const char *name;
    } names[] = {{KILN_ERR_INVALID_ARGUMENT, "InvalidArgumentError"},
                 {KILN_ERR_PARSE, "ParseError"},
                 {KILN_ERR_UNSUPPORTED, "UnsupportedError"},
                 {KILN_ERR_SHAPE, "ShapeError"},
                 {KILN_ERR_OUT_OF_MEMORY, "OutOfMemoryError"},
                 {KILN_ERR_IO, "FileError"},
                 {KILN_ERR_PLAN, "PlanError"},
                 {KILN_ERR_VERSION, "VersionError"},
                 {KILN_ERR_DEVICE, "DeviceError"},
                 {KILN_ERR_PLUGIN, "PluginError"},
                 {KILN_ERR_NOT_FOUND, "NotFoundError"},
                 {KILN_ERR_RUNTIME, "ExecutionError"},
                 {KILN_ERR_INTERNAL, "InternalError"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char full[64];
        snprintf(full, sizeof full, "kiln.%s", names[i].name);
        PyObject *dict = Py_BuildValue("{s:i}", "status", (int)names[i].st);
        PyObject *e = dict ? PyErr_NewException(full, err_base, dict) : NULL;
        Py_XDECREF(dict);
        if (!e)
            return NULL;
        err_by_status[names[i].st] = e;
        Py_INCREF(e);
        PyModule_AddObject(m, names[i].name, e);
    }
    PyModule_AddIntConstant(m, "MAX_DIMS", KILN_MAX_DIMS);
    PyModule_AddIntConstant(m, "PLUGIN_ABI_VERSION", KILN_PLUGIN_ABI_VERSION);
    return m;
}
