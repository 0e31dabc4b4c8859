/* ops_nn.c - op schemas (shape and type inference) of the nn family:
 * convolutions, pooling, normalizations, Gemm / MatMul / Einsum, Dropout and
 * the recurrent ops; plus the window and Einsum geometry in ops_nn.h. */
#include <math.h>
#include <string.h>
#include <strings.h>

#include "core/fp8.h"
#include "ops_nn.h"
#include "rotary.h"

#define KILN_MAX_INPUTS_ROT 4

/* ---------------- window geometry ---------------- */

static bool is_same_pad(const char *ap) {
    return strcmp(ap, "SAME_UPPER") == 0 || strcmp(ap, "SAME_LOWER") == 0;
}

/* Read strides, dilations and the kernel into w, checking their lengths. */
static kiln_status window_common(const kn_node *n, int nsp, const int64_t *in,
                                 const int64_t *kernel, kn_window *w) {
    if (nsp < 1 || nsp > KN_WIN_MAX)
        return kn_node_error(n, KILN_ERR_SHAPE, "needs 1 to %d spatial dims, got %d", KN_WIN_MAX,
                             nsp);
    memset(w, 0, sizeof *w);
    w->nsp = nsp;
    size_t ns, nd;
    const int64_t *st = kn_attr_ints(n, "strides", &ns);
    const int64_t *dl = kn_attr_ints(n, "dilations", &nd);
    if ((st && ns != (size_t)nsp) || (dl && nd != (size_t)nsp))
        return kn_node_error(n, KILN_ERR_SHAPE,
                             "strides/dilations must have one value per spatial dim (%d)", nsp);
    for (int i = 0; i < nsp; i++) {
        w->in[i] = in[i];
        w->kernel[i] = kernel[i];
        w->stride[i] = st ? st[i] : 1;
        w->dil[i] = dl ? dl[i] : 1;
        if (w->kernel[i] < 1 || w->stride[i] < 1 || w->dil[i] < 1)
            return kn_node_error(n, KILN_ERR_SHAPE,
                                 "kernel, stride and dilation must be >= 1 (dim %d: %lld, %lld, "
                                 "%lld)",
                                 i, (long long)w->kernel[i], (long long)w->stride[i],
                                 (long long)w->dil[i]);
        if (w->kernel[i] > KN_MAX_WINDOW_ATTR || w->stride[i] > KN_MAX_WINDOW_ATTR ||
            w->dil[i] > KN_MAX_WINDOW_ATTR)
            return kn_node_error(n, KILN_ERR_SHAPE,
                                 "kernel, stride and dilation must be at most %lld (dim %d: %lld, "
                                 "%lld, %lld)",
                                 (long long)KN_MAX_WINDOW_ATTR, i, (long long)w->kernel[i],
                                 (long long)w->stride[i], (long long)w->dil[i]);
    }
    return KILN_OK;
}

/* The dilated extent of window dim i, (kernel - 1) * dilation + 1. */
static kiln_status window_extent(const kn_node *n, const kn_window *w, int i, int64_t *ek) {
    if (kn_mul_i64(w->kernel[i] - 1, w->dil[i], ek) || kn_add_i64(*ek, 1, ek))
        return kn_node_error(n, KILN_ERR_SHAPE, "the dilated window of spatial dim %d overflows",
                             i);
    return KILN_OK;
}

static kiln_status window_overflow(const kn_node *n, int i) {
    return kn_node_error(n, KILN_ERR_SHAPE,
                         "the output size of spatial dim %d overflows (input, pads and window too "
                         "large)",
                         i);
}

static kiln_status read_pads(const kn_node *n, kn_window *w) {
    size_t np;
    const int64_t *pd = kn_attr_ints(n, "pads", &np);
    if (pd && np != (size_t)(2 * w->nsp))
        return kn_node_error(n, KILN_ERR_SHAPE, "pads must have %d values, got %zu", 2 * w->nsp,
                             np);
    for (int i = 0; i < w->nsp; i++) {
        w->pad0[i] = pd ? pd[i] : 0;
        w->pad1[i] = pd ? pd[i + w->nsp] : 0;
        if (w->pad0[i] < 0 || w->pad1[i] < 0)
            return kn_node_error(n, KILN_ERR_SHAPE, "negative pads are not supported");
        if (w->pad0[i] > KN_MAX_WINDOW_ATTR || w->pad1[i] > KN_MAX_WINDOW_ATTR)
            return kn_node_error(n, KILN_ERR_SHAPE,
                                 "pads of spatial dim %d (%lld, %lld) are over the limit of %lld",
                                 i, (long long)w->pad0[i], (long long)w->pad1[i],
                                 (long long)KN_MAX_WINDOW_ATTR);
    }
    return KILN_OK;
}

kiln_status kn_window_forward(const kn_node *n, int nsp, const int64_t *in, const int64_t *kernel,
                              bool ceil_mode, kn_window *w) {
    KN_TRY(window_common(n, nsp, in, kernel, w));
    const char *ap = kn_attr_string(n, "auto_pad", "NOTSET");
    if (!ap[0])
        ap = "NOTSET";
    bool same = is_same_pad(ap), valid = strcmp(ap, "VALID") == 0;
    if (!same && !valid && strcmp(ap, "NOTSET") != 0)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "unknown auto_pad '%s'", ap);
    if (!same && !valid)
        KN_TRY(read_pads(n, w));
    for (int i = 0; i < nsp; i++) {
        int64_t ek, s = w->stride[i], padded, span;
        KN_TRY(window_extent(n, w, i, &ek));
        if (same) {
            w->out[i] = in[i] / s + (in[i] % s != 0); /* ceil(in / s) */
            int64_t total;
            if (kn_mul_i64(w->out[i] > 0 ? w->out[i] - 1 : 0, s, &total) ||
                kn_add_i64(total, ek, &total))
                return window_overflow(n, i);
            total -= in[i];
            if (total < 0)
                total = 0;
            bool upper = strcmp(ap, "SAME_UPPER") == 0;
            w->pad0[i] = upper ? total / 2 : total - total / 2;
            w->pad1[i] = total - w->pad0[i];
            continue;
        }
        if (kn_add_i64(in[i], w->pad0[i], &padded) || kn_add_i64(padded, w->pad1[i], &padded))
            return window_overflow(n, i);
        span = padded - ek;
        if (span < 0)
            return kn_node_error(n, KILN_ERR_SHAPE,
                                 "window %lld (dilated) is larger than the padded input %lld in "
                                 "spatial dim %d",
                                 (long long)ek, (long long)padded, i);
        if (ceil_mode) {
            w->out[i] = span / s + (span % s != 0) + 1;
            /* the last window must start inside the input or its left padding;
             * (out - 1) * s < span + s, which fits */
            if ((w->out[i] - 1) * s >= in[i] + w->pad0[i])
                w->out[i]--;
        } else {
            w->out[i] = span / s + 1;
        }
    }
    return KILN_OK;
}

kiln_status kn_window_transpose(const kn_node *n, int nsp, const int64_t *in,
                                const int64_t *kernel, kn_window *w) {
    KN_TRY(window_common(n, nsp, in, kernel, w));
    const char *ap = kn_attr_string(n, "auto_pad", "NOTSET");
    if (!ap[0])
        ap = "NOTSET";
    bool same = is_same_pad(ap), valid = strcmp(ap, "VALID") == 0;
    if (!same && !valid && strcmp(ap, "NOTSET") != 0)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "unknown auto_pad '%s'", ap);
    size_t nop, nos;
    const int64_t *op = kn_attr_ints(n, "output_padding", &nop);
    const int64_t *os = kn_attr_ints(n, "output_shape", &nos);
    if (op && nop != (size_t)nsp)
        return kn_node_error(n, KILN_ERR_SHAPE, "output_padding must have %d values", nsp);
    if (os && nos != (size_t)nsp && nos != (size_t)nsp + 2)
        return kn_node_error(n, KILN_ERR_SHAPE, "output_shape must have %d values", nsp);
    if (os && nos == (size_t)nsp + 2)
        os += 2;
    if (!same && !valid && !os)
        KN_TRY(read_pads(n, w));
    bool upper = strcmp(ap, "SAME_UPPER") == 0;
    for (int i = 0; i < nsp; i++) {
        int64_t ek, s = w->stride[i];
        KN_TRY(window_extent(n, w, i, &ek));
        int64_t opad = op ? op[i] : 0;
        if (opad < 0 || opad > KN_MAX_WINDOW_ATTR)
            return kn_node_error(n, KILN_ERR_SHAPE,
                                 "output_padding of spatial dim %d is %lld; it must be in [0, %lld]",
                                 i, (long long)opad, (long long)KN_MAX_WINDOW_ATTR);
        if (os && (os[i] < 0 || os[i] > KN_MAX_ELEMENTS))
            return kn_node_error(n, KILN_ERR_SHAPE, "output_shape of spatial dim %d is %lld", i,
                                 (long long)os[i]);
        int64_t full;
        if (kn_mul_i64(s, in[i] - 1, &full) || kn_add_i64(full, opad, &full) ||
            kn_add_i64(full, ek, &full))
            return window_overflow(n, i);
        if (os || same) {
            if (!os && kn_mul_i64(in[i], s, &w->out[i]))
                return window_overflow(n, i);
            if (os)
                w->out[i] = os[i];
            /* a negative total (output_shape past the full result) pads the
             * end, like output_padding: halve with floor division */
            int64_t total = full - w->out[i];
            int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
            w->pad0[i] = upper ? half : total - half;
            w->pad1[i] = total - w->pad0[i];
        } else {
            w->out[i] = full - w->pad0[i] - w->pad1[i];
        }
        if (w->out[i] < 1)
            return kn_node_error(n, KILN_ERR_SHAPE, "output spatial dim %d would be %lld", i,
                                 (long long)w->out[i]);
    }
    return KILN_OK;
}

/* ---------------- Einsum equation ---------------- */

static int einsum_letter(char ch) {
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a';
    if (ch >= 'A' && ch <= 'Z')
        return 26 + (ch - 'A');
    return -1;
}

/* Parse one term ("ab...c") into letters and the ellipsis position. */
static kiln_status einsum_term(const kn_node *n, const char *s, size_t len, int *lab, int *nlab,
                               int *ell_at) {
    *nlab = 0;
    *ell_at = -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ' ')
            continue;
        if (s[i] == '.') {
            if (i + 2 >= len || s[i + 1] != '.' || s[i + 2] != '.' || *ell_at >= 0)
                return kn_node_error(n, KILN_ERR_PARSE, "bad ellipsis in equation");
            *ell_at = *nlab;
            i += 2;
            continue;
        }
        int l = einsum_letter(s[i]);
        if (l < 0 || *nlab >= KILN_MAX_DIMS)
            return kn_node_error(n, KILN_ERR_PARSE, "bad character '%c' in equation", s[i]);
        lab[(*nlab)++] = l;
    }
    return KILN_OK;
}

kiln_status kn_einsum_parse(const kn_node *n, int n_in, const int *rank,
                            const int64_t (*dims)[KILN_MAX_DIMS], kn_einsum *e) {
    const char *eq = kn_attr_string(n, "equation", NULL);
    if (!eq)
        return kn_node_error(n, KILN_ERR_PARSE, "missing attribute 'equation'");
    if (n_in < 1 || n_in > KN_EINSUM_MAX_IN)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "1 to %d inputs supported", KN_EINSUM_MAX_IN);
    memset(e, 0, sizeof *e);
    e->n_in = n_in;
    for (int l = 0; l < KN_EINSUM_LABELS; l++)
        e->size[l] = -1;
    const char *arrow = strstr(eq, "->");
    size_t lhs_len = arrow ? (size_t)(arrow - eq) : strlen(eq);
    int ell_rank[KN_EINSUM_MAX_IN], ell_at[KN_EINSUM_MAX_IN], max_ell = 0;
    int letters[KN_EINSUM_MAX_IN][KILN_MAX_DIMS], nlet[KN_EINSUM_MAX_IN];
    size_t pos = 0;
    for (int k = 0; k < n_in; k++) {
        size_t end = pos;
        while (end < lhs_len && eq[end] != ',')
            end++;
        if ((k < n_in - 1) != (end < lhs_len))
            return kn_node_error(n, KILN_ERR_SHAPE, "equation '%s' does not have %d operands", eq,
                                 n_in);
        KN_TRY(einsum_term(n, eq + pos, end - pos, letters[k], &nlet[k], &ell_at[k]));
        ell_rank[k] = rank[k] - nlet[k];
        if (ell_rank[k] < 0 || (ell_at[k] < 0 && ell_rank[k] != 0))
            return kn_node_error(n, KILN_ERR_SHAPE, "operand %d has rank %d, equation term does not fit",
                                 k, rank[k]);
        if (ell_rank[k] > max_ell)
            max_ell = ell_rank[k];
        pos = end + 1;
    }
    int count[KN_EINSUM_LABELS] = {0};
    for (int k = 0; k < n_in; k++) {
        int d = 0;
        for (int j = 0; j <= nlet[k]; j++) {
            if (j == ell_at[k])
                for (int q = 0; q < ell_rank[k]; q++)
                    e->label[k][d++] = 52 + (max_ell - ell_rank[k]) + q;
            if (j < nlet[k])
                e->label[k][d++] = letters[k][j];
        }
        e->rank[k] = rank[k];
        for (int j = 0; j < rank[k]; j++) {
            int l = e->label[k][j];
            int64_t sz = dims[k][j];
            if (e->size[l] < 0 || e->size[l] == 1)
                e->size[l] = sz;
            else if (sz != 1 && sz != e->size[l])
                return kn_node_error(n, KILN_ERR_SHAPE,
                                     "label of operand %d dim %d has size %lld, elsewhere %lld", k,
                                     j, (long long)sz, (long long)e->size[l]);
            count[l]++;
        }
    }
    if (arrow) {
        int lab[KILN_MAX_DIMS], nl, at;
        KN_TRY(einsum_term(n, arrow + 2, strlen(arrow + 2), lab, &nl, &at));
        if (nl + (at >= 0 ? max_ell : 0) > KILN_MAX_DIMS)
            return kn_node_error(n, KILN_ERR_SHAPE, "output rank too large");
        for (int j = 0; j <= nl; j++) {
            if (j == at)
                for (int q = 0; q < max_ell; q++)
                    e->out_label[e->out_rank++] = 52 + q;
            if (j < nl) {
                if (e->size[lab[j]] < 0)
                    return kn_node_error(n, KILN_ERR_SHAPE, "output label not in any input");
                for (int q = 0; q < e->out_rank; q++)
                    if (e->out_label[q] == lab[j])
                        return kn_node_error(n, KILN_ERR_SHAPE, "repeated output label");
                e->out_label[e->out_rank++] = lab[j];
            }
        }
        if (at < 0 && max_ell > 0) /* numpy keeps broadcast dims only when asked */
            for (int q = 0; q < max_ell; q++)
                if (e->size[52 + q] != 1)
                    return kn_node_error(n, KILN_ERR_SHAPE,
                                         "output must keep the ellipsis dims");
    } else {
        for (int q = 0; q < max_ell; q++)
            e->out_label[e->out_rank++] = 52 + q;
        for (int l = 26; l < 52; l++) /* ASCII order: upper case first */
            if (count[l] == 1 && e->out_rank < KILN_MAX_DIMS)
                e->out_label[e->out_rank++] = l;
        for (int l = 0; l < 26; l++)
            if (count[l] == 1 && e->out_rank < KILN_MAX_DIMS)
                e->out_label[e->out_rank++] = l;
    }
    return KILN_OK;
}

/* ---------------- helpers ---------------- */

static bool is_real(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_DOUBLE || t == KILN_DTYPE_FLOAT16 ||
           t == KILN_DTYPE_BFLOAT16;
}

static kiln_status need_inputs(kn_infer *c, int n) {
    for (int i = 0; i < n; i++)
        if (!kn_has_in(c, i))
            return kn_node_error(c->node, KILN_ERR_SHAPE, "input %d is required", i);
    return KILN_OK;
}

static kiln_status need_real(kn_infer *c, int i) {
    if (!is_real(c->in[i].dtype))
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "input %d has type %s, not a float type",
                             i, kiln_dtype_name(c->in[i].dtype));
    return KILN_OK;
}

static kiln_status need_rank_at_least(kn_infer *c, int i, int r) {
    if (c->in[i].rank < r)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "input %d must have rank >= %d, has %d", i,
                             r, c->in[i].rank);
    return KILN_OK;
}

/* Input i must have exactly `count` elements (a per-channel vector). */
static kiln_status need_numel(kn_infer *c, int i, int64_t count, const char *what) {
    if (kn_has_in(c, i) && kn_numel(c->in[i].rank, c->in[i].dims) != count)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "%s (input %d) must have %lld elements, has %lld",
                             what, i, (long long)count,
                             (long long)kn_numel(c->in[i].rank, c->in[i].dims));
    return KILN_OK;
}

/* Optional input i (a scale or zero point) holds one value, or `per` values
 * (one per row, column or channel). */
static kiln_status need_scalar_or(kn_infer *c, int i, int64_t per, const char *what) {
    if (!kn_has_in(c, i))
        return KILN_OK;
    int64_t n = kn_numel(c->in[i].rank, c->in[i].dims);
    if (n != 1 && n != per)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "%s (input %d) must have 1 or %lld values, has %lld",
                             what, i, (long long)per, (long long)n);
    return KILN_OK;
}

/* ---------------- convolution ---------------- */

/* Output shape of a convolution of input xi by weights wi (bias input bi or
 * -1) into out[0] with type dt. */
static kiln_status conv_shape(kn_infer *c, int xi, int wi, int bi, kiln_dtype dt) {
    const kn_tinfo *x = &c->in[xi], *w = &c->in[wi];
    KN_TRY(need_rank_at_least(c, xi, 3));
    if (w->rank != x->rank)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "weights have rank %d, input rank %d",
                             w->rank, x->rank);
    int64_t group = kn_attr_int(c->node, "group", 1), cin;
    if (group < 1 || group > KN_MAX_WINDOW_ATTR || kn_mul_i64(w->dims[1], group, &cin) ||
        x->dims[1] != cin || w->dims[0] % group != 0)
        return kn_node_error(c->node, KILN_ERR_SHAPE,
                             "channels do not fit: input %lld, weights %lldx%lld, group %lld",
                             (long long)x->dims[1], (long long)w->dims[0], (long long)w->dims[1],
                             (long long)group);
    size_t nk;
    const int64_t *ks = kn_attr_ints(c->node, "kernel_shape", &nk);
    if (ks && (nk != (size_t)(x->rank - 2) || memcmp(ks, w->dims + 2, nk * sizeof *ks) != 0))
        return kn_node_error(c->node, KILN_ERR_SHAPE, "kernel_shape does not match the weights");
    if (bi >= 0)
        KN_TRY(need_numel(c, bi, w->dims[0], "bias"));
    kn_window win;
    KN_TRY(kn_window_forward(c->node, x->rank - 2, x->dims + 2, w->dims + 2, false, &win));
    kn_tinfo *y = &c->out[0];
    y->dtype = dt;
    y->rank = x->rank;
    y->dims[0] = x->dims[0];
    y->dims[1] = w->dims[0];
    memcpy(y->dims + 2, win.out, sizeof(int64_t) * (size_t)win.nsp);
    return KILN_OK;
}

static kiln_status infer_conv(kn_infer *c) {
    KN_TRY(need_inputs(c, 2));
    KN_TRY(need_real(c, 0));
    return conv_shape(c, 0, 1, 2, c->in[0].dtype);
}

static bool is_8bit(kiln_dtype t) { return t == KILN_DTYPE_UINT8 || t == KILN_DTYPE_INT8; }

static kiln_status infer_conv_integer(kn_infer *c) {
    KN_TRY(need_inputs(c, 2));
    if (!is_8bit(c->in[0].dtype) || !is_8bit(c->in[1].dtype))
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "ConvInteger needs 8-bit inputs");
    KN_TRY(conv_shape(c, 0, 1, -1, KILN_DTYPE_INT32));
    KN_TRY(need_scalar_or(c, 2, 1, "x_zero_point"));
    return need_scalar_or(c, 3, c->in[1].dims[0], "w_zero_point");
}

static kiln_status infer_qlinear_conv(kn_infer *c) {
    KN_TRY(need_inputs(c, 8));
    if (!is_8bit(c->in[0].dtype) || !is_8bit(c->in[3].dtype) || !is_8bit(c->in[7].dtype))
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "QLinearConv needs 8-bit tensors");
    KN_TRY(conv_shape(c, 0, 3, 8, c->in[7].dtype));
    int64_t cout = c->in[3].dims[0];
    const char *what[8] = {NULL, "x_scale", "x_zero_point", NULL, "w_scale", "w_zero_point",
                           "y_scale", "y_zero_point"};
    for (int i = 1; i < 8; i++)
        if (what[i])
            KN_TRY(need_scalar_or(c, i, i == 4 || i == 5 ? cout : 1, what[i]));
    return KILN_OK;
}

static kiln_status infer_conv_transpose(kn_infer *c) {
    KN_TRY(need_inputs(c, 2));
    KN_TRY(need_real(c, 0));
    const kn_tinfo *x = &c->in[0], *w = &c->in[1];
    KN_TRY(need_rank_at_least(c, 0, 3));
    if (w->rank != x->rank)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "weights have rank %d, input rank %d",
                             w->rank, x->rank);
    int64_t group = kn_attr_int(c->node, "group", 1), cout;
    if (group < 1 || group > KN_MAX_WINDOW_ATTR || x->dims[1] != w->dims[0] ||
        w->dims[0] % group != 0 || kn_mul_i64(w->dims[1], group, &cout))
        return kn_node_error(c->node, KILN_ERR_SHAPE,
                             "channels do not fit: input %lld, weights %lldx%lld, group %lld",
                             (long long)x->dims[1], (long long)w->dims[0], (long long)w->dims[1],
                             (long long)group);
    KN_TRY(need_numel(c, 2, cout, "bias"));
    kn_window win;
    KN_TRY(kn_window_transpose(c->node, x->rank - 2, x->dims + 2, w->dims + 2, &win));
    kn_tinfo *y = &c->out[0];
    y->dtype = x->dtype;
    y->rank = x->rank;
    y->dims[0] = x->dims[0];
    y->dims[1] = cout;
    memcpy(y->dims + 2, win.out, sizeof(int64_t) * (size_t)win.nsp);
    return KILN_OK;
}

/* ---------------- pooling ---------------- */

static kiln_status infer_pool(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    const kn_tinfo *x = &c->in[0];
    KN_TRY(need_rank_at_least(c, 0, 3));
    bool is_max = strcmp(c->node->op_type, "MaxPool") == 0;
    if (!is_max)
        KN_TRY(need_real(c, 0));
    size_t nk;
    const int64_t *ks = kn_attr_ints(c->node, "kernel_shape", &nk);
    if (!ks || nk != (size_t)(x->rank - 2))
        return kn_node_error(c->node, KILN_ERR_SHAPE, "kernel_shape must have %d values",
                             x->rank - 2);
    if (is_max && kn_attr_int(c->node, "storage_order", 0) != 0 &&
        kn_attr_int(c->node, "storage_order", 0) != 1)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "storage_order must be 0 or 1");
    kn_window win;
    KN_TRY(kn_window_forward(c->node, x->rank - 2, x->dims + 2, ks,
                             kn_attr_int(c->node, "ceil_mode", 0) != 0, &win));
    kn_tinfo *y = &c->out[0];
    y->dtype = x->dtype;
    y->rank = x->rank;
    y->dims[0] = x->dims[0];
    y->dims[1] = x->dims[1];
    memcpy(y->dims + 2, win.out, sizeof(int64_t) * (size_t)win.nsp);
    if (c->n_out > 1) {
        kn_same_as(&c->out[1], y);
        c->out[1].dtype = KILN_DTYPE_INT64;
    }
    return KILN_OK;
}

static kiln_status infer_global_pool(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    KN_TRY(need_rank_at_least(c, 0, 3));
    if (strcmp(c->node->op_type, "GlobalMaxPool") != 0)
        KN_TRY(need_real(c, 0));
    kn_same_as(&c->out[0], &c->in[0]);
    for (int i = 2; i < c->in[0].rank; i++)
        c->out[0].dims[i] = 1;
    return KILN_OK;
}

/* MaxUnpool: X and its MaxPool Indices; the output shape is the optional
 * third input, else the pooled input's shape recovered from the window. */
static kiln_status infer_max_unpool(kn_infer *c) {
    KN_TRY(need_inputs(c, 2));
    KN_TRY(need_rank_at_least(c, 0, 3));
    const kn_tinfo *x = &c->in[0];
    kn_tinfo *y = &c->out[0];
    y->dtype = x->dtype;
    y->rank = x->rank;
    if (kn_has_in(c, 2)) {
        const kn_tinfo *s = &c->in[2];
        if (!s->value || kn_numel(s->rank, s->dims) != x->rank)
            return kn_node_error(c->node, KILN_ERR_SHAPE, "output_shape must have %d values",
                                 x->rank);
        for (int i = 0; i < x->rank; i++)
            y->dims[i] = kn_value_int(s, i);
        return KILN_OK;
    }
    size_t nk;
    const int64_t *ks = kn_attr_ints(c->node, "kernel_shape", &nk);
    if (!ks || nk != (size_t)(x->rank - 2))
        return kn_node_error(c->node, KILN_ERR_SHAPE, "kernel_shape must have %d values",
                             x->rank - 2);
    kn_window w;
    KN_TRY(window_common(c->node, x->rank - 2, x->dims + 2, ks, &w));
    KN_TRY(read_pads(c->node, &w));
    y->dims[0] = x->dims[0];
    y->dims[1] = x->dims[1];
    for (int i = 0; i < w.nsp; i++) {
        int64_t d;
        if (kn_mul_i64(x->dims[2 + i] - 1, w.stride[i], &d) || kn_add_i64(d, ks[i], &d))
            return window_overflow(c->node, i);
        y->dims[2 + i] = d - w.pad0[i] - w.pad1[i];
    }
    return KILN_OK;
}

/* ---------------- GridSample ---------------- */

kiln_status kn_grid_sample_geom(const kn_node *n, const kn_tinfo *x, const kn_tinfo *grid,
                                kn_grid_sample *g) {
    memset(g, 0, sizeof *g);
    const char *mode = kn_attr_string(n, "mode", "bilinear");
    const char *pad = kn_attr_string(n, "padding_mode", "zeros");
    /* opset 16 says bilinear and bicubic, 20 and later linear and cubic */
    if (strcmp(mode, "bilinear") == 0 || strcmp(mode, "linear") == 0)
        g->mode = KN_GS_LINEAR;
    else if (strcmp(mode, "nearest") == 0)
        g->mode = KN_GS_NEAREST;
    else if (strcmp(mode, "bicubic") == 0 || strcmp(mode, "cubic") == 0)
        g->mode = KN_GS_CUBIC;
    else
        return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT,
                             "mode '%s' is not one of linear (bilinear), nearest, cubic (bicubic)",
                             mode);
    if (strcmp(pad, "zeros") == 0)
        g->padding = KN_GS_ZEROS;
    else if (strcmp(pad, "border") == 0)
        g->padding = KN_GS_BORDER;
    else if (strcmp(pad, "reflection") == 0)
        g->padding = KN_GS_REFLECTION;
    else
        return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT,
                             "padding_mode '%s' is not one of zeros, border, reflection", pad);
    g->align_corners = kn_attr_int(n, "align_corners", 0) != 0;
    if (x->rank == 5)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED,
                             "GridSample on a rank-5 (volumetric) input is not supported yet");
    if (x->rank != 4 || grid->rank != 4)
        return kn_node_error(n, KILN_ERR_SHAPE,
                             "X must be [N, C, H, W] and grid [N, H_out, W_out, 2]; got ranks %d "
                             "and %d",
                             x->rank, grid->rank);
    if (grid->dims[3] >= 0 && grid->dims[3] != 2)
        return kn_node_error(n, KILN_ERR_SHAPE, "grid's last dim must be 2 (x, y), is %lld",
                             (long long)grid->dims[3]);
    if (x->dims[0] >= 0 && grid->dims[0] >= 0 && x->dims[0] != grid->dims[0])
        return kn_node_error(n, KILN_ERR_SHAPE, "X has batch %lld, grid %lld",
                             (long long)x->dims[0], (long long)grid->dims[0]);
    g->n = x->dims[0];
    g->c = x->dims[1];
    g->h = x->dims[2];
    g->w = x->dims[3];
    g->ho = grid->dims[1];
    g->wo = grid->dims[2];
    return KILN_OK;
}

static kiln_status infer_grid_sample(kn_infer *c) {
    KN_TRY(need_inputs(c, 2));
    KN_TRY(need_real(c, 0));
    KN_TRY(need_real(c, 1));
    kn_grid_sample g;
    KN_TRY(kn_grid_sample_geom(c->node, &c->in[0], &c->in[1], &g));
    kn_tinfo *y = &c->out[0];
    y->dtype = c->in[0].dtype;
    y->rank = 4;
    y->dims[0] = g.n >= 0 ? g.n : c->in[1].dims[0];
    y->dims[1] = g.c;
    y->dims[2] = g.ho;
    y->dims[3] = g.wo;
    return KILN_OK;
}

/* ---------------- quantization ---------------- */

static bool quant_int(kiln_dtype t) {
    return t == KILN_DTYPE_INT8 || t == KILN_DTYPE_UINT8 || t == KILN_DTYPE_INT16 ||
           t == KILN_DTYPE_UINT16;
}

/* ONNX requires a float8 zero point to be 0 (-0 included); when its values
 * are known (a constant, at build time), anything else is refused rather
 * than ignored as the kernels would. */
static kiln_status quant_f8_zero_point(const kn_node *n, const kn_tinfo *zp) {
    if (!zp || !zp->value || !kn_f8_is((int)zp->dtype))
        return KILN_OK;
    const uint8_t *z = zp->value;
    int64_t count = kn_numel(zp->rank, zp->dims);
    for (int64_t i = 0; i < count; i++)
        if (kn_f8_to_float(z[i], (int)zp->dtype) != 0.0f)
            return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT,
                                 "the zero point of a %s quantization must be 0; element %lld is %g",
                                 kiln_dtype_name(zp->dtype), (long long)i,
                                 (double)kn_f8_to_float(z[i], (int)zp->dtype));
    return KILN_OK;
}

/* Blocked quantization (opset 21): the scale (and zero point) have x's
 * rank and dims but along `axis`, where they have ceil(dim / block). */
static kiln_status quant_blocked(const kn_node *n, const kn_tinfo *x, const kn_tinfo *scale, const kn_tinfo *zp,
                                 int64_t block, kn_quant *q) {
    if (block < 0)
        return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT, "block_size %lld is negative", (long long)block);
    int64_t a = kn_attr_int(n, "axis", 1);
    if (x->rank == 0 || a < -x->rank || a >= x->rank)
        return kn_node_error(n, KILN_ERR_SHAPE, "axis %lld is out of range for rank %d", (long long)a, x->rank);
    int ax = (int)(a < 0 ? a + x->rank : a);
    if (scale->rank != x->rank)
        return kn_node_error(n, KILN_ERR_SHAPE, "blocked quantization needs a scale of x's rank %d, has rank %d",
                             x->rank, scale->rank);
    for (int d = 0; d < x->rank; d++) {
        int64_t want = d == ax && x->dims[d] >= 0 && block > 0
                           ? x->dims[d] / block + (x->dims[d] % block != 0)
                           : x->dims[d];
        if (want >= 0 && scale->dims[d] >= 0 && scale->dims[d] != want)
            return kn_node_error(n, KILN_ERR_SHAPE,
                                 "scale dim %d is %lld; blocks of %lld along axis %d of x need %lld", d,
                                 (long long)scale->dims[d], (long long)block, ax, (long long)want);
    }
    if (zp) {
        bool same = zp->rank == scale->rank;
        for (int d = 0; same && d < zp->rank; d++)
            same = zp->dims[d] == scale->dims[d];
        if (!same)
            return kn_node_error(n, KILN_ERR_SHAPE, "the zero point's shape differs from the scale's");
    }
    q->axis = ax;
    q->channels = x->dims[ax];
    q->inner = kn_numel(x->rank - ax - 1, x->dims + ax + 1);
    q->block = block;
    return KILN_OK;
}

kiln_status kn_quant_geom(const kn_node *n, const kn_tinfo *in, int n_in, bool quantize, kn_quant *q) {
    memset(q, 0, sizeof *q);
    const kn_tinfo *x = &in[0], *scale = &in[1];
    const kn_tinfo *zp = n_in > 2 && in[2].dtype != KILN_DTYPE_UNDEFINED ? &in[2] : NULL;
    if (!is_real(scale->dtype))
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "the scale has type %s, not a float type",
                             kiln_dtype_name(scale->dtype));
    if (quantize) {
        int64_t od = kn_attr_int(n, "output_dtype", 0);
        q->qtype = zp ? zp->dtype : od ? (kiln_dtype)od : KILN_DTYPE_UINT8;
        q->ftype = x->dtype;
        if (zp && od && od != (int64_t)zp->dtype)
            return kn_node_error(n, KILN_ERR_SHAPE, "output_dtype %s differs from the zero point's %s",
                                 kiln_dtype_name((kiln_dtype)od), kiln_dtype_name(zp->dtype));
        if (!is_real(x->dtype))
            return kn_node_error(n, KILN_ERR_UNSUPPORTED, "x has type %s, not a float type",
                                 kiln_dtype_name(x->dtype));
    } else {
        int64_t od = kn_attr_int(n, "output_dtype", 0);
        q->qtype = x->dtype;
        q->ftype = od ? (kiln_dtype)od : scale->dtype;
        if (zp && zp->dtype != x->dtype)
            return kn_node_error(n, KILN_ERR_SHAPE, "the zero point is %s, x is %s",
                                 kiln_dtype_name(zp->dtype), kiln_dtype_name(x->dtype));
        if (!is_real(q->ftype))
            return kn_node_error(n, KILN_ERR_UNSUPPORTED, "output_dtype %s is not a float type",
                                 kiln_dtype_name(q->ftype));
    }
    if (!quant_int(q->qtype) && !kn_f8_is((int)q->qtype) && !(!quantize && q->qtype == KILN_DTYPE_INT32))
        return kn_node_error(n, KILN_ERR_UNSUPPORTED,
                             "quantized type %s is not supported (int8, uint8, int16, uint16, float8%s)",
                             kiln_dtype_name(q->qtype), quantize ? "" : ", int32");
    q->saturate = kn_attr_int(n, "saturate", 1) != 0;
    KN_TRY(quant_f8_zero_point(n, zp));
    int64_t count = kn_numel(scale->rank, scale->dims);
    int64_t block = kn_attr_int(n, "block_size", 0);
    if (block != 0)
        return quant_blocked(n, x, scale, zp, block, q);
    if (scale->rank == 0 || (scale->rank == 1 && count == 1)) {
        /* one scale is per tensor whatever the axis says (ONNX Runtime
         * reads a one-element scale so; quantize_static writes [1]-shaped
         * scales with the default axis 1 on 1-D tensors) */
        q->axis = -1;
    } else if (scale->rank == 1) {
        int ax = 0;
        int64_t a = kn_attr_int(n, "axis", 1);
        if (a < -x->rank || a >= x->rank)
            return kn_node_error(n, KILN_ERR_SHAPE, "axis %lld is out of range for rank %d", (long long)a,
                                 x->rank);
        ax = (int)(a < 0 ? a + x->rank : a);
        if (count == 1 && x->dims[ax] != 1) {
            q->axis = -1;
        } else {
            if (x->dims[ax] >= 0 && count >= 0 && count != x->dims[ax])
                return kn_node_error(n, KILN_ERR_SHAPE, "%lld scales for axis %d of %lld",
                                     (long long)count, ax, (long long)x->dims[ax]);
            q->axis = ax;
            q->channels = x->dims[ax];
            q->inner = kn_numel(x->rank - ax - 1, x->dims + ax + 1);
        }
    } else {
        return kn_node_error(n, KILN_ERR_SHAPE, "the scale must be a scalar or 1-D, has rank %d",
                             scale->rank);
    }
    if (zp && kn_numel(zp->rank, zp->dims) != count)
        return kn_node_error(n, KILN_ERR_SHAPE, "the zero point has %lld values, the scale %lld",
                             (long long)kn_numel(zp->rank, zp->dims), (long long)count);
    return KILN_OK;
}

/* QuantizeLinear and DequantizeLinear: x's shape, the other side's type. */
static kiln_status infer_quant(kn_infer *c) {
    KN_TRY(need_inputs(c, 2));
    bool quantize = strcmp(c->node->op_type, "QuantizeLinear") == 0;
    kn_quant q;
    KN_TRY(kn_quant_geom(c->node, c->in, c->n_in, quantize, &q));
    kn_same_as(&c->out[0], &c->in[0]);
    c->out[0].dtype = quantize ? q.qtype : q.ftype;
    return KILN_OK;
}

static kiln_status infer_dynamic_quantize(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    if (c->in[0].dtype != KILN_DTYPE_FLOAT)
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "x must be float, is %s",
                             kiln_dtype_name(c->in[0].dtype));
    kn_same_as(&c->out[0], &c->in[0]);
    c->out[0].dtype = KILN_DTYPE_UINT8;
    for (int o = 1; o < c->n_out && o < 3; o++) {
        c->out[o].dtype = o == 1 ? KILN_DTYPE_FLOAT : KILN_DTYPE_UINT8;
        c->out[o].rank = 0;
    }
    return KILN_OK;
}

/* ---------------- window functions ---------------- */

/* HannWindow, HammingWindow, BlackmanWindow: size is a scalar known on the
 * host; the output [size] is of output_datatype (float by default). */
static kiln_status infer_window(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    const kn_tinfo *s = &c->in[0];
    if ((s->dtype != KILN_DTYPE_INT64 && s->dtype != KILN_DTYPE_INT32) || kn_numel(s->rank, s->dims) != 1)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "size must be one int32 or int64 value");
    if (!s->value)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "size must be known when the plan is built");
    int64_t n = kn_value_int(s, 0);
    if (n < 0)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "size %lld is negative", (long long)n);
    kiln_dtype t = (kiln_dtype)kn_attr_int(c->node, "output_datatype", KILN_DTYPE_FLOAT);
    if (!is_real(t))
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "output_datatype %s is not a float type",
                             kiln_dtype_name(t));
    c->out[0].dtype = t;
    c->out[0].rank = 1;
    c->out[0].dims[0] = n;
    return KILN_OK;
}

/* ---------------- RoiAlign ---------------- */

kiln_status kn_roi_align_geom(const kn_node *n, const kn_tinfo *x, const kn_tinfo *rois,
                              const kn_tinfo *idx, kn_roi_align *g) {
    memset(g, 0, sizeof *g);
    const char *mode = kn_attr_string(n, "mode", "avg");
    if (strcasecmp(mode, "avg") == 0)
        g->mode = 0;
    else if (strcasecmp(mode, "max") == 0)
        g->mode = 1;
    else
        return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT, "mode '%s' is not avg or max", mode);
    /* half_pixel is the default from opset 16; before, the only behaviour
       was output_half_pixel */
    const char *ctm = kn_attr_string(n, "coordinate_transformation_mode",
                                     n->opset > 0 && n->opset < 16 ? "output_half_pixel" : "half_pixel");
    if (strcmp(ctm, "half_pixel") == 0)
        g->half_pixel = true;
    else if (strcmp(ctm, "output_half_pixel") != 0)
        return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT,
                             "coordinate_transformation_mode '%s' is not half_pixel or "
                             "output_half_pixel",
                             ctm);
    g->oh = kn_attr_int(n, "output_height", 1);
    g->ow = kn_attr_int(n, "output_width", 1);
    g->sampling = kn_attr_int(n, "sampling_ratio", 0);
    g->scale = kn_attr_float(n, "spatial_scale", 1.f);
    if (g->oh < 1 || g->ow < 1 || g->sampling < 0)
        return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT,
                             "output_height %lld, output_width %lld and sampling_ratio %lld must be "
                             "positive (sampling_ratio may be 0)",
                             (long long)g->oh, (long long)g->ow, (long long)g->sampling);
    if (x->rank != 4 || rois->rank != 2 || idx->rank != 1 || (rois->dims[1] >= 0 && rois->dims[1] != 4))
        return kn_node_error(n, KILN_ERR_SHAPE,
                             "X must be [N, C, H, W], rois [R, 4] and batch_indices [R]; got ranks %d, "
                             "%d and %d",
                             x->rank, rois->rank, idx->rank);
    if (rois->dims[0] >= 0 && idx->dims[0] >= 0 && rois->dims[0] != idx->dims[0])
        return kn_node_error(n, KILN_ERR_SHAPE, "%lld rois but %lld batch indices",
                             (long long)rois->dims[0], (long long)idx->dims[0]);
    g->n = x->dims[0];
    g->c = x->dims[1];
    g->h = x->dims[2];
    g->w = x->dims[3];
    g->rois = rois->dims[0] >= 0 ? rois->dims[0] : idx->dims[0];
    return KILN_OK;
}

static kiln_status infer_roi_align(kn_infer *c) {
    KN_TRY(need_inputs(c, 3));
    KN_TRY(need_real(c, 0));
    KN_TRY(need_real(c, 1));
    if (c->in[2].dtype != KILN_DTYPE_INT64)
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "batch_indices must be int64, is %s",
                             kiln_dtype_name(c->in[2].dtype));
    kn_roi_align g;
    KN_TRY(kn_roi_align_geom(c->node, &c->in[0], &c->in[1], &c->in[2], &g));
    kn_tinfo *y = &c->out[0];
    y->dtype = c->in[0].dtype;
    y->rank = 4;
    y->dims[0] = g.rois;
    y->dims[1] = g.c;
    y->dims[2] = g.oh;
    y->dims[3] = g.ow;
    return KILN_OK;
}

/* ---------------- NonMaxSuppression ---------------- */

/* boxes [B, N, 4], scores [B, C, N], then the optional scalars
 * max_output_boxes_per_class, iou_threshold and score_threshold (host
 * values). The output [selected, 3] (batch, class, box) is data-dependent:
 * at most B x C x min(max_output, N) rows. */
static kiln_status infer_nms(kn_infer *c) {
    KN_TRY(need_inputs(c, 2));
    const kn_tinfo *b = &c->in[0], *s = &c->in[1];
    if (b->dtype != KILN_DTYPE_FLOAT || s->dtype != KILN_DTYPE_FLOAT)
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "boxes and scores must be float, are %s and %s",
                             kiln_dtype_name(b->dtype), kiln_dtype_name(s->dtype));
    if (b->rank != 3 || s->rank != 3 || (b->dims[2] >= 0 && b->dims[2] != 4))
        return kn_node_error(c->node, KILN_ERR_SHAPE, "boxes must be [B, N, 4] and scores [B, C, N]");
    if ((b->dims[0] >= 0 && s->dims[0] >= 0 && b->dims[0] != s->dims[0]) ||
        (b->dims[1] >= 0 && s->dims[2] >= 0 && b->dims[1] != s->dims[2]))
        return kn_node_error(c->node, KILN_ERR_SHAPE,
                             "boxes [%lld, %lld, 4] and scores [%lld, %lld, %lld] do not agree on batch "
                             "and box count",
                             (long long)b->dims[0], (long long)b->dims[1], (long long)s->dims[0],
                             (long long)s->dims[1], (long long)s->dims[2]);
    int64_t center = kn_attr_int(c->node, "center_point_box", 0);
    if (center != 0 && center != 1)
        return kn_node_error(c->node, KILN_ERR_INVALID_ARGUMENT, "center_point_box must be 0 or 1, is %lld",
                             (long long)center);
    int64_t per_class = b->dims[1];
    if (kn_has_in(c, 2) && c->in[2].value && kn_numel(c->in[2].rank, c->in[2].dims) >= 1) {
        int64_t m = kn_value_int(&c->in[2], 0);
        m = m < 0 ? 0 : m;
        if (per_class < 0 || m < per_class)
            per_class = m;
    }
    kn_tinfo *y = &c->out[0];
    y->dtype = KILN_DTYPE_INT64;
    y->rank = 2;
    y->dims[0] = s->dims[0] < 0 || s->dims[1] < 0 || per_class < 0 ? -1 : s->dims[0] * s->dims[1] * per_class;
    y->dims[1] = 3;
    y->data_dependent = true;
    return KILN_OK;
}

/* ---------------- NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss ---------------- */

kiln_status kn_loss_geom(const kn_node *n, const kn_tinfo *in, int n_in, kn_loss *g) {
    memset(g, 0, sizeof *g);
    const kn_tinfo *x = &in[0], *t = &in[1];
    const char *red = kn_attr_string(n, "reduction", "mean");
    if (strcmp(red, "none") == 0)
        g->reduction = KN_LOSS_NONE;
    else if (strcmp(red, "sum") == 0)
        g->reduction = KN_LOSS_SUM;
    else if (strcmp(red, "mean") == 0)
        g->reduction = KN_LOSS_MEAN;
    else
        return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT, "reduction '%s' is not none, sum or mean", red);
    const kn_attr *ii = kn_attr_find(n, "ignore_index");
    g->has_ignore = ii != NULL;
    g->ignore = kn_attr_int(n, "ignore_index", 0);
    if (x->rank < 2 || t->rank != x->rank - 1)
        return kn_node_error(n, KILN_ERR_SHAPE,
                             "the input must be [N, C, d1, ...] and the target [N, d1, ...]; got ranks %d "
                             "and %d",
                             x->rank, t->rank);
    if (t->dtype != KILN_DTYPE_INT32 && t->dtype != KILN_DTYPE_INT64)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "the target must be int32 or int64, is %s",
                             kiln_dtype_name(t->dtype));
    for (int d = 0; d < t->rank; d++) {
        int64_t xd = x->dims[d == 0 ? 0 : d + 1], td = t->dims[d];
        if (xd >= 0 && td >= 0 && xd != td)
            return kn_node_error(n, KILN_ERR_SHAPE,
                                 "target dim %d is %lld but the input's matching dim (%d) is %lld", d,
                                 (long long)td, d == 0 ? 0 : d + 1, (long long)xd);
    }
    g->n = x->dims[0];
    g->classes = x->dims[1];
    g->inner = 1;
    for (int d = 2; d < x->rank; d++)
        g->inner = g->inner < 0 || x->dims[d] < 0 ? -1 : g->inner * x->dims[d];
    g->weighted = n_in > 2 && in[2].dtype != KILN_DTYPE_UNDEFINED;
    if (g->weighted) {
        const kn_tinfo *w = &in[2];
        if (w->dtype != x->dtype)
            return kn_node_error(n, KILN_ERR_SHAPE, "the weight is %s but the input is %s",
                                 kiln_dtype_name(w->dtype), kiln_dtype_name(x->dtype));
        if (w->rank != 1 || (w->dims[0] >= 0 && g->classes >= 0 && w->dims[0] != g->classes))
            return kn_node_error(n, KILN_ERR_SHAPE, "the weight must be [C] = [%lld]",
                                 (long long)g->classes);
    }
    return KILN_OK;
}

/* The loss: the target's shape with reduction "none", else a scalar. */
static void loss_output(const kn_infer *c, const kn_loss *g, kn_tinfo *y) {
    y->dtype = c->in[0].dtype;
    y->rank = g->reduction == KN_LOSS_NONE ? c->in[1].rank : 0;
    for (int d = 0; d < y->rank; d++)
        y->dims[d] = c->in[1].dims[d];
}

/* NegativeLogLikelihoodLoss: input [N, C, d...] of log-probabilities,
 * target [N, d...], optional weight [C]. */
static kiln_status infer_nll_loss(kn_infer *c) {
    KN_TRY(need_inputs(c, 2));
    KN_TRY(need_real(c, 0));
    kn_loss g;
    KN_TRY(kn_loss_geom(c->node, c->in, c->n_in, &g));
    loss_output(c, &g, &c->out[0]);
    return KILN_OK;
}

/* SoftmaxCrossEntropyLoss: scores [N, C, d...], labels [N, d...], optional
 * weights [C]; the loss, and optionally log_prob (the scores' shape). */
static kiln_status infer_sce_loss(kn_infer *c) {
    KN_TRY(need_inputs(c, 2));
    KN_TRY(need_real(c, 0));
    kn_loss g;
    KN_TRY(kn_loss_geom(c->node, c->in, c->n_in, &g));
    loss_output(c, &g, &c->out[0]);
    if (c->n_out > 1) {
        c->out[1].dtype = c->in[0].dtype;
        c->out[1].rank = c->in[0].rank;
        memcpy(c->out[1].dims, c->in[0].dims, sizeof c->out[1].dims);
    }
    return KILN_OK;
}

/* ---------------- normalization ---------------- */

static kiln_status infer_batchnorm(kn_infer *c) {
    KN_TRY(need_inputs(c, 5));
    KN_TRY(need_real(c, 0));
    KN_TRY(need_rank_at_least(c, 0, 2));
    /* training_mode=1 (opsets 14+): Y from the batch's own statistics, and
     * outputs 1 and 2 the updated running mean and variance */
    bool training = kn_attr_int(c->node, "training_mode", 0) != 0;
    if (training && c->node->opset > 0 && c->node->opset < 14)
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED,
                             "training_mode needs opset 14 or later");
    for (int i = 1; i < c->n_out; i++)
        if (kn_has_out(c, i) && (!training || i > 2))
            return kn_node_error(c->node, KILN_ERR_UNSUPPORTED,
                                 "output %d exists in training mode only (outputs 1 and 2)", i);
    int64_t ch = c->in[0].dims[1];
    /* opsets 7 and 8: spatial=0 normalizes per activation, the statistics
     * having one value per element of a sample */
    if (c->node->opset < 9 && kn_attr_int(c->node, "spatial", 1) == 0)
        ch = kn_numel(c->in[0].rank - 1, c->in[0].dims + 1);
    KN_TRY(need_numel(c, 1, ch, "scale"));
    KN_TRY(need_numel(c, 2, ch, "bias"));
    KN_TRY(need_numel(c, 3, ch, "mean"));
    KN_TRY(need_numel(c, 4, ch, "var"));
    kn_same_as(&c->out[0], &c->in[0]);
    for (int i = 1; i < 3 && i < c->n_out; i++)
        if (kn_has_out(c, i))
            kn_same_as(&c->out[i], &c->in[2 + i]);
    return KILN_OK;
}

static kiln_status infer_instancenorm(kn_infer *c) {
    KN_TRY(need_inputs(c, 3));
    KN_TRY(need_real(c, 0));
    KN_TRY(need_rank_at_least(c, 0, 3));
    KN_TRY(need_numel(c, 1, c->in[0].dims[1], "scale"));
    KN_TRY(need_numel(c, 2, c->in[0].dims[1], "bias"));
    kn_same_as(&c->out[0], &c->in[0]);
    return KILN_OK;
}

/* Whether t broadcasts (unidirectionally) to the trailing dims of shape. */
static bool broadcasts_to(const kn_tinfo *t, int rank, const int64_t *dims) {
    if (t->rank > rank)
        return false;
    for (int i = 0; i < t->rank; i++) {
        int64_t d = t->dims[t->rank - 1 - i];
        if (d != 1 && d != dims[rank - 1 - i])
            return false;
    }
    return true;
}

static kiln_status infer_layernorm(kn_infer *c) {
    KN_TRY(need_inputs(c, 2));
    KN_TRY(need_real(c, 0));
    const kn_tinfo *x = &c->in[0];
    int axis;
    KN_TRY(kn_axis(c, kn_attr_int(c->node, "axis", -1), x->rank, &axis));
    for (int i = 1; i < 3; i++)
        if (kn_has_in(c, i) && !broadcasts_to(&c->in[i], x->rank - axis, x->dims + axis))
            return kn_node_error(c->node, KILN_ERR_SHAPE,
                                 "%s does not broadcast to the normalized dims",
                                 i == 1 ? "scale" : "bias");
    kn_same_as(&c->out[0], x);
    kiln_dtype stash = (kiln_dtype)kn_attr_int(c->node, "stash_type", KILN_DTYPE_FLOAT);
    if (!is_real(stash))
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "stash_type %d is not a float type",
                             (int)stash);
    for (int k = 1; k < 3 && k < c->n_out; k++) {
        kn_same_as(&c->out[k], x);
        c->out[k].dtype = stash;
        for (int i = axis; i < x->rank; i++)
            c->out[k].dims[i] = 1;
    }
    return KILN_OK;
}

/* RMSNormalization (opset 23): Y = X / sqrt(mean(X^2) + eps) * scale over
 * the dims from axis on. */
static kiln_status infer_rmsnorm(kn_infer *c) {
    KN_TRY(need_inputs(c, 2));
    KN_TRY(need_real(c, 0));
    const kn_tinfo *x = &c->in[0];
    int axis;
    KN_TRY(kn_axis(c, kn_attr_int(c->node, "axis", -1), x->rank, &axis));
    if (!broadcasts_to(&c->in[1], x->rank - axis, x->dims + axis))
        return kn_node_error(c->node, KILN_ERR_SHAPE, "scale does not broadcast to the normalized dims");
    kn_same_as(&c->out[0], x);
    return KILN_OK;
}

/* RotaryEmbedding: ONNX (opset 23) reads X, cos_cache, sin_cache,
 * position_ids?; com.microsoft reads X, position_ids, cos_cache, sin_cache. */
kiln_status kn_rotary_geometry(const kn_node *n, int n_in, const int *rank,
                               const int64_t (*dims)[KILN_MAX_DIMS], kn_rotary *g) {
    memset(g, 0, sizeof *g);
    bool ms = strcmp(n->domain, KN_MS_DOMAIN) == 0;
    g->x = 0;
    g->cos = ms ? 2 : 1;
    g->sin = ms ? 3 : 2;
    g->pos = ms ? 1 : 3;
    for (int i = 0; i < 3; i++) {
        int slot = i == 0 ? g->x : i == 1 ? g->cos : g->sin;
        if (slot >= n_in || rank[slot] < 0)
            return kn_node_error(n, KILN_ERR_SHAPE, "input %d (%s) is required", slot,
                                 i == 0 ? "X" : i == 1 ? "cos_cache" : "sin_cache");
    }
    if (g->pos >= n_in || rank[g->pos] < 0) {
        if (ms)
            return kn_node_error(n, KILN_ERR_SHAPE, "input 1 (position_ids) is required");
        g->pos = -1;
    }
    if (ms && (kn_attr_int(n, "is_packed_batching", 0) != 0 ||
               fabsf(kn_attr_float(n, "scale", 1.f) - 1.f) > 0.f))
        return kn_node_error(n, KILN_ERR_UNSUPPORTED,
                             "packed batching and a scale other than 1 are not supported");
    g->interleaved = kn_attr_int(n, "interleaved", 0) != 0;
    int64_t heads = kn_attr_int(n, "num_heads", 0), rot = kn_attr_int(n, "rotary_embedding_dim", 0);
    const int64_t *xd = dims[g->x], *cd = dims[g->cos], *sd = dims[g->sin];
    int cr = rank[g->cos];
    if (cr != rank[g->sin] || memcmp(cd, sd, (size_t)cr * sizeof *cd) != 0)
        return kn_node_error(n, KILN_ERR_SHAPE, "cos_cache and sin_cache differ in shape");
    if (cr < 2 || cd[cr - 1] < 1)
        return kn_node_error(n, KILN_ERR_SHAPE, "the caches must have rank 2 or 3, have rank %d",
                             cr);
    g->cache_stride = cd[cr - 1];
    int64_t row_heads = kn_attr_int(n, "kiln_row_heads", 0);
    int64_t h0 = kn_attr_int(n, "kiln_head_offset", 0);
    bool y_first = kn_attr_int(n, "kiln_heads_first_out", 0) != 0;
    if (rank[g->x] == 4) {
        if (row_heads || h0 || y_first)
            return kn_node_error(n, KILN_ERR_SHAPE, "kiln's row views need a 3-D X");
        g->heads_first = true;
        g->batch = xd[0];
        g->heads = xd[1];
        g->seq = xd[2];
        g->head = xd[3];
        g->x_sh = g->seq * g->head;
        g->x_ss = g->head;
        g->x_sb = g->heads * g->x_sh;
    } else if (rank[g->x] == 3) {
        g->batch = xd[0];
        g->seq = xd[1];
        if (heads <= 0 && (row_heads || h0 || y_first))
            return kn_node_error(n, KILN_ERR_SHAPE, "kiln's row views need num_heads");
        if (heads <= 0) /* the head size from the caches (com.microsoft's rule) */
            heads = rot > 0 ? 0 : xd[2] / (2 * g->cache_stride);
        if (row_heads <= 0)
            row_heads = heads;
        if (heads <= 0 || xd[2] % row_heads != 0 || h0 < 0 || h0 + heads > row_heads)
            return kn_node_error(n, KILN_ERR_SHAPE,
                                 "num_heads %lld (from head %lld of %lld) does not fit the "
                                 "hidden size %lld",
                                 (long long)heads, (long long)h0, (long long)row_heads,
                                 (long long)xd[2]);
        g->heads = heads;
        g->head = xd[2] / row_heads;
        g->x_off = h0 * g->head;
        g->x_sh = g->head;
        g->x_ss = xd[2];
        g->x_sb = g->seq * xd[2];
    } else {
        return kn_node_error(n, KILN_ERR_SHAPE, "X must have rank 3 or 4, has %d", rank[g->x]);
    }
    if (y_first) { /* [B, H, S, D] */
        g->y_ss = g->head;
        g->y_sh = g->seq * g->head;
        g->y_sb = g->heads * g->y_sh;
    } else if (g->heads_first) {
        g->y_sb = g->x_sb, g->y_ss = g->x_ss, g->y_sh = g->x_sh;
    } else { /* [B, S, H * D] */
        g->y_sh = g->head;
        g->y_ss = g->heads * g->head;
        g->y_sb = g->seq * g->y_ss;
    }
    g->rot = rot > 0 ? rot : g->head;
    if (g->rot % 2 != 0 || g->rot > g->head || g->rot / 2 > g->cache_stride)
        return kn_node_error(n, KILN_ERR_SHAPE,
                             "rotary_embedding_dim %lld must be even, at most the head size %lld "
                             "and at most twice the caches' last dim %lld",
                             (long long)g->rot, (long long)g->head, (long long)g->cache_stride);
    if (g->pos < 0) {
        if (cr != 3 || (cd[0] != g->batch && cd[0] != 1) || cd[1] != g->seq)
            return kn_node_error(n, KILN_ERR_SHAPE,
                                 "without position_ids the caches must be [batch %lld (or 1), "
                                 "sequence %lld, rotary dim / 2]",
                                 (long long)g->batch, (long long)g->seq);
        g->cache_batch = cd[0];
        g->pos_mode = KN_ROT_POS_NONE;
        g->cache_rows = g->seq;
        return KILN_OK;
    }
    if (cr != 2)
        return kn_node_error(n, KILN_ERR_SHAPE,
                             "with position_ids the caches must be [positions, rotary dim / 2]");
    g->cache_rows = cd[0];
    const int64_t *pd = dims[g->pos];
    int pr = rank[g->pos];
    int64_t pn = kn_numel(pr, pd);
    if (pr == 2 && pd[0] == g->batch && pd[1] == g->seq)
        g->pos_mode = KN_ROT_POS_IDS;
    else if (ms && pn == 1 && pr <= 1)
        g->pos_mode = KN_ROT_POS_OFFSET;
    else
        return kn_node_error(n, KILN_ERR_SHAPE,
                             "position_ids must be [batch %lld, sequence %lld]%s",
                             (long long)g->batch, (long long)g->seq, ms ? " or one offset" : "");
    return KILN_OK;
}

static kiln_status infer_rotary(kn_infer *c) {
    int rank[KILN_MAX_INPUTS_ROT];
    int64_t dims[KILN_MAX_INPUTS_ROT][KILN_MAX_DIMS];
    int n_in = c->n_in < KILN_MAX_INPUTS_ROT ? c->n_in : KILN_MAX_INPUTS_ROT;
    for (int i = 0; i < n_in; i++) {
        rank[i] = kn_has_in(c, i) ? c->in[i].rank : -1;
        memcpy(dims[i], c->in[i].dims, sizeof dims[i]);
    }
    kn_rotary g;
    KN_TRY(kn_rotary_geometry(c->node, n_in, rank, (const int64_t (*)[KILN_MAX_DIMS])dims, &g));
    KN_TRY(need_real(c, g.x));
    if (c->in[g.cos].dtype != c->in[g.x].dtype || c->in[g.sin].dtype != c->in[g.x].dtype)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "the caches must have X's type %s",
                             kiln_dtype_name(c->in[g.x].dtype));
    if (g.pos >= 0 && c->in[g.pos].dtype != KILN_DTYPE_INT64 &&
        c->in[g.pos].dtype != KILN_DTYPE_INT32)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "position_ids must be int64 or int32");
    kn_same_as(&c->out[0], &c->in[g.x]);
    if (kn_attr_int(c->node, "kiln_heads_first_out", 0)) { /* a view's Y: [B, H, S, D] */
        c->out[0].rank = 4;
        c->out[0].dims[0] = g.batch;
        c->out[0].dims[1] = g.heads;
        c->out[0].dims[2] = g.seq;
        c->out[0].dims[3] = g.head;
    } else if (!g.heads_first) {
        c->out[0].dims[2] = g.heads * g.head;
    }
    return KILN_OK;
}

static kiln_status infer_groupnorm(kn_infer *c) {
    KN_TRY(need_inputs(c, 3));
    KN_TRY(need_real(c, 0));
    KN_TRY(need_rank_at_least(c, 0, 2));
    int64_t g = kn_attr_int(c->node, "num_groups", 0), ch = c->in[0].dims[1];
    if (g < 1 || ch % g != 0)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "num_groups %lld does not divide %lld channels",
                             (long long)g, (long long)ch);
    for (int i = 1; i < 3; i++) {
        int64_t k = kn_numel(c->in[i].rank, c->in[i].dims);
        if (k != ch && k != g)
            return kn_node_error(c->node, KILN_ERR_SHAPE,
                                 "%s must have one value per channel or per group",
                                 i == 1 ? "scale" : "bias");
    }
    kn_same_as(&c->out[0], &c->in[0]);
    return KILN_OK;
}

static kiln_status infer_same_real(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    KN_TRY(need_real(c, 0));
    kn_same_as(&c->out[0], &c->in[0]);
    return KILN_OK;
}

static kiln_status infer_lpnorm(kn_infer *c) {
    KN_TRY(infer_same_real(c));
    int axis;
    KN_TRY(kn_axis(c, kn_attr_int(c->node, "axis", -1), c->in[0].rank, &axis));
    int64_t p = kn_attr_int(c->node, "p", 2);
    if (p != 1 && p != 2)
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "p must be 1 or 2, got %lld",
                             (long long)p);
    return KILN_OK;
}

static kiln_status infer_lrn(kn_infer *c) {
    KN_TRY(infer_same_real(c));
    KN_TRY(need_rank_at_least(c, 0, 3));
    if (kn_attr_int(c->node, "size", 0) < 1)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "attribute 'size' must be >= 1");
    return KILN_OK;
}

static kiln_status infer_mvn(kn_infer *c) {
    KN_TRY(infer_same_real(c));
    size_t na;
    const int64_t *axes = kn_attr_ints(c->node, "axes", &na);
    for (size_t i = 0; axes && i < na; i++) {
        int a;
        KN_TRY(kn_axis(c, axes[i], c->in[0].rank, &a));
    }
    if (!axes && c->in[0].rank < 4)
        return kn_node_error(c->node, KILN_ERR_SHAPE,
                             "the default axes [0, 2, 3] need a rank >= 4 input");
    return KILN_OK;
}

/* ---------------- Gemm, MatMul, Einsum ---------------- */

static kiln_status infer_gemm(kn_infer *c) {
    KN_TRY(need_inputs(c, 2));
    const kn_tinfo *a = &c->in[0], *b = &c->in[1];
    if (a->rank != 2 || b->rank != 2)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "A and B must be matrices (ranks %d, %d)",
                             a->rank, b->rank);
    if (a->dtype != b->dtype)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "A and B have different types");
    bool ta = kn_attr_int(c->node, "transA", 0) != 0, tb = kn_attr_int(c->node, "transB", 0) != 0;
    int64_t m = ta ? a->dims[1] : a->dims[0], k = ta ? a->dims[0] : a->dims[1];
    int64_t kb = tb ? b->dims[1] : b->dims[0], n = tb ? b->dims[0] : b->dims[1];
    if (k != kb)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "inner dims differ: %lld and %lld",
                             (long long)k, (long long)kb);
    kn_tinfo *y = &c->out[0];
    y->dtype = a->dtype;
    y->rank = 2;
    y->dims[0] = m;
    y->dims[1] = n;
    if (kn_has_in(c, 2) && !broadcasts_to(&c->in[2], 2, y->dims))
        return kn_node_error(c->node, KILN_ERR_SHAPE, "C does not broadcast to %lldx%lld",
                             (long long)m, (long long)n);
    return KILN_OK;
}

/* numpy matmul shape of a @ b into y. */
static kiln_status matmul_shape(kn_infer *c, const kn_tinfo *a, const kn_tinfo *b, kn_tinfo *y) {
    if (a->rank < 1 || b->rank < 1)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "MatMul inputs must have rank >= 1");
    kn_tinfo a2 = *a, b2 = *b;
    if (a->rank == 1) {
        a2.rank = 2;
        a2.dims[0] = 1;
        a2.dims[1] = a->dims[0];
    }
    if (b->rank == 1) {
        b2.rank = 2;
        b2.dims[0] = b->dims[0];
        b2.dims[1] = 1;
    }
    int64_t m = a2.dims[a2.rank - 2], k = a2.dims[a2.rank - 1];
    int64_t kb = b2.dims[b2.rank - 2], n = b2.dims[b2.rank - 1];
    if (k != kb)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "inner dims differ: %lld and %lld",
                             (long long)k, (long long)kb);
    kn_tinfo ba = a2, bb = b2;
    ba.rank -= 2;
    bb.rank -= 2;
    KN_TRY(kn_broadcast(c, &ba, &bb, y));
    if (a->rank != 1)
        y->dims[y->rank++] = m;
    if (b->rank != 1)
        y->dims[y->rank++] = n;
    return KILN_OK;
}

static kiln_status infer_matmul(kn_infer *c) {
    KN_TRY(need_inputs(c, 2));
    if (c->in[0].dtype != c->in[1].dtype)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "A and B have different types");
    KN_TRY(matmul_shape(c, &c->in[0], &c->in[1], &c->out[0]));
    c->out[0].dtype = c->in[0].dtype;
    return KILN_OK;
}

static kiln_status infer_matmul_integer(kn_infer *c) {
    KN_TRY(need_inputs(c, 2));
    KN_TRY(matmul_shape(c, &c->in[0], &c->in[1], &c->out[0]));
    c->out[0].dtype = KILN_DTYPE_INT32;
    const kn_tinfo *a = &c->in[0], *b = &c->in[1];
    KN_TRY(need_scalar_or(c, 2, a->rank == 1 ? 1 : a->dims[a->rank - 2], "a_zero_point"));
    return need_scalar_or(c, 3, b->rank == 1 ? 1 : b->dims[b->rank - 1], "b_zero_point");
}

static kiln_status infer_qlinear_matmul(kn_infer *c) {
    KN_TRY(need_inputs(c, 8));
    KN_TRY(matmul_shape(c, &c->in[0], &c->in[3], &c->out[0]));
    c->out[0].dtype = c->in[7].dtype;
    const kn_tinfo *a = &c->in[0], *b = &c->in[3];
    int64_t m = a->rank == 1 ? 1 : a->dims[a->rank - 2], n = b->rank == 1 ? 1 : b->dims[b->rank - 1];
    KN_TRY(need_scalar_or(c, 1, m, "a_scale"));
    KN_TRY(need_scalar_or(c, 2, m, "a_zero_point"));
    KN_TRY(need_scalar_or(c, 4, n, "b_scale"));
    KN_TRY(need_scalar_or(c, 5, n, "b_zero_point"));
    KN_TRY(need_scalar_or(c, 6, 1, "y_scale"));
    return need_scalar_or(c, 7, 1, "y_zero_point");
}

static kiln_status infer_einsum(kn_infer *c) {
    if (c->n_in < 1 || c->n_in > KN_EINSUM_MAX_IN)
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "1 to %d inputs supported",
                             KN_EINSUM_MAX_IN);
    KN_TRY(need_inputs(c, c->n_in));
    int rank[KN_EINSUM_MAX_IN];
    int64_t dims[KN_EINSUM_MAX_IN][KILN_MAX_DIMS];
    for (int i = 0; i < c->n_in; i++) {
        if (c->in[i].dtype != c->in[0].dtype)
            return kn_node_error(c->node, KILN_ERR_SHAPE, "inputs have different types");
        rank[i] = c->in[i].rank;
        memcpy(dims[i], c->in[i].dims, sizeof dims[i]);
    }
    kn_einsum e;
    KN_TRY(kn_einsum_parse(c->node, c->n_in, rank, (const int64_t(*)[KILN_MAX_DIMS])dims, &e));
    kn_tinfo *y = &c->out[0];
    y->dtype = c->in[0].dtype;
    y->rank = e.out_rank;
    for (int i = 0; i < e.out_rank; i++)
        y->dims[i] = e.size[e.out_label[i]];
    return KILN_OK;
}

/* ---------------- Attention ---------------- */

/* ---------------- RNN / GRU / LSTM geometry ---------------- */

static const struct {
    const char *name;
    int act;
    bool uses_alpha, uses_beta;
    float alpha, beta;
} rnn_acts[] = {
    {"Relu", KN_RNN_RELU, false, false, 0, 0},
    {"Tanh", KN_RNN_TANH, false, false, 0, 0},
    {"Sigmoid", KN_RNN_SIGMOID, false, false, 0, 0},
    {"Affine", KN_RNN_AFFINE, true, true, 1.f, 0.f},
    {"LeakyRelu", KN_RNN_LEAKY, true, false, 0.01f, 0},
    {"ThresholdedRelu", KN_RNN_THRESH, true, false, 1.f, 0},
    {"ScaledTanh", KN_RNN_SCALED_TANH, true, true, 1.f, 1.f},
    {"HardSigmoid", KN_RNN_HARD_SIGMOID, true, true, 0.2f, 0.5f},
    {"Elu", KN_RNN_ELU, true, false, 1.f, 0},
    {"Softsign", KN_RNN_SOFTSIGN, false, false, 0, 0},
    {"Softplus", KN_RNN_SOFTPLUS, false, false, 0, 0},
};

kiln_status kn_rnn_setup(const kn_node *node, const int64_t *xd, const int64_t *wd, kn_rnn *g) {
    memset(g, 0, sizeof *g);
    const char *op = node->op_type;
    g->kind = strcmp(op, "LSTM") == 0 ? KN_LSTM : strcmp(op, "GRU") == 0 ? KN_GRU : KN_RNN;
    g->gates = g->kind == KN_LSTM ? 4 : g->kind == KN_GRU ? 3 : 1;
    g->nact = g->kind == KN_LSTM ? 3 : g->kind == KN_GRU ? 2 : 1;
    g->layout1 = kn_attr_int(node, "layout", 0) != 0;
    g->seq = g->layout1 ? xd[1] : xd[0];
    g->batch = g->layout1 ? xd[0] : xd[1];
    g->input = xd[2];
    g->dirs = wd[0];
    if (g->dirs < 1 || g->dirs > 2 || wd[1] % g->gates || wd[2] != g->input)
        return kn_node_error(node, KILN_ERR_SHAPE,
                             "W [%lld, %lld, %lld] does not fit %d gates and input size %lld",
                             (long long)wd[0], (long long)wd[1], (long long)wd[2], g->gates,
                             (long long)g->input);
    g->hidden = wd[1] / g->gates;
    g->reverse_only = strcmp(kn_attr_string(node, "direction", "forward"), "reverse") == 0;
    g->linear_before_reset = kn_attr_int(node, "linear_before_reset", 0) != 0;
    g->input_forget = kn_attr_int(node, "input_forget", 0) != 0;
    g->clip = kn_attr_float(node, "clip", 0.f);
    const kn_attr *acts = kn_attr_find(node, "activations");
    size_t na, nb;
    const float *alphas = kn_attr_floats(node, "activation_alpha", &na);
    const float *betas = kn_attr_floats(node, "activation_beta", &nb);
    size_t ia = 0, ib = 0;
    static const char *const dflt[3][3] = {{"Tanh"}, {"Sigmoid", "Tanh"}, {"Sigmoid", "Tanh", "Tanh"}};
    for (int d = 0; d < g->dirs; d++)
        for (int k = 0; k < g->nact; k++) {
            const char *name = dflt[g->kind][k];
            size_t idx = (size_t)(d * g->nact + k);
            if (acts && acts->type == KN_ATTR_STRINGS) {
                if (idx >= acts->n)
                    return kn_node_error(node, KILN_ERR_SHAPE,
                                         "activations needs %d names per direction", g->nact);
                name = acts->strings[idx];
            }
            kn_rnn_fn *f = &g->f[d][k];
            f->act = -1;
            for (size_t t = 0; t < KN_ARRAY_LEN(rnn_acts); t++) {
                if (strcasecmp(name, rnn_acts[t].name) != 0)
                    continue;
                f->act = rnn_acts[t].act;
                f->alpha = rnn_acts[t].alpha;
                f->beta = rnn_acts[t].beta;
                if (rnn_acts[t].uses_alpha && alphas && ia < na)
                    f->alpha = alphas[ia++];
                if (rnn_acts[t].uses_beta && betas && ib < nb)
                    f->beta = betas[ib++];
            }
            if (f->act < 0)
                return kn_node_error(node, KILN_ERR_UNSUPPORTED, "unknown activation '%s'", name);
        }
    return KILN_OK;
}


kiln_status kn_attention_geom(const kn_node *n, int n_in, const kn_tinfo *in, kn_attention *a) {
    memset(a, 0, sizeof *a);
    const kn_tinfo *q = &in[0], *k = &in[1], *v = &in[2];
    if (q->rank != k->rank || q->rank != v->rank || (q->rank != 3 && q->rank != 4))
        return kn_node_error(n, KILN_ERR_SHAPE, "Q, K and V must all be 3-D or all 4-D");
    if (n_in > 6 && in[6].dtype != KILN_DTYPE_UNDEFINED)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "nonpad_kv_seqlen is not supported");
    a->rank3 = q->rank == 3;
    a->batch = q->dims[0];
    if (a->rank3) {
        a->q_heads = kn_attr_int(n, "q_num_heads", 0);
        a->kv_heads = kn_attr_int(n, "kv_num_heads", 0);
        if (a->q_heads < 1 || a->kv_heads < 1 || q->dims[2] % a->q_heads ||
            k->dims[2] % a->kv_heads || v->dims[2] % a->kv_heads)
            return kn_node_error(n, KILN_ERR_SHAPE,
                                 "3-D inputs need q_num_heads and kv_num_heads dividing the hidden sizes");
        a->q_seq = q->dims[1];
        a->kv_seq = k->dims[1];
        a->head = q->dims[2] / a->q_heads;
        a->v_head = v->dims[2] / a->kv_heads;
        if (k->dims[2] / a->kv_heads != a->head || v->dims[1] != a->kv_seq)
            return kn_node_error(n, KILN_ERR_SHAPE, "K or V does not fit Q");
    } else {
        a->q_heads = q->dims[1];
        a->kv_heads = k->dims[1];
        a->q_seq = q->dims[2];
        a->kv_seq = k->dims[2];
        a->head = q->dims[3];
        a->v_head = v->dims[3];
        if (k->dims[3] != a->head || v->dims[1] != a->kv_heads || v->dims[2] != a->kv_seq)
            return kn_node_error(n, KILN_ERR_SHAPE, "K or V does not fit Q");
    }
    if (k->dims[0] != a->batch || v->dims[0] != a->batch || a->kv_heads < 1 ||
        a->q_heads % a->kv_heads)
        return kn_node_error(n, KILN_ERR_SHAPE,
                             "batch sizes differ, or %lld query heads are not a multiple of %lld "
                             "key/value heads",
                             (long long)a->q_heads, (long long)a->kv_heads);
    bool has_pk = n_in > 4 && in[4].dtype != KILN_DTYPE_UNDEFINED;
    bool has_pv = n_in > 5 && in[5].dtype != KILN_DTYPE_UNDEFINED;
    if (has_pk != has_pv)
        return kn_node_error(n, KILN_ERR_SHAPE, "past_key and past_value come together");
    if (has_pk) {
        const kn_tinfo *pk = &in[4], *pv = &in[5];
        if (pk->rank != 4 || pv->rank != 4 || pk->dims[0] != a->batch ||
            pk->dims[1] != a->kv_heads || pk->dims[3] != a->head || pv->dims[0] != a->batch ||
            pv->dims[1] != a->kv_heads || pv->dims[2] != pk->dims[2] || pv->dims[3] != a->v_head)
            return kn_node_error(n, KILN_ERR_SHAPE, "past_key or past_value does not fit");
        a->past = pk->dims[2];
    }
    a->total = a->past + a->kv_seq;
    if (n_in > 3 && in[3].dtype != KILN_DTYPE_UNDEFINED) {
        const kn_tinfo *m = &in[3];
        const int64_t full[4] = {a->batch, a->q_heads, a->q_seq, a->total};
        if (m->rank < 1 || m->rank > 4 || m->dims[m->rank - 1] > a->total)
            return kn_node_error(n, KILN_ERR_SHAPE, "attn_mask does not fit the scores");
        for (int i = 2; i <= m->rank; i++) {
            int64_t d = m->dims[m->rank - i];
            if (d != 1 && d != full[4 - i])
                return kn_node_error(n, KILN_ERR_SHAPE,
                                     "attn_mask does not broadcast to the scores");
        }
    }
    a->scale = kn_attr_float(n, "scale", 0.f);
    if (!kn_attr_find(n, "scale"))
        a->scale = (float)(1.0 / sqrt((double)a->head));
    a->softcap = kn_attr_float(n, "softcap", 0.f);
    a->causal = kn_attr_int(n, "is_causal", 0) != 0;
    a->qk_mode = (int)kn_attr_int(n, "qk_matmul_output_mode", 0);
    return KILN_OK;
}

static kiln_status infer_attention(kn_infer *c) {
    KN_TRY(need_inputs(c, 3));
    KN_TRY(need_real(c, 0));
    kn_attention a;
    KN_TRY(kn_attention_geom(c->node, c->n_in, c->in, &a));
    if (kn_has_out(c, 3) && a.qk_mode != 3 && (a.qk_mode != 0 || a.softcap > 0.f))
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED,
                             "qk_matmul_output_mode %d is not supported (0 without softcap, or 3)",
                             a.qk_mode);
    kiln_dtype dt = c->in[0].dtype;
    kn_tinfo *y = &c->out[0];
    y->dtype = dt;
    if (a.rank3) {
        y->rank = 3;
        y->dims[0] = a.batch, y->dims[1] = a.q_seq;
        if (kn_mul_i64(a.q_heads, a.v_head, &y->dims[2]))
            return kn_node_error(c->node, KILN_ERR_SHAPE, "%lld heads of %lld overflow",
                                 (long long)a.q_heads, (long long)a.v_head);
    } else {
        y->rank = 4;
        y->dims[0] = a.batch, y->dims[1] = a.q_heads, y->dims[2] = a.q_seq, y->dims[3] = a.v_head;
    }
    const int64_t shapes[3][4] = {{a.batch, a.kv_heads, a.total, a.head},
                                  {a.batch, a.kv_heads, a.total, a.v_head},
                                  {a.batch, a.q_heads, a.q_seq, a.total}};
    for (int k = 1; k < 4 && k < c->n_out; k++) {
        c->out[k].dtype = dt;
        c->out[k].rank = 4;
        memcpy(c->out[k].dims, shapes[k - 1], sizeof shapes[k - 1]);
    }
    return KILN_OK;
}

/* ---------------- Dropout ---------------- */

/* Dropout is the identity at inference. In training mode (input 2 true)
 * with a ratio r in [0, 1) it zeroes each element with probability r and
 * scales the others by 1/(1-r), the mask telling which were kept; the
 * draws are kiln's counter-based generator's (graph/random.h), keyed by the
 * seed attribute. */
static kiln_status infer_dropout(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    if (kn_has_in(c, 2) && c->in[2].value && kn_value_int(&c->in[2], 0) != 0) {
        double ratio = kn_has_in(c, 1) && c->in[1].value ? kn_value_double(&c->in[1], 0) : 0.5;
        if (!(ratio >= 0.0 && ratio < 1.0))
            return kn_node_error(c->node, KILN_ERR_SHAPE, "ratio %g is not in [0, 1)", ratio);
    }
    kn_same_as(&c->out[0], &c->in[0]);
    if (c->n_out > 1) {
        kn_same_as(&c->out[1], &c->in[0]);
        if (c->node->opset == 0 || c->node->opset >= 10)
            c->out[1].dtype = KILN_DTYPE_BOOL;
    }
    return KILN_OK;
}

/* ---------------- recurrent ops ---------------- */

/* RNN (gates 1), GRU (3), LSTM (4): X [seq, batch, in] (layout 0) or
 * [batch, seq, in] (layout 1); W [dirs, gates*hidden, in]. */
static kiln_status infer_recurrent(kn_infer *c) {
    KN_TRY(need_inputs(c, 3));
    KN_TRY(need_real(c, 0));
    const char *op = c->node->op_type;
    int gates = strcmp(op, "LSTM") == 0 ? 4 : strcmp(op, "GRU") == 0 ? 3 : 1;
    const kn_tinfo *x = &c->in[0], *w = &c->in[1], *r = &c->in[2];
    if (x->rank != 3 || w->rank != 3 || r->rank != 3)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "X, W and R must have rank 3");
    const char *dir = kn_attr_string(c->node, "direction", "forward");
    int64_t dirs = strcmp(dir, "bidirectional") == 0 ? 2 : 1;
    if (dirs == 1 && strcmp(dir, "forward") != 0 && strcmp(dir, "reverse") != 0)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "unknown direction '%s'", dir);
    int64_t hidden = kn_attr_int(c->node, "hidden_size", w->dims[1] / gates);
    /* R is [dirs, gates*hidden, hidden]: a hidden size that R does not have
     * stops here, before any product of it */
    if (hidden != r->dims[2])
        return kn_node_error(c->node, KILN_ERR_SHAPE, "hidden_size %lld does not fit R (%lld)",
                             (long long)hidden, (long long)r->dims[2]);
    int layout = (int)kn_attr_int(c->node, "layout", 0);
    int64_t seq = layout ? x->dims[1] : x->dims[0], batch = layout ? x->dims[0] : x->dims[1];
    if (w->dims[0] != dirs || w->dims[1] != gates * hidden || w->dims[2] != x->dims[2] ||
        r->dims[0] != dirs || r->dims[1] != gates * hidden || r->dims[2] != hidden)
        return kn_node_error(c->node, KILN_ERR_SHAPE,
                             "W or R does not fit %lld direction(s), hidden size %lld, input %lld",
                             (long long)dirs, (long long)hidden, (long long)x->dims[2]);
    if (kn_has_in(c, 3) && kn_numel(c->in[3].rank, c->in[3].dims) != dirs * 2 * gates * hidden)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "B has the wrong size");
    if (kn_has_in(c, 4) && kn_numel(c->in[4].rank, c->in[4].dims) != batch)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "sequence_lens must have %lld values",
                             (long long)batch);
    int64_t state;
    if (kn_mul_i64(dirs * batch, hidden, &state)) /* dirs * batch: a dim times 2 */
        return kn_node_error(c->node, KILN_ERR_SHAPE, "the state size overflows");
    for (int i = 5; i < 7 && i < c->n_in; i++) /* initial_h, initial_c */
        if (kn_has_in(c, i) && kn_numel(c->in[i].rank, c->in[i].dims) != state)
            return kn_node_error(c->node, KILN_ERR_SHAPE,
                                 "initial state (input %d) must have %lld values", i,
                                 (long long)(dirs * batch * hidden));
    if (gates == 4 && kn_has_in(c, 7) && kn_numel(c->in[7].rank, c->in[7].dims) != dirs * 3 * hidden)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "P (peepholes) has the wrong size");
    kn_tinfo *y = &c->out[0];
    y->dtype = x->dtype;
    y->rank = 4;
    if (layout) {
        y->dims[0] = batch, y->dims[1] = seq, y->dims[2] = dirs, y->dims[3] = hidden;
    } else {
        y->dims[0] = seq, y->dims[1] = dirs, y->dims[2] = batch, y->dims[3] = hidden;
    }
    for (int k = 1; k < c->n_out && k < 3; k++) {
        kn_tinfo *h = &c->out[k];
        h->dtype = x->dtype;
        h->rank = 3;
        h->dims[0] = layout ? batch : dirs;
        h->dims[1] = layout ? dirs : batch;
        h->dims[2] = hidden;
    }
    return KILN_OK;
}

const kn_op_schema kn_ops_nn[] = {
    {"Conv", "", infer_conv, 0},
    {"ConvTranspose", "", infer_conv_transpose, 0},
    {"ConvInteger", "", infer_conv_integer, 0},
    {"QLinearConv", "", infer_qlinear_conv, 0},
    {"MaxUnpool", "", infer_max_unpool, 1u << 2},
    {"GridSample", "", infer_grid_sample, 0},
    {"HannWindow", "", infer_window, 1u << 0},
    {"HammingWindow", "", infer_window, 1u << 0},
    {"BlackmanWindow", "", infer_window, 1u << 0},
    {"QuantizeLinear", "", infer_quant, 0},
    {"DequantizeLinear", "", infer_quant, 0},
    {"DynamicQuantizeLinear", "", infer_dynamic_quantize, 0},
    {"RoiAlign", "", infer_roi_align, 0},
    {"NegativeLogLikelihoodLoss", "", infer_nll_loss, 0},
    {"SoftmaxCrossEntropyLoss", "", infer_sce_loss, 0},
    {"NonMaxSuppression", "", infer_nms, (1u << 2) | (1u << 3) | (1u << 4)},
    {"MaxPool", "", infer_pool, 0},
    {"AveragePool", "", infer_pool, 0},
    {"LpPool", "", infer_pool, 0},
    {"GlobalAveragePool", "", infer_global_pool, 0},
    {"GlobalMaxPool", "", infer_global_pool, 0},
    {"GlobalLpPool", "", infer_global_pool, 0},
    {"BatchNormalization", "", infer_batchnorm, 0},
    {"InstanceNormalization", "", infer_instancenorm, 0},
    {"LayerNormalization", "", infer_layernorm, 0},
    {"GroupNormalization", "", infer_groupnorm, 0},
    {"RMSNormalization", "", infer_rmsnorm, 0},
    {"RotaryEmbedding", "", infer_rotary, 0},
    {"RotaryEmbedding", KN_MS_DOMAIN, infer_rotary, 0},
    {"LpNormalization", "", infer_lpnorm, 0},
    {"LRN", "", infer_lrn, 0},
    {"MeanVarianceNormalization", "", infer_mvn, 0},
    {"Gemm", "", infer_gemm, 0},
    {"MatMul", "", infer_matmul, 0},
    {"MatMulInteger", "", infer_matmul_integer, 0},
    {"QLinearMatMul", "", infer_qlinear_matmul, 0},
    {"Einsum", "", infer_einsum, 0},
    {"Attention", "", infer_attention, 0},
    {"Dropout", "", infer_dropout, (1u << 1) | (1u << 2)},
    {"RNN", "", infer_recurrent, 0},
    {"GRU", "", infer_recurrent, 0},
    {"LSTM", "", infer_recurrent, 0},
};
const size_t kn_ops_nn_count = KN_ARRAY_LEN(kn_ops_nn);
