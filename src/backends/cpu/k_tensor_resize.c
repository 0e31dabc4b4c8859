/* k_tensor_resize.c - CPU reference kernel of Resize and Upsample. Each axis
 * gets a table of source taps (index, weight) per output coordinate, built in
 * the workspace at run time; an output element is the weighted sum over the
 * product of its axes' taps (nearest copies bytes, so it serves every type). */
#include <math.h>
#include <string.h>

#include "k_tensor.h"

/* Most taps an axis can need: antialiasing widens the filter by 1/scale, and
 * scale >= (2*out - 1) / (2*in) for every way the output size is derived. */
int64_t kbt_resize_max_taps(const kn_node *n, int64_t in, int64_t out) {
    const char *mode = kn_attr_string(n, "mode", "nearest");
    if (strcmp(mode, "nearest") == 0)
        return 1;
    int64_t base = strcmp(mode, "cubic") == 0 ? 4 : 2;
    if (!kn_attr_int(n, "antialias", 0))
        return base;
    int64_t den = 2 * out - 1 > 1 ? 2 * out - 1 : 1;
    int64_t inv = (2 * in + den - 1) / den; /* ceil(1/scale) bound */
    return base * (inv + 1) + 4;
}

typedef struct axis_tab {
    int64_t *cnt;    /* per output coordinate: taps used, -1 when outside (extrapolate) */
    int64_t *idx;    /* [out][cap] source indices */
    double *w;       /* [out][cap] weights */
    int64_t cap;
} axis_tab;

static size_t tab_bytes(int64_t out, int64_t cap) {
    return (size_t)out * (sizeof(int64_t) * (size_t)(1 + cap) + sizeof(double) * (size_t)cap);
}

kiln_status kbt_resize_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                               int n_in, const kb_tensor *out, int n_out, void **inst,
                               size_t *workspace) {
    size_t sum = 64;
    for (int d = 0; d < out[0].rank; d++)
        sum += tab_bytes(out[0].dims[d], kbt_resize_max_taps(node, in[0].dims[d], out[0].dims[d])) + 64;
    *workspace = sum;
    return KILN_OK;
}

static double x_original(const kn_resize_plan *p, int d, int64_t o, int64_t in, int64_t out,
                         bool *outside) {
    double s = p->scale[d], ow = s * (double)in, x = (double)o, r;
    *outside = false;
    switch (p->coord) {
    case KN_CT_HALF_PIXEL: return (x + 0.5) / s - 0.5;
    case KN_CT_HALF_PIXEL_SYMMETRIC: {
        double adj = (double)out / ow, center = (double)in / 2;
        return center * (1 - adj) + (x + 0.5) / s - 0.5;
    }
    case KN_CT_PYTORCH_HALF_PIXEL: return ow == 1 ? -0.5 : (x + 0.5) / s - 0.5;
    case KN_CT_ALIGN_CORNERS: return ow == 1 ? 0.0 : x * (double)(in - 1) / (ow - 1);
    case KN_CT_ASYMMETRIC: return x / s;
    case KN_CT_TF_HALF_PIXEL_FOR_NN: return (x + 0.5) / s;
    default: /* tf_crop_and_resize */
        r = p->roi_end[d] - p->roi_start[d];
        x = ow == 1 ? r * (double)(in - 1) / 2 : x * r * (double)(in - 1) / (ow - 1);
        x += p->roi_start[d] * (double)(in - 1);
        *outside = x < 0 || x > (double)(in - 1);
        return x;
    }
}

static double cubic_w(double x, double a) {
    x = fabs(x);
    if (x <= 1)
        return ((a + 2) * x - (a + 3)) * x * x + 1;
    if (x < 2)
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
    return 0;
}

static int64_t clampi(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

kiln_status kbt_resize_taps(const kn_node *n, const kn_resize_plan *p, int d, int64_t in,
                            int64_t out, int64_t cap, int64_t *cnt, int64_t *idx, double *wt) {
    double s = p->scale[d];
    /* an axis kept as it is stays untouched whatever the coordinate mode (as
     * in the ONNX reference, which skips it) */
    bool keep = fabs(s - 1.0) <= 1e-9 && out == in && fabs(p->roi_start[d]) <= 1e-9 &&
                fabs(p->roi_end[d] - 1.0) <= 1e-9;
    for (int64_t o = 0; keep && o < out; o++) {
        idx[o * cap] = o;
        wt[o * cap] = 1;
        cnt[o] = 1;
    }
    for (int64_t o = 0; !keep && o < out; o++) {
        bool outside;
        double x = x_original(p, d, o, in, out, &outside);
        int64_t *ti = idx + o * cap;
        double *tw = wt + o * cap;
        if (outside || isnan(x)) { /* a NaN coordinate (a NaN roi) too */
            cnt[o] = -1;
            continue;
        }
        /* far outside the input every tap lands on the edge or outside,
         * exactly as one filter width out: clamping there keeps the result
         * and the conversions to int64 below defined (a roi of 1e30
         * overflowed them). The filter spans 2 / sa pixels either side at
         * most (cubic, antialiased). */
        double margin = fmin(4.0 / (p->antialias && s < 1 ? s : 1.0) + 4.0, 1099511627776.0);
        if (x < -margin)
            x = -margin;
        else if (x > (double)in + margin)
            x = (double)in + margin;
        double b = floor(x), ratio = x - b;
        if (p->mode == KN_RS_NEAREST) {
            int64_t i;
            if (p->nearest == KN_NM_SIMPLE)
                i = s < 1 ? (int64_t)ceil(x) : (int64_t)b;
            else if (ratio == 0)
                i = (int64_t)b;
            else if (p->nearest == KN_NM_ROUND_PREFER_FLOOR)
                i = (int64_t)b + (ratio > 0.5);
            else if (p->nearest == KN_NM_ROUND_PREFER_CEIL)
                i = (int64_t)b + (ratio >= 0.5);
            else if (p->nearest == KN_NM_FLOOR)
                i = (int64_t)b;
            else
                i = (int64_t)b + 1;
            ti[0] = clampi(i, 0, in - 1);
            tw[0] = 1;
            cnt[o] = 1;
            continue;
        }
        if (ratio == 0) { /* prefer the left neighbour, as the ONNX reference does */
            ratio = 1;
            b -= 1;
        }
        double sa = p->antialias && s < 1 ? s : 1.0, wbuf[4];
        int64_t start, ntap;
        if (p->mode == KN_RS_LINEAR) {
            start = (int64_t)floor(-1 / sa) + 1;
            ntap = 2 - 2 * start;
        } else {
            start = (int64_t)floor(-2 / sa) + 1;
            ntap = 2 - 2 * start;
        }
        if (ntap > cap)
            return kn_node_error(n, KILN_ERR_INTERNAL, "resize needs %lld taps on axis %d, %lld planned",
                                 (long long)ntap, d, (long long)cap);
        double sum = 0;
        for (int64_t j = 0; j < ntap; j++) {
            double arg = ((double)(start + j) - ratio) * sa, w;
            if (p->mode == KN_RS_LINEAR)
                w = sa < 1 ? fmax(0.0, fmin(1.0, 1 - fabs(arg))) : (j == 0 ? 1 - ratio : ratio);
            else if (sa < 1)
                w = cubic_w(arg, p->cubic_a);
            else {
                double a = p->cubic_a, r1 = ratio + 1, r2 = 1 - ratio, r3 = 2 - ratio;
                wbuf[0] = ((a * r1 - 5 * a) * r1 + 8 * a) * r1 - 4 * a;
                wbuf[1] = ((a + 2) * ratio - (a + 3)) * ratio * ratio + 1;
                wbuf[2] = ((a + 2) * r2 - (a + 3)) * r2 * r2 + 1;
                wbuf[3] = ((a * r3 - 5 * a) * r3 + 8 * a) * r3 - 4 * a;
                w = wbuf[j];
            }
            tw[j] = w;
            sum += w;
        }
        if (sa < 1 && sum != 0)
            for (int64_t j = 0; j < ntap; j++)
                tw[j] /= sum;
        if (p->exclude_outside) {
            sum = 0;
            for (int64_t j = 0; j < ntap; j++) {
                int64_t i = (int64_t)b + start + j;
                if (i < 0 || i >= in)
                    tw[j] = 0;
                sum += tw[j];
            }
            if (sum != 0)
                for (int64_t j = 0; j < ntap; j++)
                    tw[j] /= sum;
        }
        int64_t k = 0;
        for (int64_t j = 0; j < ntap; j++) {
            if (tw[j] == 0)
                continue;
            ti[k] = clampi((int64_t)b + start + j, 0, in - 1);
            tw[k] = tw[j];
            k++;
        }
        cnt[o] = k;
    }
    return KILN_OK;
}

typedef struct resize_rows_ctx {
    const kb_tensor *x;
    const kb_tensor *o;
    int rank;
    const axis_tab *tab;
    const int64_t *xs;
    size_t es;
    const uint8_t *extra;
    bool nearest;
    bool f32;
    const axis_tab *lt;
    int64_t width;
} resize_rows_ctx;

static void resize_rows(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const resize_rows_ctx *c_ = vc;
    const kb_tensor *x = c_->x;
    const kb_tensor *o = c_->o;
    int rank = c_->rank;
    const axis_tab *tab = c_->tab;
    const int64_t *xs = c_->xs;
    size_t es = c_->es;
    const uint8_t *extra = c_->extra;
    bool nearest = c_->nearest;
    bool f32 = c_->f32;
    const axis_tab *lt = c_->lt;
    int64_t width = c_->width;
    (void)tid;
    for (int64_t row = lo_; row < hi_; row++) {
        int64_t c[KILN_MAX_DIMS], rem = row;
        bool outside = false;
        for (int d = rank - 2; d >= 0; d--) {
            c[d] = rem % o->dims[d];
            rem /= o->dims[d];
            if (tab[d].cnt[c[d]] <= 0)
                outside = true; /* no tap with weight: nothing to interpolate */
        }
        uint8_t *dst = (uint8_t *)o->data + (size_t)(row * width) * es;
        if (outside) {
            for (int64_t j = 0; j < width; j++)
                kbt_copy1(dst + (size_t)j * es, extra, es);
            continue;
        }
        if (nearest) {
            int64_t base = 0;
            for (int d = 0; d < rank - 1; d++)
                base += tab[d].idx[c[d] * tab[d].cap] * xs[d];
            const uint8_t *src = (const uint8_t *)x->data + (size_t)base * es;
            for (int64_t j = 0; j < width; j++)
                kbt_copy1(dst + (size_t)j * es,
                          lt->cnt[j] <= 0 ? extra : src + (size_t)lt->idx[j * lt->cap] * es, es);
            continue;
        }
        /* the row's taps over the outer axes: (offset, weight) pairs */
        enum { MAX_ROW_TAPS = 512 };
        int64_t roff[MAX_ROW_TAPS], t[KILN_MAX_DIMS] = {0};
        double rw[MAX_ROW_TAPS];
        int nl = 0;
        bool fits = true;
        for (;;) {
            if (nl == MAX_ROW_TAPS) {
                fits = false;
                break;
            }
            int64_t off = 0;
            double w = 1;
            for (int d = 0; d < rank - 1; d++) {
                int64_t at = c[d] * tab[d].cap + t[d];
                off += tab[d].idx[at] * xs[d];
                w *= tab[d].w[at];
            }
            roff[nl] = off;
            rw[nl++] = w;
            int d = rank - 2;
            while (d >= 0 && ++t[d] >= tab[d].cnt[c[d]]) {
                t[d] = 0;
                d--;
            }
            if (d < 0)
                break;
        }
        for (int64_t j = 0; j < width; j++) {
            int64_t n = lt->cnt[j];
            if (n <= 0) {
                kbt_copy1(dst + (size_t)j * es, extra, es);
                continue;
            }
            const int64_t *li = lt->idx + j * lt->cap;
            const double *lw = lt->w + j * lt->cap;
            double acc = 0;
            if (!fits) { /* a very wide antialias filter: walk every combination */
                int64_t u[KILN_MAX_DIMS] = {0};
                for (;;) {
                    int64_t off = 0;
                    double w = 1;
                    for (int d = 0; d < rank - 1; d++) {
                        int64_t at = c[d] * tab[d].cap + u[d];
                        off += tab[d].idx[at] * xs[d];
                        w *= tab[d].w[at];
                    }
                    for (int64_t k = 0; k < n; k++)
                        acc += w * lw[k] * kbt_load(x->dtype, x->data, off + li[k]);
                    int d = rank - 2;
                    while (d >= 0 && ++u[d] >= tab[d].cnt[c[d]]) {
                        u[d] = 0;
                        d--;
                    }
                    if (d < 0)
                        break;
                }
            } else if (f32) {
                const float *xf = x->data;
                for (int l = 0; l < nl; l++) {
                    const float *src = xf + roff[l];
                    double a = 0;
                    for (int64_t k = 0; k < n; k++)
                        a += lw[k] * src[li[k]];
                    acc += rw[l] * a;
                }
            } else {
                for (int l = 0; l < nl; l++) {
                    double a = 0;
                    for (int64_t k = 0; k < n; k++)
                        a += lw[k] * kbt_load(x->dtype, x->data, roff[l] + li[k]);
                    acc += rw[l] * a;
                }
            }
            if (f32)
                ((float *)(void *)dst)[j] = (float)acc;
            else
                kbt_store(x->dtype, dst, j, acc);
        }
    }
}

kiln_status kbt_resize(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *o = &r->out[0];
    kn_tinfo in[4];
    int n_in = r->n_in < 4 ? r->n_in : 4;
    for (int i = 0; i < n_in; i++)
        in[i] = kbt_info(&r->in[i]);
    kn_resize_plan p;
    KN_TRY(kn_resize_decode(r->node, in, n_in, &p));
    int rank = x->rank;
    for (int d = 0; d < rank; d++)
        if (p.out[d] != o->dims[d])
            return kn_node_error(r->node, KILN_ERR_INTERNAL, "output shape changed");
    int64_t total = kbt_numel(o);
    if (total == 0)
        return KILN_OK;
    if (kbt_numel(x) == 0)
        return kn_node_error(r->node, KILN_ERR_SHAPE, "cannot resize an empty tensor");
    if (rank == 0) {
        memcpy(o->data, x->data, kiln_dtype_size(x->dtype));
        return KILN_OK;
    }
    if (p.mode != KN_RS_NEAREST && !kbt_is_numeric(x->dtype))
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "interpolation of type %s",
                             kiln_dtype_name(x->dtype));
    axis_tab tab[KILN_MAX_DIMS];
    uint8_t *ws = r->workspace;
    if (!ws)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "no workspace");
    for (int d = 0; d < rank; d++) {
        int64_t out = o->dims[d];
        tab[d].cap = kbt_resize_max_taps(r->node, x->dims[d], out);
        tab[d].cnt = (int64_t *)ws;
        tab[d].idx = tab[d].cnt + out;
        tab[d].w = (double *)(tab[d].idx + out * tab[d].cap);
        ws += (tab_bytes(out, tab[d].cap) + 63) & ~(size_t)63;
        KN_TRY(kbt_resize_taps(r->node, &p, d, x->dims[d], out, tab[d].cap, tab[d].cnt, tab[d].idx,
                               tab[d].w));
    }
    int64_t xs[KILN_MAX_DIMS];
    kbt_strides(rank, x->dims, xs);
    size_t es = kiln_dtype_size(x->dtype);
    uint8_t extra[16] = {0};
    kbt_store(x->dtype, extra, 0, p.extrapolation);
    bool nearest = p.mode == KN_RS_NEAREST, f32 = x->dtype == KILN_DTYPE_FLOAT;
    const axis_tab *lt = &tab[rank - 1];
    int64_t width = o->dims[rank - 1], rows = total / width;
    int nt = r->threads > 1 && total > (1 << 14) ? r->threads : 1;
    {
        resize_rows_ctx c_ = {x, o, rank, tab, xs, es, extra, nearest, f32, lt, width};
        kn_parallel_for(nt, rows, 0, resize_rows, &c_);
    }
    return KILN_OK;
}
