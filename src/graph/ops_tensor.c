/* ops_tensor.c - op schemas (shape and type inference) of the tensor family:
 * shape, layout and indexing ops, plus the parameter decoders their kernels
 * share (ops_tensor.h). */
#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ops_tensor.h"

/* ---------------- helpers ---------------- */

static kiln_status axis_in(const kn_node *n, int64_t axis, int rank, int *out) {
    *out = 0;
    if (axis < -(int64_t)rank || axis >= (int64_t)rank)
        return kn_node_error(n, KILN_ERR_SHAPE, "axis %lld is out of range for rank %d",
                             (long long)axis, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return KILN_OK;
}

/* Integers of a host value (any integer type) into out[cap]. */
static kiln_status value_ints(const kn_node *n, const kn_tinfo *t, const char *what, int64_t *out,
                              int cap, int *count) {
    int64_t len = kn_numel(t->rank, t->dims);
    if (!t->value && len > 0)
        return kn_node_error(n, KILN_ERR_INTERNAL, "the value of input '%s' is not known", what);
    if (len < 0 || len > cap)
        return kn_node_error(n, KILN_ERR_SHAPE, "input '%s' has %lld elements, at most %d allowed",
                             what, (long long)len, cap);
    for (int64_t k = 0; k < len; k++)
        out[k] = kn_value_int(t, k);
    *count = (int)len;
    return KILN_OK;
}

static bool has(const kn_tinfo *in, int n_in, int i) {
    return i < n_in && in[i].dtype != KILN_DTYPE_UNDEFINED;
}

/* Axes from input `idx` when present, else from attribute `name`.
 * *given is false when neither exists. */
static kiln_status axes_list(const kn_node *n, const kn_tinfo *in, int n_in, int idx,
                             const char *name, int64_t *axes, int *count, bool *given) {
    *given = false;
    *count = 0;
    if (has(in, n_in, idx)) {
        *given = true;
        return value_ints(n, &in[idx], name, axes, KILN_MAX_DIMS * 2, count);
    }
    size_t na;
    const int64_t *a = kn_attr_ints(n, name, &na);
    if (a) {
        if (na > KILN_MAX_DIMS * 2)
            return kn_node_error(n, KILN_ERR_SHAPE, "too many %s", name);
        memcpy(axes, a, na * sizeof *a);
        *count = (int)na;
        *given = true;
    }
    return KILN_OK;
}

static kiln_status check_rank(const kn_node *n, int rank) {
    if (rank > KILN_MAX_DIMS)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "output rank %d exceeds %d", rank,
                             KILN_MAX_DIMS);
    return KILN_OK;
}

static bool is_int_type(kiln_dtype t) {
    return t == KILN_DTYPE_INT64 || t == KILN_DTYPE_INT32 || t == KILN_DTYPE_INT16 ||
           t == KILN_DTYPE_INT8 || t == KILN_DTYPE_UINT8 || t == KILN_DTYPE_UINT16 ||
           t == KILN_DTYPE_UINT32 || t == KILN_DTYPE_UINT64;
}

static kiln_status need_index_type(const kn_node *n, const kn_tinfo *t, const char *what) {
    if (t->dtype != KILN_DTYPE_INT64 && t->dtype != KILN_DTYPE_INT32)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "%s must be int32 or int64, got %s", what,
                             kiln_dtype_name(t->dtype));
    return KILN_OK;
}

static kiln_status need_inputs(const kn_infer *c, int count) {
    for (int i = 0; i < count; i++)
        if (!kn_has_in(c, i))
            return kn_node_error(c->node, KILN_ERR_INVALID_ARGUMENT, "input %d is missing", i);
    if (kiln_dtype_size(c->in[0].dtype) == 0)
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "data type %s is not supported",
                             kiln_dtype_name(c->in[0].dtype));
    return KILN_OK;
}

/* ---------------- decoders shared with the kernels ---------------- */

kiln_status kn_slice_decode(const kn_node *n, const kn_tinfo *in, int n_in, kn_slice_plan *p) {
    int rank = in[0].rank;
    int64_t starts[16], ends[16], axes[16], steps[16];
    int ns = 0, ne = 0, na = 0, nst = 0;
    if (has(in, n_in, 1)) { /* opset >= 10 */
        KN_TRY(value_ints(n, &in[1], "starts", starts, 16, &ns));
        if (!has(in, n_in, 2))
            return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT, "input 'ends' is missing");
        KN_TRY(value_ints(n, &in[2], "ends", ends, 16, &ne));
        if (has(in, n_in, 3))
            KN_TRY(value_ints(n, &in[3], "axes", axes, 16, &na));
        else
            na = -1;
        if (has(in, n_in, 4))
            KN_TRY(value_ints(n, &in[4], "steps", steps, 16, &nst));
        else
            nst = -1;
    } else {
        size_t c1, c2, c3;
        const int64_t *s = kn_attr_ints(n, "starts", &c1), *e = kn_attr_ints(n, "ends", &c2);
        const int64_t *a = kn_attr_ints(n, "axes", &c3);
        if (!s || !e)
            return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT, "starts and ends are required");
        if (c1 > 16 || c2 > 16 || c3 > 16)
            return kn_node_error(n, KILN_ERR_SHAPE, "too many slice entries");
        memcpy(starts, s, c1 * sizeof *s);
        memcpy(ends, e, c2 * sizeof *e);
        ns = (int)c1, ne = (int)c2;
        na = a ? (int)c3 : -1;
        if (a)
            memcpy(axes, a, c3 * sizeof *a);
        nst = -1;
    }
    if (ns != ne || (na >= 0 && na != ns) || (nst >= 0 && nst != ns))
        return kn_node_error(n, KILN_ERR_SHAPE,
                             "starts, ends, axes and steps must have the same length (%d, %d, %d, %d)",
                             ns, ne, na, nst);
    if (ns > rank)
        return kn_node_error(n, KILN_ERR_SHAPE, "%d slice entries for rank %d", ns, rank);
    for (int d = 0; d < rank; d++) {
        p->start[d] = 0;
        p->step[d] = 1;
        p->count[d] = in[0].dims[d];
    }
    bool seen[KILN_MAX_DIMS] = {false};
    for (int i = 0; i < ns; i++) {
        int ax;
        KN_TRY(axis_in(n, na >= 0 ? axes[i] : i, rank, &ax));
        if (seen[ax])
            return kn_node_error(n, KILN_ERR_SHAPE, "axis %d is sliced twice", ax);
        seen[ax] = true;
        int64_t dim = in[0].dims[ax], step = nst >= 0 ? steps[i] : 1;
        if (step == 0)
            return kn_node_error(n, KILN_ERR_SHAPE, "step of axis %d is 0", ax);
        int64_t s = starts[i], e = ends[i];
        if (s < 0)
            s += dim;
        if (e < 0)
            e += dim;
        int64_t cnt;
        if (step > 0) {
            s = s < 0 ? 0 : s > dim ? dim : s;
            e = e < 0 ? 0 : e > dim ? dim : e;
            cnt = e > s ? (e - s - 1) / step + 1 : 0;
        } else {
            s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
            e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
            cnt = s > e ? (step == INT64_MIN ? 1 : (s - e - 1) / -step + 1) : 0;
        }
        p->start[ax] = cnt > 0 ? s : 0;
        p->step[ax] = step;
        p->count[ax] = cnt;
    }
    return KILN_OK;
}

kiln_status kn_pad_decode(const kn_node *n, const kn_tinfo *in, int n_in, kn_pad_plan *p) {
    int rank = in[0].rank;
    const char *mode = kn_attr_string(n, "mode", "constant");
    if (strcmp(mode, "constant") == 0)
        p->mode = KN_PAD_CONSTANT;
    else if (strcmp(mode, "reflect") == 0)
        p->mode = KN_PAD_REFLECT;
    else if (strcmp(mode, "edge") == 0)
        p->mode = KN_PAD_EDGE;
    else if (strcmp(mode, "wrap") == 0)
        p->mode = KN_PAD_WRAP;
    else
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "pad mode '%s' is not supported", mode);
    int64_t pads[2 * KILN_MAX_DIMS], axes[2 * KILN_MAX_DIMS];
    int np = 0, na = 0;
    if (has(in, n_in, 1)) {
        KN_TRY(value_ints(n, &in[1], "pads", pads, 2 * KILN_MAX_DIMS, &np));
    } else {
        size_t c;
        const int64_t *a = kn_attr_ints(n, "pads", &c);
        if (!a)
            a = kn_attr_ints(n, "paddings", &c);
        if (!a)
            return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT, "pads are required");
        if (c > 2 * KILN_MAX_DIMS)
            return kn_node_error(n, KILN_ERR_SHAPE, "too many pads");
        memcpy(pads, a, c * sizeof *a);
        np = (int)c;
    }
    if (has(in, n_in, 3)) {
        KN_TRY(value_ints(n, &in[3], "axes", axes, 2 * KILN_MAX_DIMS, &na));
    } else {
        na = rank;
        for (int i = 0; i < rank; i++)
            axes[i] = i;
    }
    if (np != 2 * na)
        return kn_node_error(n, KILN_ERR_SHAPE, "%d pads for %d axes (need 2 per axis)", np, na);
    for (int d = 0; d < rank; d++)
        p->begin[d] = p->end[d] = 0;
    for (int i = 0; i < na; i++) {
        int ax;
        KN_TRY(axis_in(n, axes[i], rank, &ax));
        p->begin[ax] = pads[i];
        p->end[ax] = pads[na + i];
        int64_t sum;
        if (kn_add_i64(pads[i], pads[na + i], &sum) || kn_add_i64(in[0].dims[ax], sum, &sum) ||
            sum > KN_MAX_ELEMENTS)
            return kn_node_error(n, KILN_ERR_SHAPE,
                                 "pads of axis %d (%lld, %lld) make more elements than a tensor "
                                 "can hold",
                                 ax, (long long)pads[i], (long long)pads[na + i]);
        if (sum < 0)
            return kn_node_error(n, KILN_ERR_SHAPE, "pads of axis %d remove more than its %lld elements",
                                 ax, (long long)in[0].dims[ax]);
        if (p->mode != KN_PAD_CONSTANT && in[0].dims[ax] == 0 && pads[i] + pads[na + i] > 0)
            return kn_node_error(n, KILN_ERR_SHAPE, "cannot pad empty axis %d in mode '%s'", ax,
                                 mode);
    }
    return KILN_OK;
}

kiln_status kn_center_crop_pad_decode(const kn_node *n, const kn_tinfo *in, int n_in,
                                      kn_pad_plan *p) {
    int rank = in[0].rank;
    int64_t shape[KILN_MAX_DIMS];
    int ns;
    if (!has(in, n_in, 1))
        return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT, "input 'shape' is missing");
    KN_TRY(value_ints(n, &in[1], "shape", shape, KILN_MAX_DIMS, &ns));
    size_t na;
    const int64_t *axes = kn_attr_ints(n, "axes", &na);
    if ((axes ? (int)na : rank) != ns)
        return kn_node_error(n, KILN_ERR_SHAPE, "shape has %d entries for %d axes", ns,
                             axes ? (int)na : rank);
    p->mode = KN_PAD_CONSTANT;
    for (int d = 0; d < rank; d++)
        p->begin[d] = p->end[d] = 0;
    for (int i = 0; i < ns; i++) {
        int ax = i;
        if (axes)
            KN_TRY(axis_in(n, axes[i], rank, &ax));
        int64_t dim = in[0].dims[ax], want = shape[i];
        if (want < 0)
            return kn_node_error(n, KILN_ERR_SHAPE, "shape entry %d is negative", i);
        p->begin[ax] = want >= dim ? (want - dim) / 2 : -((dim - want) / 2);
        p->end[ax] = want - dim - p->begin[ax];
    }
    return KILN_OK;
}

static bool empty_or_absent(const kn_tinfo *in, int n_in, int i) {
    return !has(in, n_in, i) || kn_numel(in[i].rank, in[i].dims) == 0;
}

kiln_status kn_resize_decode(const kn_node *n, const kn_tinfo *in, int n_in, kn_resize_plan *p) {
    memset(p, 0, sizeof *p);
    int rank = in[0].rank;
    p->rank = rank;
    bool upsample = strcmp(n->op_type, "Upsample") == 0;
    bool old = upsample || n->opset < 11;
    const char *mode = kn_attr_string(n, "mode", "nearest");
    if (strcmp(mode, "nearest") == 0)
        p->mode = KN_RS_NEAREST;
    else if (strcmp(mode, "linear") == 0 || strcmp(mode, "bilinear") == 0)
        p->mode = KN_RS_LINEAR;
    else if (strcmp(mode, "cubic") == 0 && !old)
        p->mode = KN_RS_CUBIC;
    else
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "resize mode '%s' is not supported", mode);
    const char *ct = old ? "asymmetric"
                         : kn_attr_string(n, "coordinate_transformation_mode", "half_pixel");
    static const char *const cts[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                                      "align_corners", "asymmetric", "tf_half_pixel_for_nn",
                                      "tf_crop_and_resize"};
    p->coord = -1;
    for (int i = 0; i < (int)KN_ARRAY_LEN(cts); i++)
        if (strcmp(ct, cts[i]) == 0)
            p->coord = i;
    if (p->coord < 0)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED,
                             "coordinate_transformation_mode '%s' is not supported", ct);
    const char *nm = old ? "simple" : kn_attr_string(n, "nearest_mode", "round_prefer_floor");
    static const char *const nms[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil",
                                      "simple"};
    p->nearest = -1;
    for (int i = 0; i < (int)KN_ARRAY_LEN(nms); i++)
        if (strcmp(nm, nms[i]) == 0)
            p->nearest = i;
    if (p->nearest < 0)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "nearest_mode '%s' is not supported", nm);
    p->cubic_a = kn_attr_float(n, "cubic_coeff_a", -0.75f);
    p->extrapolation = kn_attr_float(n, "extrapolation_value", 0.0f);
    p->exclude_outside = kn_attr_int(n, "exclude_outside", 0) != 0;
    p->antialias = kn_attr_int(n, "antialias", 0) != 0;

    /* axes (opset 18) */
    int axes[KILN_MAX_DIMS], na = rank;
    size_t cax;
    const int64_t *ax = kn_attr_ints(n, "axes", &cax);
    if (ax && !old) {
        if ((int)cax > rank)
            return kn_node_error(n, KILN_ERR_SHAPE, "%zu axes for rank %d", cax, rank);
        na = (int)cax;
        for (int i = 0; i < na; i++) {
            KN_TRY(axis_in(n, ax[i], rank, &axes[i]));
            for (int j = 0; j < i; j++)
                if (axes[j] == axes[i])
                    return kn_node_error(n, KILN_ERR_SHAPE, "axis %d repeats", axes[i]);
        }
    } else {
        for (int i = 0; i < rank; i++)
            axes[i] = i;
    }
    for (int d = 0; d < rank; d++) {
        p->scale[d] = 1.0;
        p->out[d] = in[0].dims[d];
        p->roi_start[d] = 0.0;
        p->roi_end[d] = 1.0;
    }

    int scales_in = old ? 1 : 2;
    double scales[KILN_MAX_DIMS];
    int nscales = -1;
    if (upsample && !has(in, n_in, 1)) {
        size_t cs;
        const float *fs = kn_attr_floats(n, "scales", &cs);
        if (fs) {
            nscales = (int)cs;
            if (nscales > KILN_MAX_DIMS)
                return kn_node_error(n, KILN_ERR_SHAPE, "too many scales");
            for (int i = 0; i < nscales; i++)
                scales[i] = fs[i];
        } else if (kn_attr_find(n, "height_scale") && rank == 4) { /* Upsample-1 */
            nscales = 4;
            scales[0] = scales[1] = 1.0;
            scales[2] = kn_attr_float(n, "height_scale", 1.0f);
            scales[3] = kn_attr_float(n, "width_scale", 1.0f);
        }
    } else if (!empty_or_absent(in, n_in, scales_in)) {
        const kn_tinfo *t = &in[scales_in];
        int64_t len = kn_numel(t->rank, t->dims);
        if (!t->value)
            return kn_node_error(n, KILN_ERR_INTERNAL, "the value of input 'scales' is not known");
        if (len > KILN_MAX_DIMS)
            return kn_node_error(n, KILN_ERR_SHAPE, "too many scales");
        nscales = (int)len;
        for (int i = 0; i < nscales; i++)
            scales[i] = kn_value_double(t, i);
    }
    bool sizes_given = !old && !empty_or_absent(in, n_in, 3);
    if (nscales < 0 && !sizes_given)
        return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT, "one of scales and sizes is required");
    if (nscales >= 0 && sizes_given)
        return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT,
                             "scales and sizes must not both be given");

    if (!old && !empty_or_absent(in, n_in, 1)) { /* roi */
        const kn_tinfo *t = &in[1];
        int64_t len = kn_numel(t->rank, t->dims);
        if (!t->value)
            return kn_node_error(n, KILN_ERR_INTERNAL, "the value of input 'roi' is not known");
        if (len != 2 * na) {
            if (p->coord == KN_CT_TF_CROP_AND_RESIZE)
                return kn_node_error(n, KILN_ERR_SHAPE, "roi has %lld values, %d expected",
                                     (long long)len, 2 * na);
        } else {
            for (int i = 0; i < na; i++) {
                p->roi_start[axes[i]] = kn_value_double(t, i);
                p->roi_end[axes[i]] = kn_value_double(t, na + i);
            }
        }
    }

    if (nscales >= 0) {
        if (nscales != na)
            return kn_node_error(n, KILN_ERR_SHAPE, "%d scales for %d axes", nscales, na);
        for (int i = 0; i < na; i++) {
            int d = axes[i];
            if (!(scales[i] > 0))
                return kn_node_error(n, KILN_ERR_SHAPE, "scale %g of axis %d is not positive",
                                     scales[i], d);
            p->scale[d] = scales[i];
            if (!kn_double_to_i64(floor(scales[i] * (double)in[0].dims[d]), 0, KN_MAX_ELEMENTS,
                                  &p->out[d]))
                return kn_node_error(n, KILN_ERR_SHAPE,
                                     "scale %g makes axis %d of %lld too large", scales[i], d,
                                     (long long)in[0].dims[d]);
        }
    } else {
        int64_t sizes[KILN_MAX_DIMS];
        int ns;
        KN_TRY(value_ints(n, &in[3], "sizes", sizes, KILN_MAX_DIMS, &ns));
        if (ns != na)
            return kn_node_error(n, KILN_ERR_SHAPE, "%d sizes for %d axes", ns, na);
        const char *pol = kn_attr_string(n, "keep_aspect_ratio_policy", "stretch");
        int policy = strcmp(pol, "stretch") == 0       ? 0
                     : strcmp(pol, "not_larger") == 0  ? 1
                     : strcmp(pol, "not_smaller") == 0 ? 2
                                                       : -1;
        if (policy < 0)
            return kn_node_error(n, KILN_ERR_UNSUPPORTED,
                                 "keep_aspect_ratio_policy '%s' is not supported", pol);
        double common = 0;
        for (int i = 0; i < na; i++) {
            int d = axes[i];
            if (sizes[i] < 0)
                return kn_node_error(n, KILN_ERR_SHAPE, "size %lld of axis %d is negative",
                                     (long long)sizes[i], d);
            double s = in[0].dims[d] ? (double)sizes[i] / (double)in[0].dims[d] : 1.0;
            p->scale[d] = s;
            p->out[d] = sizes[i];
            if (i == 0 || (policy == 1 && s < common) || (policy == 2 && s > common))
                common = s;
        }
        if (policy != 0)
            for (int i = 0; i < na; i++) {
                int d = axes[i];
                p->scale[d] = common;
                if (!kn_double_to_i64(common * (double)in[0].dims[d] + 0.5, 0, KN_MAX_ELEMENTS,
                                      &p->out[d]))
                    return kn_node_error(n, KILN_ERR_SHAPE, "scale %g makes axis %d too large",
                                         common, d);
            }
    }
    return KILN_OK;
}

kiln_status kn_split_decode(const kn_node *n, const kn_tinfo *in, int n_in, int n_out, int *axis,
                            int64_t *sizes) {
    KN_TRY(axis_in(n, kn_attr_int(n, "axis", 0), in[0].rank, axis));
    int64_t dim = in[0].dims[*axis];
    int64_t split[16];
    int ns = -1;
    if (!empty_or_absent(in, n_in, 1)) {
        KN_TRY(value_ints(n, &in[1], "split", split, 16, &ns));
    } else {
        size_t c;
        const int64_t *a = kn_attr_ints(n, "split", &c);
        if (a) {
            if (c > 16)
                return kn_node_error(n, KILN_ERR_SHAPE, "too many split entries");
            memcpy(split, a, c * sizeof *a);
            ns = (int)c;
        }
    }
    if (ns >= 0) {
        if (ns != n_out)
            return kn_node_error(n, KILN_ERR_SHAPE, "split has %d entries for %d outputs", ns,
                                 n_out);
        int64_t sum = 0;
        for (int i = 0; i < ns; i++) {
            if (split[i] < 0)
                return kn_node_error(n, KILN_ERR_SHAPE, "split entry %d is negative", i);
            sizes[i] = split[i];
            if (kn_add_i64(sum, split[i], &sum))
                return kn_node_error(n, KILN_ERR_SHAPE, "split sizes overflow");
        }
        if (sum != dim)
            return kn_node_error(n, KILN_ERR_SHAPE,
                                 "split sizes add up to %lld, the axis has %lld",
                                 (long long)sum, (long long)dim);
        return KILN_OK;
    }
    const kn_attr *no = kn_attr_find(n, "num_outputs");
    int64_t parts = no ? no->i : n_out;
    if (parts != n_out || parts <= 0)
        return kn_node_error(n, KILN_ERR_SHAPE, "num_outputs is %lld but the node has %d outputs",
                             (long long)parts, n_out);
    if (dim % parts != 0 && !no)
        return kn_node_error(n, KILN_ERR_SHAPE, "axis of %lld cannot be split into %lld equal parts",
                             (long long)dim, (long long)parts);
    int64_t each = (dim + parts - 1) / parts;
    int64_t left = dim;
    for (int i = 0; i < n_out; i++) {
        sizes[i] = left < each ? left : each;
        left -= sizes[i];
    }
    return KILN_OK;
}

/* ---------------- shape inference ---------------- */

static kiln_status infer_identity(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    kn_same_as(&c->out[0], &c->in[0]);
    return KILN_OK;
}

static kiln_status infer_reshape(kn_infer *c) {
    const kn_node *n = c->node;
    int64_t shape[KILN_MAX_DIMS];
    int ns;
    if (kn_has_in(c, 1)) {
        KN_TRY(need_inputs(c, 2));
        KN_TRY(value_ints(n, &c->in[1], "shape", shape, KILN_MAX_DIMS, &ns));
    } else { /* Reshape-1 */
        KN_TRY(need_inputs(c, 1));
        size_t cnt;
        const int64_t *a = kn_attr_ints(n, "shape", &cnt);
        if (!a || cnt > KILN_MAX_DIMS)
            return kn_node_error(n, KILN_ERR_SHAPE, "shape is missing or too long");
        memcpy(shape, a, cnt * sizeof *a);
        ns = (int)cnt;
    }
    bool allowzero = kn_attr_int(n, "allowzero", 0) != 0;
    const kn_tinfo *x = &c->in[0];
    int64_t total = kn_numel(x->rank, x->dims), known = 1;
    int neg = -1;
    for (int i = 0; i < ns; i++) {
        int64_t d = shape[i];
        if (d == 0 && !allowzero) {
            if (i >= x->rank)
                return kn_node_error(n, KILN_ERR_SHAPE,
                                     "shape entry %d is 0 (copy) but the input has rank %d", i,
                                     x->rank);
            d = x->dims[i];
        } else if (d == -1) {
            if (neg >= 0)
                return kn_node_error(n, KILN_ERR_SHAPE, "shape has more than one -1");
            neg = i;
            continue;
        } else if (d < 0) {
            return kn_node_error(n, KILN_ERR_SHAPE, "shape entry %d is %lld", i, (long long)d);
        }
        c->out[0].dims[i] = d;
        if (kn_mul_i64(known, d, &known) || known > KN_MAX_ELEMENTS) {
            char b[96];
            kn_shape_str(ns, shape, b, sizeof b);
            return kn_node_error(n, KILN_ERR_SHAPE,
                                 "shape %s has more elements than a tensor can (at most 2^48)", b);
        }
    }
    if (neg >= 0) {
        if (known == 0 || total % known != 0)
            return kn_node_error(n, KILN_ERR_SHAPE,
                                 "cannot reshape %lld elements: the known dims make %lld",
                                 (long long)total, (long long)known);
        c->out[0].dims[neg] = total / known;
    } else if (known != total) {
        char a[96], b[96];
        kn_shape_str(x->rank, x->dims, a, sizeof a);
        kn_shape_str(ns, c->out[0].dims, b, sizeof b);
        return kn_node_error(n, KILN_ERR_SHAPE,
                             "cannot reshape %s (%lld elements) to %s (%lld elements)", a,
                             (long long)total, b, (long long)known);
    }
    c->out[0].dtype = x->dtype;
    c->out[0].rank = ns;
    return KILN_OK;
}

static kiln_status infer_flatten(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    const kn_tinfo *x = &c->in[0];
    int64_t axis = kn_attr_int(c->node, "axis", 1);
    if (axis < -(int64_t)x->rank || axis > x->rank)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "axis %lld is out of range for rank %d",
                             (long long)axis, x->rank);
    if (axis < 0)
        axis += x->rank;
    int64_t a = 1, b = 1;
    for (int i = 0; i < x->rank; i++) {
        if (i < axis)
            a *= x->dims[i];
        else
            b *= x->dims[i];
    }
    c->out[0].dtype = x->dtype;
    c->out[0].rank = 2;
    c->out[0].dims[0] = a;
    c->out[0].dims[1] = b;
    return KILN_OK;
}

static kiln_status infer_squeeze(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    const kn_tinfo *x = &c->in[0];
    int64_t axes[2 * KILN_MAX_DIMS];
    int na;
    bool given;
    KN_TRY(axes_list(c->node, c->in, c->n_in, 1, "axes", axes, &na, &given));
    bool drop[KILN_MAX_DIMS] = {false};
    if (!given) {
        for (int i = 0; i < x->rank; i++)
            drop[i] = x->dims[i] == 1;
    }
    for (int i = 0; i < na; i++) {
        int ax;
        KN_TRY(axis_in(c->node, axes[i], x->rank, &ax));
        if (x->dims[ax] != 1)
            return kn_node_error(c->node, KILN_ERR_SHAPE,
                                 "cannot squeeze axis %d of size %lld", ax, (long long)x->dims[ax]);
        drop[ax] = true;
    }
    int r = 0;
    for (int i = 0; i < x->rank; i++)
        if (!drop[i])
            c->out[0].dims[r++] = x->dims[i];
    c->out[0].rank = r;
    c->out[0].dtype = x->dtype;
    return KILN_OK;
}

static kiln_status infer_unsqueeze(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    const kn_tinfo *x = &c->in[0];
    int64_t axes[2 * KILN_MAX_DIMS];
    int na;
    bool given;
    KN_TRY(axes_list(c->node, c->in, c->n_in, 1, "axes", axes, &na, &given));
    if (!given)
        return kn_node_error(c->node, KILN_ERR_INVALID_ARGUMENT, "axes are required");
    int r = x->rank + na;
    KN_TRY(check_rank(c->node, r));
    bool ins[KILN_MAX_DIMS] = {false};
    for (int i = 0; i < na; i++) {
        int ax;
        KN_TRY(axis_in(c->node, axes[i], r, &ax));
        if (ins[ax])
            return kn_node_error(c->node, KILN_ERR_SHAPE, "axis %d repeats", ax);
        ins[ax] = true;
    }
    int k = 0;
    for (int i = 0; i < r; i++)
        c->out[0].dims[i] = ins[i] ? 1 : x->dims[k++];
    c->out[0].rank = r;
    c->out[0].dtype = x->dtype;
    return KILN_OK;
}

static kiln_status infer_transpose(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    const kn_tinfo *x = &c->in[0];
    size_t np;
    const int64_t *perm = kn_attr_ints(c->node, "perm", &np);
    if (perm && (int)np != x->rank)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "perm has %zu entries for rank %d", np,
                             x->rank);
    bool used[KILN_MAX_DIMS] = {false};
    for (int i = 0; i < x->rank; i++) {
        int64_t p = perm ? perm[i] : x->rank - 1 - i;
        if (p < 0 || p >= x->rank || used[p])
            return kn_node_error(c->node, KILN_ERR_SHAPE, "perm is not a permutation of 0..%d",
                                 x->rank - 1);
        used[p] = true;
        c->out[0].dims[i] = x->dims[p];
    }
    c->out[0].rank = x->rank;
    c->out[0].dtype = x->dtype;
    return KILN_OK;
}

static kiln_status infer_concat(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    const kn_tinfo *x = &c->in[0];
    int ax;
    KN_TRY(axis_in(c->node, kn_attr_int(c->node, "axis", 1), x->rank, &ax));
    kn_same_as(&c->out[0], x);
    int64_t sum = 0;
    for (int i = 0; i < c->n_in; i++) {
        const kn_tinfo *t = &c->in[i];
        if (!kn_has_in(c, i))
            continue;
        if (t->rank != x->rank || t->dtype != x->dtype)
            return kn_node_error(c->node, KILN_ERR_SHAPE,
                                 "input %d has rank %d and type %s; input 0 has rank %d and type %s",
                                 i, t->rank, kiln_dtype_name(t->dtype), x->rank,
                                 kiln_dtype_name(x->dtype));
        for (int d = 0; d < x->rank; d++)
            if (d != ax && t->dims[d] != x->dims[d])
                return kn_node_error(c->node, KILN_ERR_SHAPE,
                                     "input %d has %lld in dimension %d, input 0 has %lld", i,
                                     (long long)t->dims[d], d, (long long)x->dims[d]);
        sum += t->dims[ax];
    }
    c->out[0].dims[ax] = sum;
    return KILN_OK;
}

static kiln_status infer_split(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    int ax;
    int64_t sizes[16];
    if (c->n_out > 16)
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "more than 16 outputs");
    KN_TRY(kn_split_decode(c->node, c->in, c->n_in, c->n_out, &ax, sizes));
    for (int i = 0; i < c->n_out; i++) {
        kn_same_as(&c->out[i], &c->in[0]);
        c->out[i].dims[ax] = sizes[i];
    }
    return KILN_OK;
}

static kiln_status infer_slice(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    kn_slice_plan p;
    KN_TRY(kn_slice_decode(c->node, c->in, c->n_in, &p));
    kn_same_as(&c->out[0], &c->in[0]);
    for (int d = 0; d < c->in[0].rank; d++)
        c->out[0].dims[d] = p.count[d];
    return KILN_OK;
}

static kiln_status infer_gather(kn_infer *c) {
    KN_TRY(need_inputs(c, 2));
    const kn_tinfo *x = &c->in[0], *ix = &c->in[1];
    KN_TRY(need_index_type(c->node, ix, "indices"));
    int ax;
    KN_TRY(axis_in(c->node, kn_attr_int(c->node, "axis", 0), x->rank, &ax));
    int r = x->rank - 1 + ix->rank;
    KN_TRY(check_rank(c->node, r));
    int k = 0;
    for (int i = 0; i < ax; i++)
        c->out[0].dims[k++] = x->dims[i];
    for (int i = 0; i < ix->rank; i++)
        c->out[0].dims[k++] = ix->dims[i];
    for (int i = ax + 1; i < x->rank; i++)
        c->out[0].dims[k++] = x->dims[i];
    c->out[0].rank = r;
    c->out[0].dtype = x->dtype;
    return KILN_OK;
}

static kiln_status infer_gather_elements(kn_infer *c) {
    KN_TRY(need_inputs(c, 2));
    const kn_tinfo *x = &c->in[0], *ix = &c->in[1];
    KN_TRY(need_index_type(c->node, ix, "indices"));
    int ax;
    KN_TRY(axis_in(c->node, kn_attr_int(c->node, "axis", 0), x->rank, &ax));
    if (ix->rank != x->rank)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "indices have rank %d, data rank %d",
                             ix->rank, x->rank);
    kn_same_as(&c->out[0], ix);
    c->out[0].dtype = x->dtype;
    return KILN_OK;
}

static kiln_status infer_gather_nd(kn_infer *c) {
    KN_TRY(need_inputs(c, 2));
    const kn_tinfo *x = &c->in[0], *ix = &c->in[1];
    if (ix->dtype != KILN_DTYPE_INT64)
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "indices must be int64");
    int64_t b = kn_attr_int(c->node, "batch_dims", 0);
    if (ix->rank < 1 || x->rank < 1 || b < 0 || b >= ix->rank || b >= x->rank)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "batch_dims %lld does not fit ranks %d and %d",
                             (long long)b, x->rank, ix->rank);
    int64_t k = ix->dims[ix->rank - 1];
    if (k < 1 || k > x->rank - b)
        return kn_node_error(c->node, KILN_ERR_SHAPE,
                             "the last dimension of indices (%lld) must be in 1..%lld", (long long)k,
                             (long long)(x->rank - b));
    for (int i = 0; i < b; i++)
        if (ix->dims[i] != x->dims[i])
            return kn_node_error(c->node, KILN_ERR_SHAPE, "batch dimension %d differs (%lld vs %lld)",
                                 i, (long long)ix->dims[i], (long long)x->dims[i]);
    int r = 0;
    for (int i = 0; i < ix->rank - 1; i++)
        c->out[0].dims[r++] = ix->dims[i];
    KN_TRY(check_rank(c->node, r + x->rank - (int)(b + k)));
    for (int i = (int)(b + k); i < x->rank; i++)
        c->out[0].dims[r++] = x->dims[i];
    c->out[0].rank = r;
    c->out[0].dtype = x->dtype;
    return KILN_OK;
}

static kiln_status infer_scatter_nd(kn_infer *c) {
    KN_TRY(need_inputs(c, 3));
    const kn_tinfo *x = &c->in[0], *ix = &c->in[1], *u = &c->in[2];
    if (ix->dtype != KILN_DTYPE_INT64)
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "indices must be int64");
    if (ix->rank < 1)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "indices must have rank >= 1");
    int64_t k = ix->dims[ix->rank - 1];
    if (k > x->rank)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "index length %lld exceeds data rank %d",
                             (long long)k, x->rank);
    int ur = ix->rank - 1 + x->rank - (int)k;
    bool ok = u->rank == ur && u->dtype == x->dtype;
    for (int i = 0; ok && i < ix->rank - 1; i++)
        ok = u->dims[i] == ix->dims[i];
    for (int i = (int)k; ok && i < x->rank; i++)
        ok = u->dims[ix->rank - 1 + i - k] == x->dims[i];
    if (!ok)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "updates do not fit the indices and data");
    kn_same_as(&c->out[0], x);
    return KILN_OK;
}

static kiln_status infer_scatter_elements(kn_infer *c) {
    KN_TRY(need_inputs(c, 3));
    const kn_tinfo *x = &c->in[0], *ix = &c->in[1], *u = &c->in[2];
    KN_TRY(need_index_type(c->node, ix, "indices"));
    int ax;
    KN_TRY(axis_in(c->node, kn_attr_int(c->node, "axis", 0), x->rank, &ax));
    if (ix->rank != x->rank || u->rank != x->rank)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "data, indices and updates need one rank");
    for (int i = 0; i < x->rank; i++)
        if (u->dims[i] != ix->dims[i])
            return kn_node_error(c->node, KILN_ERR_SHAPE, "updates and indices differ in shape");
    kn_same_as(&c->out[0], x);
    return KILN_OK;
}

static kiln_status infer_expand(kn_infer *c) {
    KN_TRY(need_inputs(c, 2));
    int64_t shape[KILN_MAX_DIMS];
    int ns;
    KN_TRY(value_ints(c->node, &c->in[1], "shape", shape, KILN_MAX_DIMS, &ns));
    kn_tinfo s;
    memset(&s, 0, sizeof s);
    s.rank = ns;
    memcpy(s.dims, shape, (size_t)ns * sizeof *shape);
    for (int i = 0; i < ns; i++)
        if (shape[i] < 0)
            return kn_node_error(c->node, KILN_ERR_SHAPE, "shape entry %d is negative", i);
    KN_TRY(kn_broadcast(c, &c->in[0], &s, &c->out[0]));
    c->out[0].dtype = c->in[0].dtype;
    return KILN_OK;
}

static kiln_status infer_tile(kn_infer *c) {
    KN_TRY(need_inputs(c, 2));
    const kn_tinfo *x = &c->in[0];
    int64_t rep[KILN_MAX_DIMS];
    int nr;
    KN_TRY(value_ints(c->node, &c->in[1], "repeats", rep, KILN_MAX_DIMS, &nr));
    if (nr != x->rank)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "%d repeats for rank %d", nr, x->rank);
    kn_same_as(&c->out[0], x);
    for (int i = 0; i < nr; i++) {
        if (rep[i] < 0)
            return kn_node_error(c->node, KILN_ERR_SHAPE, "repeat %d is negative", i);
        if (kn_mul_i64(x->dims[i], rep[i], &c->out[0].dims[i]))
            return kn_node_error(c->node, KILN_ERR_SHAPE,
                                 "dimension %d (%lld) repeated %lld times overflows", i,
                                 (long long)x->dims[i], (long long)rep[i]);
    }
    return KILN_OK;
}

static kiln_status infer_pad(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    kn_pad_plan p;
    if (strcmp(c->node->op_type, "CenterCropPad") == 0)
        KN_TRY(kn_center_crop_pad_decode(c->node, c->in, c->n_in, &p));
    else
        KN_TRY(kn_pad_decode(c->node, c->in, c->n_in, &p));
    kn_same_as(&c->out[0], &c->in[0]);
    for (int d = 0; d < c->in[0].rank; d++) /* kn_pad_decode checked these sums */
        c->out[0].dims[d] += p.begin[d] + p.end[d];
    return KILN_OK;
}

void kn_shape_window(const kn_node *n, int rank, int64_t *s, int64_t *e) {
    int64_t a = kn_attr_int(n, "start", 0), b = kn_attr_int(n, "end", rank);
    if (a < 0)
        a += rank;
    if (b < 0)
        b += rank;
    a = a < 0 ? 0 : a > rank ? rank : a;
    b = b < 0 ? 0 : b > rank ? rank : b;
    *s = a;
    *e = b < a ? a : b;
}

static kiln_status infer_shape(kn_infer *c) {
    if (!kn_has_in(c, 0))
        return kn_node_error(c->node, KILN_ERR_INVALID_ARGUMENT, "input 0 is missing");
    int64_t s, e;
    kn_shape_window(c->node, c->in[0].rank, &s, &e);
    c->out[0].dtype = KILN_DTYPE_INT64;
    c->out[0].rank = 1;
    c->out[0].dims[0] = e - s;
    return KILN_OK;
}

static kiln_status infer_size(kn_infer *c) {
    if (!kn_has_in(c, 0))
        return kn_node_error(c->node, KILN_ERR_INVALID_ARGUMENT, "input 0 is missing");
    c->out[0].dtype = KILN_DTYPE_INT64;
    c->out[0].rank = 0;
    return KILN_OK;
}

static kiln_status infer_constant_of_shape(kn_infer *c) {
    if (!kn_has_in(c, 0))
        return kn_node_error(c->node, KILN_ERR_INVALID_ARGUMENT, "input 0 is missing");
    int64_t shape[KILN_MAX_DIMS];
    int ns;
    KN_TRY(value_ints(c->node, &c->in[0], "shape", shape, KILN_MAX_DIMS, &ns));
    const kn_attr *v = kn_attr_find(c->node, "value");
    kiln_dtype dt = KILN_DTYPE_FLOAT;
    if (v && v->type == KN_ATTR_TENSOR && v->tensor) {
        dt = v->tensor->dtype;
        if (kn_numel(v->tensor->rank, v->tensor->dims) != 1)
            return kn_node_error(c->node, KILN_ERR_SHAPE, "value must hold one element");
        if (kiln_dtype_size(dt) == 0)
            return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "value type %s is not supported",
                                 kiln_dtype_name(dt));
    }
    for (int i = 0; i < ns; i++) {
        if (shape[i] < 0)
            return kn_node_error(c->node, KILN_ERR_SHAPE, "shape entry %d is negative", i);
        c->out[0].dims[i] = shape[i];
    }
    c->out[0].rank = ns;
    c->out[0].dtype = dt;
    return KILN_OK;
}

/* ---------------- the random ops ---------------- */

kiln_status kn_random_decode(const kn_node *n, kn_random *p) {
    memset(p, 0, sizeof *p);
    const char *op = n->op_type;
    bool like = strstr(op, "Like") != NULL;
    if (strncmp(op, "RandomUniform", 13) == 0) {
        p->kind = KN_RAND_UNIFORM;
        p->a = kn_attr_float(n, "low", 0.f);
        p->b = kn_attr_float(n, "high", 1.f);
    } else if (strncmp(op, "RandomNormal", 12) == 0) {
        p->kind = KN_RAND_NORMAL;
        p->a = kn_attr_float(n, "mean", 0.f);
        p->b = kn_attr_float(n, "scale", 1.f);
    } else if (strcmp(op, "Bernoulli") == 0) {
        p->kind = KN_RAND_BERNOULLI;
    } else {
        p->kind = KN_RAND_MULTINOMIAL;
        p->samples = kn_attr_int(n, "sample_size", 1);
        if (p->samples < 1)
            return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT, "sample_size %lld is not positive",
                                 (long long)p->samples);
    }
    p->from_input = like || p->kind == KN_RAND_BERNOULLI || p->kind == KN_RAND_MULTINOMIAL;
    p->has_seed = kn_attr_find(n, "seed") != NULL;
    p->seed = kn_attr_float(n, "seed", 0.f);
    p->dtype = (kiln_dtype)kn_attr_int(n, "dtype", p->kind == KN_RAND_MULTINOMIAL ? KILN_DTYPE_INT32
                                                   : p->from_input          ? KILN_DTYPE_UNDEFINED
                                                                            : KILN_DTYPE_FLOAT);
    return KILN_OK;
}

uint64_t kn_random_key(const kn_random *p) {
    if (p->has_seed)
        return kn_rand_key(p->seed);
    /* no seed: a key of this process's own, new for every prepared context */
    static uint64_t drawn;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t k = ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^
                 (__atomic_add_fetch(&drawn, 1, __ATOMIC_RELAXED) * 0xD1B54A32D192ED03ull) ^
                 ((uint64_t)getpid() << 32);
    k ^= k >> 31;
    k *= 0x9E3779B97F4A7C15ull;
    return k ^ (k >> 29);
}

static bool random_real(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_DOUBLE ||
           t == KILN_DTYPE_BFLOAT16;
}

/* RandomUniform / RandomNormal: the shape attribute; the -Like forms and
 * Bernoulli: input 0's shape (and type, unless dtype says); Multinomial:
 * [batch, sample_size] of int32 or int64 from [batch, classes]. */
static kiln_status infer_random(kn_infer *c) {
    kn_random p;
    KN_TRY(kn_random_decode(c->node, &p));
    kn_tinfo *y = &c->out[0];
    if (p.from_input) {
        if (!kn_has_in(c, 0))
            return kn_node_error(c->node, KILN_ERR_INVALID_ARGUMENT, "input 0 is missing");
        const kn_tinfo *x = &c->in[0];
        if ((p.kind == KN_RAND_BERNOULLI || p.kind == KN_RAND_MULTINOMIAL) && !random_real(x->dtype))
            return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "input 0 is %s, not a float type",
                                 kiln_dtype_name(x->dtype));
        if (p.kind == KN_RAND_MULTINOMIAL) {
            if (x->rank != 2)
                return kn_node_error(c->node, KILN_ERR_SHAPE, "input must be [batch, classes], has rank %d",
                                     x->rank);
            if (x->dims[1] == 0)
                return kn_node_error(c->node, KILN_ERR_SHAPE, "input has no classes to draw from");
            y->rank = 2;
            y->dims[0] = x->dims[0];
            y->dims[1] = p.samples;
        } else {
            y->rank = x->rank;
            memcpy(y->dims, x->dims, sizeof y->dims);
        }
        y->dtype = p.dtype != KILN_DTYPE_UNDEFINED ? p.dtype : x->dtype;
    } else {
        size_t ns;
        const int64_t *shape = kn_attr_ints(c->node, "shape", &ns);
        if (!shape || ns > KILN_MAX_DIMS)
            return kn_node_error(c->node, KILN_ERR_INVALID_ARGUMENT, "the shape attribute is %s",
                                 shape ? "too long" : "missing");
        for (size_t i = 0; i < ns; i++) {
            if (shape[i] < 0)
                return kn_node_error(c->node, KILN_ERR_SHAPE, "shape entry %zu is negative", i);
            y->dims[i] = shape[i];
        }
        y->rank = (int)ns;
        y->dtype = p.dtype;
    }
    bool ok = p.kind == KN_RAND_MULTINOMIAL ? y->dtype == KILN_DTYPE_INT32 || y->dtype == KILN_DTYPE_INT64
              : p.kind == KN_RAND_BERNOULLI ? kiln_dtype_size(y->dtype) > 0 && y->dtype != KILN_DTYPE_STRING
                                            : random_real(y->dtype);
    if (!ok)
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "output type %s is not supported",
                             kiln_dtype_name(y->dtype));
    return KILN_OK;
}

static kiln_status infer_range(kn_infer *c) {
    KN_TRY(need_inputs(c, 3));
    for (int i = 0; i < 3; i++) {
        if (kn_numel(c->in[i].rank, c->in[i].dims) != 1 || !c->in[i].value)
            return kn_node_error(c->node, KILN_ERR_SHAPE, "input %d must be a known scalar", i);
        if (c->in[i].dtype != c->in[0].dtype)
            return kn_node_error(c->node, KILN_ERR_SHAPE, "inputs must share one type");
    }
    int64_t count;
    if (is_int_type(c->in[0].dtype)) {
        int64_t s = kn_value_int(&c->in[0], 0), l = kn_value_int(&c->in[1], 0),
                d = kn_value_int(&c->in[2], 0);
        if (d == 0)
            return kn_node_error(c->node, KILN_ERR_SHAPE, "delta is 0");
        int64_t span;
        if (kn_sub_i64(l, s, &span) || span == INT64_MIN)
            return kn_node_error(c->node, KILN_ERR_SHAPE, "range is too long");
        /* ceil(span / d) when both have one sign; span / d cannot overflow */
        count = (d > 0) == (span > 0) && span != 0 ? span / d + (span % d != 0) : 0;
    } else {
        double s = kn_value_double(&c->in[0], 0), l = kn_value_double(&c->in[1], 0),
               d = kn_value_double(&c->in[2], 0);
        if (d == 0 || isnan(d))
            return kn_node_error(c->node, KILN_ERR_SHAPE, "delta is 0");
        double q = ceil((l - s) / d);
        if (!(q < 9e18))
            return kn_node_error(c->node, KILN_ERR_SHAPE, "range is too long");
        count = q > 0 ? (int64_t)q : 0;
    }
    c->out[0].dtype = c->in[0].dtype;
    c->out[0].rank = 1;
    c->out[0].dims[0] = count;
    return KILN_OK;
}

static kiln_status infer_nonzero(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    const kn_tinfo *x = &c->in[0];
    c->out[0].dtype = KILN_DTYPE_INT64;
    c->out[0].rank = 2;
    c->out[0].dims[0] = x->rank ? x->rank : 1;
    c->out[0].dims[1] = kn_numel(x->rank, x->dims);
    c->out[0].data_dependent = true;
    return KILN_OK;
}

static kiln_status infer_topk(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    const kn_tinfo *x = &c->in[0];
    int ax;
    KN_TRY(axis_in(c->node, kn_attr_int(c->node, "axis", -1), x->rank, &ax));
    int64_t k;
    if (kn_has_in(c, 1)) {
        int64_t kv[1];
        int nk;
        KN_TRY(value_ints(c->node, &c->in[1], "K", kv, 1, &nk));
        if (nk != 1)
            return kn_node_error(c->node, KILN_ERR_SHAPE, "K must hold one value");
        k = kv[0];
    } else {
        k = kn_attr_int(c->node, "k", -1);
    }
    if (k < 0 || k > x->dims[ax])
        return kn_node_error(c->node, KILN_ERR_SHAPE, "k = %lld is out of range for axis of %lld",
                             (long long)k, (long long)x->dims[ax]);
    kn_same_as(&c->out[0], x);
    c->out[0].dims[ax] = k;
    if (c->n_out > 1) {
        kn_same_as(&c->out[1], &c->out[0]);
        c->out[1].dtype = KILN_DTYPE_INT64;
    }
    return KILN_OK;
}

static kiln_status infer_onehot(kn_infer *c) {
    KN_TRY(need_inputs(c, 3));
    const kn_tinfo *ix = &c->in[0], *depth = &c->in[1], *vals = &c->in[2];
    if (kn_numel(depth->rank, depth->dims) != 1 || !depth->value)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "depth must be a known scalar");
    if (kn_numel(vals->rank, vals->dims) != 2)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "values must hold 2 elements");
    double dd = kn_value_double(depth, 0);
    int64_t d;
    if (!kn_double_to_i64(dd, 1, KN_MAX_ELEMENTS, &d))
        return kn_node_error(c->node, KILN_ERR_SHAPE, "depth %g is not in [1, 2^48]", dd);
    int r = ix->rank + 1;
    KN_TRY(check_rank(c->node, r));
    int ax;
    KN_TRY(axis_in(c->node, kn_attr_int(c->node, "axis", -1), r, &ax));
    int k = 0;
    for (int i = 0; i < r; i++)
        c->out[0].dims[i] = i == ax ? d : ix->dims[k++];
    c->out[0].rank = r;
    c->out[0].dtype = vals->dtype;
    return KILN_OK;
}

static kiln_status infer_trilu(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    if (c->in[0].rank < 2)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "input must have rank >= 2");
    kn_same_as(&c->out[0], &c->in[0]);
    return KILN_OK;
}

static kiln_status infer_depth_to_space(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    const kn_tinfo *x = &c->in[0];
    int64_t b = kn_attr_int(c->node, "blocksize", 0);
    bool d2s = strcmp(c->node->op_type, "DepthToSpace") == 0;
    if (x->rank != 4 || b < 1 || b > KN_MAX_WINDOW_ATTR)
        return kn_node_error(c->node, KILN_ERR_SHAPE,
                             "need a 4-D input and blocksize in [1, %lld], got %lld",
                             (long long)KN_MAX_WINDOW_ATTR, (long long)b);
    const char *mode = kn_attr_string(c->node, "mode", "DCR");
    if (strcmp(mode, "DCR") != 0 && strcmp(mode, "CRD") != 0)
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "mode '%s' is not supported", mode);
    kn_same_as(&c->out[0], x);
    if (d2s) {
        if (x->dims[1] % (b * b))
            return kn_node_error(c->node, KILN_ERR_SHAPE,
                                 "channels (%lld) are not divisible by blocksize^2 (%lld)",
                                 (long long)x->dims[1], (long long)(b * b));
        c->out[0].dims[1] = x->dims[1] / (b * b);
        if (kn_mul_i64(x->dims[2], b, &c->out[0].dims[2]) ||
            kn_mul_i64(x->dims[3], b, &c->out[0].dims[3]))
            return kn_node_error(c->node, KILN_ERR_SHAPE, "blocksize %lld overflows the output",
                                 (long long)b);
    } else {
        if (x->dims[2] % b || x->dims[3] % b)
            return kn_node_error(c->node, KILN_ERR_SHAPE,
                                 "height and width must be divisible by blocksize %lld",
                                 (long long)b);
        if (kn_mul_i64(x->dims[1], b * b, &c->out[0].dims[1]))
            return kn_node_error(c->node, KILN_ERR_SHAPE, "blocksize %lld overflows the output",
                                 (long long)b);
        c->out[0].dims[2] = x->dims[2] / b;
        c->out[0].dims[3] = x->dims[3] / b;
    }
    return KILN_OK;
}

static kiln_status infer_eyelike(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    if (c->in[0].rank != 2)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "input must be 2-D");
    kn_same_as(&c->out[0], &c->in[0]);
    int64_t dt = kn_attr_int(c->node, "dtype", 0);
    if (dt) {
        if (kiln_dtype_size((kiln_dtype)dt) == 0)
            return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "dtype %lld is not supported",
                                 (long long)dt);
        c->out[0].dtype = (kiln_dtype)dt;
    }
    return KILN_OK;
}

static kiln_status infer_resize(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    kn_resize_plan p;
    KN_TRY(kn_resize_decode(c->node, c->in, c->n_in, &p));
    kn_same_as(&c->out[0], &c->in[0]);
    for (int d = 0; d < p.rank; d++)
        c->out[0].dims[d] = p.out[d];
    return KILN_OK;
}

static kiln_status infer_compress(kn_infer *c) {
    KN_TRY(need_inputs(c, 2));
    const kn_tinfo *x = &c->in[0], *cond = &c->in[1];
    if (cond->rank != 1)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "condition must be 1-D");
    const kn_attr *a = kn_attr_find(c->node, "axis");
    int64_t len = cond->dims[0];
    if (a) {
        int ax;
        KN_TRY(axis_in(c->node, a->i, x->rank, &ax));
        kn_same_as(&c->out[0], x);
        c->out[0].dims[ax] = len < x->dims[ax] ? len : x->dims[ax];
    } else {
        int64_t total = kn_numel(x->rank, x->dims);
        c->out[0].dtype = x->dtype;
        c->out[0].rank = 1;
        c->out[0].dims[0] = len < total ? len : total;
    }
    c->out[0].data_dependent = true;
    return KILN_OK;
}

static kiln_status infer_reverse_sequence(kn_infer *c) {
    KN_TRY(need_inputs(c, 2));
    const kn_tinfo *x = &c->in[0];
    int ba, ta;
    if (x->rank < 2)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "input must have rank >= 2");
    KN_TRY(axis_in(c->node, kn_attr_int(c->node, "batch_axis", 1), x->rank, &ba));
    KN_TRY(axis_in(c->node, kn_attr_int(c->node, "time_axis", 0), x->rank, &ta));
    if (ba == ta || ba > 1 || ta > 1)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "batch_axis and time_axis must be 0 and 1");
    if (kn_numel(c->in[1].rank, c->in[1].dims) != x->dims[ba])
        return kn_node_error(c->node, KILN_ERR_SHAPE, "sequence_lens must have %lld entries",
                             (long long)x->dims[ba]);
    kn_same_as(&c->out[0], x);
    return KILN_OK;
}

static kiln_status infer_unique(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    const kn_tinfo *x = &c->in[0];
    const kn_attr *a = kn_attr_find(c->node, "axis");
    int64_t n;
    if (a) {
        int ax;
        KN_TRY(axis_in(c->node, a->i, x->rank, &ax));
        kn_same_as(&c->out[0], x);
        n = x->dims[ax];
    } else {
        n = kn_numel(x->rank, x->dims);
        c->out[0].dtype = x->dtype;
        c->out[0].rank = 1;
        c->out[0].dims[0] = n;
    }
    c->out[0].data_dependent = true;
    for (int i = 1; i < c->n_out && i < 4; i++) {
        c->out[i].dtype = KILN_DTYPE_INT64;
        c->out[i].rank = 1;
        c->out[i].dims[0] = n;
        c->out[i].data_dependent = i != 2;
    }
    return KILN_OK;
}

const kn_op_schema kn_ops_tensor[] = {
    {"Identity", "", infer_identity, 0},
    {"Reshape", "", infer_reshape, 1u << 1},
    {"Flatten", "", infer_flatten, 0},
    {"Squeeze", "", infer_squeeze, 1u << 1},
    {"Unsqueeze", "", infer_unsqueeze, 1u << 1},
    {"Transpose", "", infer_transpose, 0},
    {"Concat", "", infer_concat, 0},
    {"Split", "", infer_split, 1u << 1},
    {"Slice", "", infer_slice, 0x1eu},
    {"Gather", "", infer_gather, 0},
    {"GatherElements", "", infer_gather_elements, 0},
    {"GatherND", "", infer_gather_nd, 0},
    {"ScatterND", "", infer_scatter_nd, 0},
    {"ScatterElements", "", infer_scatter_elements, 0},
    {"Scatter", "", infer_scatter_elements, 0},
    {"Expand", "", infer_expand, 1u << 1},
    {"Tile", "", infer_tile, 1u << 1},
    {"Pad", "", infer_pad, (1u << 1) | (1u << 3)},
    {"CenterCropPad", "", infer_pad, 1u << 1},
    {"Shape", "", infer_shape, 0},
    {"Size", "", infer_size, 0},
    {"ConstantOfShape", "", infer_constant_of_shape, 1u << 0},
    {"Range", "", infer_range, 0x7u},
    {"NonZero", "", infer_nonzero, 0},
    {"TopK", "", infer_topk, 1u << 1},
    {"OneHot", "", infer_onehot, 1u << 1},
    {"Trilu", "", infer_trilu, 1u << 1},
    {"DepthToSpace", "", infer_depth_to_space, 0},
    {"SpaceToDepth", "", infer_depth_to_space, 0},
    {"EyeLike", "", infer_eyelike, 0},
    {"RandomUniform", "", infer_random, 0},
    {"RandomNormal", "", infer_random, 0},
    {"RandomUniformLike", "", infer_random, 0},
    {"RandomNormalLike", "", infer_random, 0},
    {"Bernoulli", "", infer_random, 0},
    {"Multinomial", "", infer_random, 0},
    {"Resize", "", infer_resize, 0xeu},
    {"Upsample", "", infer_resize, 1u << 1},
    {"Compress", "", infer_compress, 0},
    {"ReverseSequence", "", infer_reverse_sequence, 0},
    {"Unique", "", infer_unique, 0},
};
const size_t kn_ops_tensor_count = KN_ARRAY_LEN(kn_ops_tensor);
