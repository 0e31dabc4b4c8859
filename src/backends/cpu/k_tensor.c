/* k_tensor.c - CPU reference kernels of the tensor family (shape, layout and
 * indexing ops) and their registration table. Data movement works on element
 * sizes, so every type of a given width shares one path; indexing, resize and
 * sorting kernels live in k_tensor_index.c and k_tensor_resize.c. */
#include <math.h>
#include <string.h>

#include "k_tensor.h"

/* ---------------- helpers ---------------- */

bool kbt_is_float(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_DOUBLE || t == KILN_DTYPE_FLOAT16 ||
           t == KILN_DTYPE_BFLOAT16 || t == KILN_DTYPE_FLOAT8E4M3FN || t == KILN_DTYPE_FLOAT8E5M2;
}

bool kbt_is_numeric(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_FLOAT: case KILN_DTYPE_DOUBLE: case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: case KILN_DTYPE_INT8: case KILN_DTYPE_INT16: case KILN_DTYPE_INT32:
    case KILN_DTYPE_INT64: case KILN_DTYPE_UINT8: case KILN_DTYPE_UINT16: case KILN_DTYPE_UINT32:
    case KILN_DTYPE_UINT64: return true;
    default: return false;
    }
}

double kbt_load(kiln_dtype t, const void *p, int64_t i) {
    switch (t) {
    case KILN_DTYPE_FLOAT: return ((const float *)p)[i];
    case KILN_DTYPE_DOUBLE: return ((const double *)p)[i];
    case KILN_DTYPE_FLOAT16: return kn_half_to_float(((const uint16_t *)p)[i]);
    case KILN_DTYPE_BFLOAT16: return kn_bf16_to_float(((const uint16_t *)p)[i]);
    case KILN_DTYPE_FLOAT8E4M3FN: return kn_fp8e4m3_to_float(((const uint8_t *)p)[i]);
    case KILN_DTYPE_FLOAT8E5M2: return kn_fp8e5m2_to_float(((const uint8_t *)p)[i]);
    case KILN_DTYPE_UINT64: return (double)((const uint64_t *)p)[i];
    default: return (double)kbt_load_i64(t, p, i);
    }
}

int64_t kbt_load_i64(kiln_dtype t, const void *p, int64_t i) {
    switch (t) {
    case KILN_DTYPE_INT64: return ((const int64_t *)p)[i];
    case KILN_DTYPE_INT32: return ((const int32_t *)p)[i];
    case KILN_DTYPE_INT16: return ((const int16_t *)p)[i];
    case KILN_DTYPE_INT8: return ((const int8_t *)p)[i];
    case KILN_DTYPE_UINT8: case KILN_DTYPE_BOOL: return ((const uint8_t *)p)[i];
    case KILN_DTYPE_UINT16: return ((const uint16_t *)p)[i];
    case KILN_DTYPE_UINT32: return ((const uint32_t *)p)[i];
    case KILN_DTYPE_UINT64: return (int64_t)((const uint64_t *)p)[i];
    default: {
        double v = kbt_load(t, p, i);
        return isnan(v) ? 0 : v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : (int64_t)v;
    }
    }
}

static double clampd(double v, double lo, double hi) {
    return isnan(v) ? 0 : v < lo ? lo : v > hi ? hi : v;
}

void kbt_store(kiln_dtype t, void *p, int64_t i, double v) {
    switch (t) {
    case KILN_DTYPE_FLOAT: ((float *)p)[i] = (float)v; return;
    case KILN_DTYPE_DOUBLE: ((double *)p)[i] = v; return;
    case KILN_DTYPE_FLOAT16: ((uint16_t *)p)[i] = kn_float_to_half((float)v); return;
    case KILN_DTYPE_BFLOAT16: ((uint16_t *)p)[i] = kn_float_to_bf16((float)v); return;
    case KILN_DTYPE_FLOAT8E4M3FN: ((uint8_t *)p)[i] = kn_float_to_fp8e4m3((float)v); return;
    case KILN_DTYPE_FLOAT8E5M2: ((uint8_t *)p)[i] = kn_float_to_fp8e5m2((float)v); return;
    case KILN_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; return;
    case KILN_DTYPE_UINT64: ((uint64_t *)p)[i] = (uint64_t)clampd(nearbyint(v), 0, 1.8e19); return;
    default: break;
    }
    double r = nearbyint(v);
    switch (t) {
    case KILN_DTYPE_INT8: r = clampd(r, -128, 127); break;
    case KILN_DTYPE_UINT8: r = clampd(r, 0, 255); break;
    case KILN_DTYPE_INT16: r = clampd(r, -32768, 32767); break;
    case KILN_DTYPE_UINT16: r = clampd(r, 0, 65535); break;
    case KILN_DTYPE_INT32: r = clampd(r, -2147483648.0, 2147483647.0); break;
    case KILN_DTYPE_UINT32: r = clampd(r, 0, 4294967295.0); break;
    default: r = clampd(r, -9.2e18, 9.2e18); break;
    }
    kbt_store_i64(t, p, i, (int64_t)r);
}

void kbt_store_i64(kiln_dtype t, void *p, int64_t i, int64_t v) {
    switch (t) {
    case KILN_DTYPE_INT64: ((int64_t *)p)[i] = v; return;
    case KILN_DTYPE_INT32: ((int32_t *)p)[i] = (int32_t)v; return;
    case KILN_DTYPE_INT16: ((int16_t *)p)[i] = (int16_t)v; return;
    case KILN_DTYPE_INT8: ((int8_t *)p)[i] = (int8_t)v; return;
    case KILN_DTYPE_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; return;
    case KILN_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; return;
    case KILN_DTYPE_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; return;
    case KILN_DTYPE_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; return;
    case KILN_DTYPE_UINT64: ((uint64_t *)p)[i] = (uint64_t)v; return;
    default: kbt_store(t, p, i, (double)v); return;
    }
}

bool kbt_is_zero(kiln_dtype t, const void *p, int64_t i) {
    if (kbt_is_float(t))
        return kbt_load(t, p, i) == 0.0;
    size_t es = kiln_dtype_size(t);
    const uint8_t *b = (const uint8_t *)p + (size_t)i * es;
    for (size_t k = 0; k < es; k++)
        if (b[k])
            return false;
    return true;
}

void kbt_strides(int rank, const int64_t *dims, int64_t *strides) {
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        strides[d] = s;
        s *= dims[d];
    }
}

kn_tinfo kbt_info(const kb_tensor *t) { return kn_tinfo_of(t->dtype, t->rank, t->dims, t->data); }

typedef struct transpose_tiles_ctx {
    uint8_t *o;
    const uint8_t *s;
    size_t es;
    int r;
    const int64_t *d;
    const int64_t *st;
    int64_t A;
    int64_t B;
    int64_t bs;
    int64_t ablocks;
} transpose_tiles_ctx;

static void transpose_tiles(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const transpose_tiles_ctx *c_ = vc;
    enum { TB = 32 }; /* tiled_transpose's tile */
    uint8_t *o = c_->o;
    const uint8_t *s = c_->s;
    size_t es = c_->es;
    int r = c_->r;
    const int64_t *d = c_->d;
    const int64_t *st = c_->st;
    int64_t A = c_->A;
    int64_t B = c_->B;
    int64_t bs = c_->bs;
    int64_t ablocks = c_->ablocks;
    (void)tid;
    for (int64_t k = lo_; k < hi_; k++) {
        int64_t ob = k / ablocks, a0 = (k % ablocks) * TB, rem = ob, so = 0;
        for (int i = r - 3; i >= 0; i--) {
            so += (rem % d[i]) * st[i];
            rem /= d[i];
        }
        int64_t a1 = a0 + TB < A ? a0 + TB : A;
        for (int64_t b0 = 0; b0 < B; b0 += TB) {
            int64_t b1 = b0 + TB < B ? b0 + TB : B;
            for (int64_t a = a0; a < a1; a++) {
                uint8_t *op = o + (size_t)((ob * A + a) * B) * es;
                const uint8_t *sp = s + (size_t)(so + a) * es;
                switch (es) {
                case 4:
                    for (int64_t b = b0; b < b1; b++)
                        ((uint32_t *)(void *)op)[b] = *(const uint32_t *)(const void *)(sp + (size_t)(b * bs) * 4);
                    break;
                default:
                    for (int64_t b = b0; b < b1; b++)
                        kbt_copy1(op + (size_t)b * es, sp + (size_t)(b * bs) * es, es);
                    break;
                }
            }
        }
    }
}

/* The last two (merged) dims are a transpose: the second-to-last is
 * contiguous in the source. Copy in square tiles so that both sides stay in
 * cache. */
static void tiled_transpose(uint8_t *o, const uint8_t *s, size_t es, int r, const int64_t *d,
                            const int64_t *st, int nt) {
    enum { TB = 32 };
    int64_t A = d[r - 2], B = d[r - 1], bs = st[r - 1], outer = 1;
    for (int i = 0; i < r - 2; i++)
        outer *= d[i];
    int64_t ablocks = (A + TB - 1) / TB;
    {
        transpose_tiles_ctx c_ = {o, s, es, r, d, st, A, B, bs, ablocks};
        kn_parallel_for(nt, outer * ablocks, 0, transpose_tiles, &c_);
    }
}

/* The last merged dim is short (fewer than 16) and strided while the one
 * before it is contiguous in the source: an interleave of `B` planes (an
 * NCHW -> NHWC reformat of an image's 3 channels). Each output row of B is
 * gathered from the planes; the source planes are read in order, so a
 * block of A positions streams through the cache once. */
typedef struct interleave_ctx {
    uint8_t *o;
    const uint8_t *s;
    size_t es;
    int r;
    const int64_t *d;
    const int64_t *st;
    int64_t A, B, bs, ablocks;
} interleave_ctx;

enum { KBT_IL_BLOCK = 1024 };

static void interleave_blocks(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const interleave_ctx *c_ = vc;
    int64_t A = c_->A, B = c_->B, bs = c_->bs;
    size_t es = c_->es;
    (void)tid;
    for (int64_t k = lo_; k < hi_; k++) {
        int64_t ob = k / c_->ablocks, a0 = (k % c_->ablocks) * KBT_IL_BLOCK, rem = ob, so = 0;
        for (int i = c_->r - 3; i >= 0; i--) {
            so += (rem % c_->d[i]) * c_->st[i];
            rem /= c_->d[i];
        }
        int64_t a1 = a0 + KBT_IL_BLOCK < A ? a0 + KBT_IL_BLOCK : A;
        uint8_t *op = c_->o + (size_t)((ob * A + a0) * B) * es;
        const uint8_t *sp = c_->s + (size_t)(so + a0) * es;
        if (es == 4) {
            uint32_t *o4 = (uint32_t *)(void *)op;
            const uint32_t *s4 = (const uint32_t *)(const void *)sp;
            for (int64_t b = 0; b < B; b++) {
                const uint32_t *pl = s4 + b * bs;
                for (int64_t a = 0; a < a1 - a0; a++)
                    o4[a * B + b] = pl[a];
            }
            continue;
        }
        for (int64_t b = 0; b < B; b++)
            for (int64_t a = 0; a < a1 - a0; a++)
                kbt_copy1(op + (size_t)(a * B + b) * es, sp + (size_t)(b * bs + a) * es, es);
    }
}

typedef struct strided_rows_ctx {
    const uint8_t *s;
    uint8_t *o;
    size_t es;
    int r;
    const int64_t *d;
    const int64_t *st;
    int64_t inner;
    int64_t ist;
} strided_rows_ctx;

static void strided_rows(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const strided_rows_ctx *c_ = vc;
    const uint8_t *s = c_->s;
    uint8_t *o = c_->o;
    size_t es = c_->es;
    int r = c_->r;
    const int64_t *d = c_->d;
    const int64_t *st = c_->st;
    int64_t inner = c_->inner;
    int64_t ist = c_->ist;
    (void)tid;
    for (int64_t k = lo_; k < hi_; k++) {
        int64_t rem = k, so = 0;
        for (int i = r - 2; i >= 0; i--) {
            so += (rem % d[i]) * st[i];
            rem /= d[i];
        }
        const uint8_t *sp = s + so * (int64_t)es;
        uint8_t *op = o + k * inner * (int64_t)es;
        if (ist == 1) {
            memcpy(op, sp, (size_t)inner * es);
            continue;
        }
        for (int64_t j = 0; j < inner; j++)
            kbt_copy1(op + j * (int64_t)es, sp + j * ist * (int64_t)es, es);
    }
}

void kbt_strided_copy(void *dst, const void *src, size_t es, int rank, const int64_t *dims,
                      const int64_t *strides, int64_t off, int threads) {
    /* drop unit dims and merge dims that are contiguous in the source */
    int64_t d[16], st[16];
    int r = 0;
    for (int i = 0; i < rank; i++) {
        if (dims[i] == 0)
            return;
        if (dims[i] == 1)
            continue;
        if (r > 0 && st[r - 1] == strides[i] * dims[i]) {
            d[r - 1] *= dims[i];
            st[r - 1] = strides[i];
            continue;
        }
        d[r] = dims[i];
        st[r] = strides[i];
        r++;
    }
    const uint8_t *s = (const uint8_t *)src + off * (int64_t)es;
    uint8_t *o = dst;
    if (r == 0) {
        memcpy(o, s, es);
        return;
    }
    int64_t inner = d[r - 1], ist = st[r - 1], outer = 1;
    for (int i = 0; i < r - 1; i++)
        outer *= d[i];
    int nt = threads > 1 && outer * inner > (1 << 16) ? threads : 1;
    if (r >= 2 && st[r - 2] == 1 && ist != 1 && d[r - 2] >= 16 && inner >= 16) {
        tiled_transpose(o, s, es, r, d, st, nt);
        return;
    }
    if (r >= 2 && st[r - 2] == 1 && ist != 1 && inner < 16 && d[r - 2] >= 64) {
        int64_t A = d[r - 2], ob = outer / A, ablocks = (A + KBT_IL_BLOCK - 1) / KBT_IL_BLOCK;
        interleave_ctx c_ = {o, s, es, r, d, st, A, inner, ist, ablocks};
        kn_parallel_for(nt, ob * ablocks, 0, interleave_blocks, &c_);
        return;
    }
    {
        strided_rows_ctx c_ = {s, o, es, r, d, st, inner, ist};
        kn_parallel_for(nt, outer, 0, strided_rows, &c_);
    }
}

typedef struct sort_ctx {
    kbt_cmp cmp;
    const void *ctx;
} sort_ctx;

void kbt_sort(int64_t *a, int64_t *tmp, int64_t n, kbt_cmp cmp, const void *ctx) {
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                tmp[k++] = cmp(ctx, a[j], a[i]) < 0 ? a[j++] : a[i++];
            while (i < mid)
                tmp[k++] = a[i++];
            while (j < hi)
                tmp[k++] = a[j++];
        }
        memcpy(a, tmp, (size_t)n * sizeof *a);
    }
}

static size_t esize(const kb_tensor *t) { return kiln_dtype_size(t->dtype); }

static size_t nbytes(const kb_tensor *t) { return (size_t)kbt_numel(t) * esize(t); }

/* ---------------- pure copies ---------------- */

/* Identity, Reshape, Flatten, Squeeze, Unsqueeze: the bytes do not change. */
static kiln_status k_copy(const kb_run *r) {
    size_t n = nbytes(&r->in[0]);
    if (n && r->out[0].data != r->in[0].data)
        memmove(r->out[0].data, r->in[0].data, n);
    return KILN_OK;
}

static kiln_status k_transpose(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    int rank = x->rank;
    int64_t st[KILN_MAX_DIMS], ost[KILN_MAX_DIMS];
    kbt_strides(rank, x->dims, st);
    size_t np;
    const int64_t *perm = kn_attr_ints(r->node, "perm", &np);
    for (int i = 0; i < rank; i++)
        ost[i] = st[perm ? perm[i] : rank - 1 - i];
    kbt_strided_copy(r->out[0].data, x->data, esize(x), rank, r->out[0].dims, ost, 0, r->threads);
    return KILN_OK;
}

/* Concat (the parts into `whole`) and Split (`whole` into the parts) along
 * one axis: per outer index, each part's share of the axis is one run of
 * bytes, the parts' runs side by side in the whole's row. Absent parts
 * (type undefined) take no share; parts without storage keep theirs, and so
 * does a part whose bytes already are its share of the whole (a producer
 * that wrote there: nothing to move). Rows go in order, every part's run of
 * a row before the next row, so the whole is written (or read) front to back
 * while each part streams alongside (an NHWC channel concat has thousands of
 * short rows); many rows are split over the threads. */
typedef struct axis_copy_ctx {
    uint8_t *whole;
    size_t row;
    int n;               /* parts that move */
    uint8_t *part[32];   /* their bytes */
    size_t chunk[32];    /* their run a row */
    size_t at[32];       /* where it starts in the whole's row */
    bool into_whole;
} axis_copy_ctx;

static void axis_copy_rows(void *vc, int64_t lo, int64_t hi, int tid) {
    const axis_copy_ctx *c = vc;
    (void)tid;
    for (int64_t k = lo; k < hi; k++)
        for (int i = 0; i < c->n; i++) {
            uint8_t *w = c->whole + (size_t)k * c->row + c->at[i];
            uint8_t *p = c->part[i] + (size_t)k * c->chunk[i];
            if (c->into_whole)
                memcpy(w, p, c->chunk[i]);
            else
                memcpy(p, w, c->chunk[i]);
        }
}

static void axis_copy(const kb_tensor *whole, const kb_tensor *parts, int n, int64_t axis,
                      bool into_whole, int threads) {
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++)
        outer *= whole->dims[d];
    for (int d = (int)axis + 1; d < whole->rank; d++)
        inner *= whole->dims[d];
    size_t es = esize(whole), row = (size_t)(whole->dims[axis] * inner) * es;
    axis_copy_ctx c;
    c.whole = whole->data;
    c.row = row;
    c.n = 0;
    c.into_whole = into_whole;
    size_t at = 0, moved = 0;
    for (int i = 0; i < n; i++) {
        const kb_tensor *t = &parts[i];
        if (t->dtype == KILN_DTYPE_UNDEFINED)
            continue;
        size_t chunk = (size_t)(t->dims[axis] * inner) * es;
        /* already in its share: one contiguous slice written there */
        bool in_place = (outer == 1 || chunk == row) && t->data == c.whole + at;
        if (t->data && chunk && !in_place) {
            if (c.n == (int)KN_ARRAY_LEN(c.part)) { /* full: move what is gathered */
                int nt = threads > 1 && (size_t)outer * moved > ((size_t)1 << 18) ? threads : 1;
                kn_parallel_for(nt, outer, 0, axis_copy_rows, &c);
                c.n = 0, moved = 0;
            }
            c.part[c.n] = t->data;
            c.chunk[c.n] = chunk;
            c.at[c.n] = at;
            c.n++;
            moved += chunk;
        }
        at += chunk;
    }
    if (c.n) {
        int nt = threads > 1 && (size_t)outer * moved > ((size_t)1 << 18) ? threads : 1;
        kn_parallel_for(nt, outer, 0, axis_copy_rows, &c);
    }
}

static kiln_status k_concat(const kb_run *r) {
    int64_t axis = kn_attr_int(r->node, "axis", 1);
    axis_copy(&r->out[0], r->in, r->n_in, axis < 0 ? axis + r->out[0].rank : axis, true,
              r->threads);
    return KILN_OK;
}

static kiln_status k_split(const kb_run *r) {
    int64_t axis = kn_attr_int(r->node, "axis", 0);
    axis_copy(&r->in[0], r->out, r->n_out, axis < 0 ? axis + r->in[0].rank : axis, false,
              r->threads);
    return KILN_OK;
}

static kiln_status k_slice(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    kn_tinfo in[5];
    int n_in = r->n_in < 5 ? r->n_in : 5;
    for (int i = 0; i < n_in; i++)
        in[i] = kbt_info(&r->in[i]);
    kn_slice_plan p;
    KN_TRY(kn_slice_decode(r->node, in, n_in, &p));
    int64_t st[KILN_MAX_DIMS], ost[KILN_MAX_DIMS], off = 0;
    kbt_strides(x->rank, x->dims, st);
    if (kbt_numel(&r->out[0]) == 0)
        return KILN_OK;
    for (int d = 0; d < x->rank; d++) {
        /* a step only matters when it is taken: with one element along d a
         * step of INT64_MAX is legal and its stride overflowed; with two or
         * more the steps stay inside the dim, and so inside the tensor */
        int64_t step = r->out[0].dims[d] > 1 ? p.step[d] : 0, so = 0;
        if (kn_mul_i64(p.start[d], st[d], &so) || kn_add_i64(off, so, &off) ||
            kn_mul_i64(step, st[d], &ost[d]))
            return kn_node_error(r->node, KILN_ERR_SHAPE,
                                 "start %lld or step %lld of axis %d overflows the data "
                                 "input's offsets",
                                 (long long)p.start[d], (long long)p.step[d], d);
    }
    kbt_strided_copy(r->out[0].data, x->data, esize(x), x->rank, r->out[0].dims, ost, off,
                     r->threads);
    return KILN_OK;
}

static kiln_status k_expand(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *o = &r->out[0];
    int64_t st[KILN_MAX_DIMS], ost[KILN_MAX_DIMS];
    kbt_strides(x->rank, x->dims, st);
    for (int d = 0; d < o->rank; d++) {
        int k = d - (o->rank - x->rank);
        ost[d] = k < 0 || x->dims[k] == 1 ? 0 : st[k];
    }
    if (kbt_numel(o) == 0)
        return KILN_OK;
    kbt_strided_copy(o->data, x->data, esize(x), o->rank, o->dims, ost, 0, r->threads);
    return KILN_OK;
}

static kiln_status k_tile(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *o = &r->out[0];
    int64_t st[KILN_MAX_DIMS], dims[2 * KILN_MAX_DIMS], ost[2 * KILN_MAX_DIMS];
    kbt_strides(x->rank, x->dims, st);
    if (kbt_numel(o) == 0)
        return KILN_OK;
    for (int d = 0; d < x->rank; d++) {
        dims[2 * d] = x->dims[d] ? o->dims[d] / x->dims[d] : 0;
        ost[2 * d] = 0;
        dims[2 * d + 1] = x->dims[d];
        ost[2 * d + 1] = st[d];
    }
    kbt_strided_copy(o->data, x->data, esize(x), 2 * x->rank, dims, ost, 0, r->threads);
    return KILN_OK;
}

/* DepthToSpace and SpaceToDepth as 6-D transposes. */
static kiln_status k_depth_space(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    int64_t b = kn_attr_int(r->node, "blocksize", 1);
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    int64_t dims[6], st[6];
    if (strcmp(r->node->op_type, "DepthToSpace") == 0) {
        int64_t c = C / (b * b);
        bool crd = strcmp(kn_attr_string(r->node, "mode", "DCR"), "CRD") == 0;
        int64_t d6[6] = {N, c, H, b, W, b};
        memcpy(dims, d6, sizeof d6);
        st[0] = C * H * W;
        st[2] = W;
        st[4] = 1;
        if (crd) { /* input [N, c, b1, b2, H, W] */
            st[1] = b * b * H * W;
            st[3] = b * H * W;
            st[5] = H * W;
        } else { /* input [N, b1, b2, c, H, W] */
            st[1] = H * W;
            st[3] = b * c * H * W;
            st[5] = c * H * W;
        }
    } else if (strcmp(kn_attr_string(r->node, "mode", "DCR"), "CRD") == 0) {
        /* input [N, C, h, b1, w, b2] -> [N, C, b1, b2, h, w] */
        int64_t h = H / b, w = W / b;
        int64_t d6[6] = {N, C, b, b, h, w}, s6[6] = {C * H * W, H * W, W, 1, b * W, b};
        memcpy(dims, d6, sizeof d6);
        memcpy(st, s6, sizeof s6);
    } else { /* input [N, C, h, b1, w, b2] -> [N, b1, b2, C, h, w] */
        int64_t h = H / b, w = W / b;
        int64_t d6[6] = {N, b, b, C, h, w}, s6[6] = {C * H * W, W, 1, H * W, b * W, b};
        memcpy(dims, d6, sizeof d6);
        memcpy(st, s6, sizeof s6);
    }
    if (kbt_numel(x) == 0)
        return KILN_OK;
    kbt_strided_copy(r->out[0].data, x->data, esize(x), 6, dims, st, 0, r->threads);
    return KILN_OK;
}

/* ---------------- Pad ---------------- */

static int64_t pad_src(int mode, int64_t i, int64_t n) {
    if (i >= 0 && i < n)
        return i;
    switch (mode) {
    case KN_PAD_EDGE: return i < 0 ? 0 : n - 1;
    case KN_PAD_WRAP: return ((i % n) + n) % n;
    case KN_PAD_REFLECT: {
        if (n == 1)
            return 0;
        int64_t period = 2 * (n - 1);
        int64_t m = ((i % period) + period) % period;
        return m < n ? m : period - m;
    }
    default: return -1;
    }
}

static kiln_status k_pad_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                 int n_in, const kb_tensor *out, int n_out, void **inst,
                                 size_t *workspace) {
    size_t sum = 1;
    for (int d = 0; d < out[0].rank; d++)
        sum += (size_t)out[0].dims[d];
    *workspace = sum * sizeof(int64_t);
    return KILN_OK;
}

typedef struct pad_rows_ctx {
    const kb_tensor *x;
    const kb_tensor *o;
    size_t es;
    const uint8_t *cval;
    int rank;
    int64_t *const *map;
    const int64_t *st;
    int64_t inner;
    const int64_t *last;
} pad_rows_ctx;

static void pad_rows(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const pad_rows_ctx *c_ = vc;
    const kb_tensor *x = c_->x;
    const kb_tensor *o = c_->o;
    size_t es = c_->es;
    const uint8_t *cval = c_->cval;
    int rank = c_->rank;
    int64_t *const *map = c_->map;
    const int64_t *st = c_->st;
    int64_t inner = c_->inner;
    const int64_t *last = c_->last;
    (void)tid;
    for (int64_t k = lo_; k < hi_; k++) {
        int64_t rem = k, so = 0;
        bool fill = false;
        for (int d = rank - 2; d >= 0; d--) {
            int64_t s = map[d][rem % o->dims[d]];
            rem /= o->dims[d];
            if (s < 0)
                fill = true;
            else
                so += s * st[d];
        }
        uint8_t *op = (uint8_t *)o->data + (size_t)(k * inner) * es;
        const uint8_t *sp = (const uint8_t *)x->data + (size_t)so * es;
        for (int64_t j = 0; j < inner; j++) {
            int64_t s = fill ? -1 : last[j];
            kbt_copy1(op + (size_t)j * es, s < 0 ? cval : sp + (size_t)s * es, es);
        }
    }
}

static kiln_status k_pad(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *o = &r->out[0];
    kn_tinfo in[4];
    int n_in = r->n_in < 4 ? r->n_in : 4;
    for (int i = 0; i < n_in; i++)
        in[i] = kbt_info(&r->in[i]);
    kn_pad_plan p;
    size_t es = esize(x);
    uint8_t cval[16] = {0};
    if (strcmp(r->node->op_type, "CenterCropPad") == 0) {
        KN_TRY(kn_center_crop_pad_decode(r->node, in, n_in, &p));
    } else {
        KN_TRY(kn_pad_decode(r->node, in, n_in, &p));
        if (n_in > 2 && r->in[2].data && kbt_numel(&r->in[2]) >= 1)
            memcpy(cval, r->in[2].data, es);
        else
            kbt_store(x->dtype, cval, 0, kn_attr_float(r->node, "value", 0.0f));
    }
    int64_t total = kbt_numel(o);
    if (total == 0)
        return KILN_OK;
    int rank = o->rank;
    if (rank == 0) {
        memcpy(o->data, x->data, es);
        return KILN_OK;
    }
    int64_t *map[KILN_MAX_DIMS], *ws = r->workspace, st[KILN_MAX_DIMS];
    if (!ws)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "no workspace");
    kbt_strides(rank, x->dims, st);
    for (int d = 0; d < rank; d++) {
        map[d] = ws;
        for (int64_t i = 0; i < o->dims[d]; i++)
            map[d][i] = x->dims[d] ? pad_src(p.mode, i - p.begin[d], x->dims[d]) : -1;
        ws += o->dims[d];
    }
    int64_t inner = o->dims[rank - 1], outer = total / inner;
    const int64_t *last = map[rank - 1];
    int nt = r->threads > 1 && total > (1 << 16) ? r->threads : 1;
    {
        pad_rows_ctx c_ = {x, o, es, cval, rank, map, st, inner, last};
        kn_parallel_for(nt, outer, 0, pad_rows, &c_);
    }
    return KILN_OK;
}

/* ---------------- generators ---------------- */

static kiln_status k_shape(const kb_run *r) {
    int64_t s, e;
    kn_shape_window(r->node, r->in[0].rank, &s, &e);
    int64_t *o = r->out[0].data;
    for (int64_t i = s; i < e; i++)
        o[i - s] = r->in[0].dims[i];
    return KILN_OK;
}

static kiln_status k_size(const kb_run *r) {
    *(int64_t *)r->out[0].data = kbt_numel(&r->in[0]);
    return KILN_OK;
}

/* Fill n elements of es bytes with the element at v. */
static void fill_elems(void *dst, const void *v, size_t es, int64_t n) {
    uint8_t *p = dst;
    if (n <= 0)
        return;
    bool zero = true;
    for (size_t k = 0; k < es; k++)
        zero = zero && ((const uint8_t *)v)[k] == 0;
    if (zero) {
        memset(p, 0, (size_t)n * es);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        kbt_copy1(p + (size_t)i * es, v, es);
}

static kiln_status k_constant_of_shape(const kb_run *r) {
    const kb_tensor *o = &r->out[0];
    uint8_t v[16] = {0};
    size_t es = esize(o);
    const kn_attr *a = kn_attr_find(r->node, "value");
    if (a && a->type == KN_ATTR_TENSOR && a->tensor && a->tensor->data && es <= sizeof v)
        memcpy(v, a->tensor->data, es);
    fill_elems(o->data, v, es, kbt_numel(o));
    return KILN_OK;
}

static kiln_status k_range(const kb_run *r) {
    const kb_tensor *o = &r->out[0];
    kiln_dtype t = o->dtype;
    int64_t n = kbt_numel(o);
    if (kbt_is_float(t)) {
        double s = kbt_load(t, r->in[0].data, 0), d = kbt_load(t, r->in[2].data, 0);
        for (int64_t i = 0; i < n; i++)
            kbt_store(t, o->data, i, s + (double)i * d);
    } else if (kbt_is_numeric(t)) {
        int64_t s = kbt_load_i64(t, r->in[0].data, 0), d = kbt_load_i64(t, r->in[2].data, 0);
        for (int64_t i = 0; i < n; i++)
            kbt_store_i64(t, o->data, i, s + i * d);
    } else {
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "type %s is not supported",
                             kiln_dtype_name(t));
    }
    return KILN_OK;
}

static kiln_status k_eyelike(const kb_run *r) {
    const kb_tensor *o = &r->out[0];
    int64_t k = kn_attr_int(r->node, "k", 0), rows = o->dims[0], cols = o->dims[1];
    size_t es = esize(o);
    if (rows * cols == 0)
        return KILN_OK;
    memset(o->data, 0, (size_t)(rows * cols) * es);
    uint8_t one[16] = {0};
    kbt_store(o->dtype, one, 0, 1.0);
    /* the diagonal's row range, so that i + k never overflows: k is an
     * attribute, anything in int64 */
    int64_t i0 = 0, i1 = 0; /* the rows with a one: 0 <= i + k < cols */
    if (k > -rows && k < cols) {
        i0 = k < 0 ? -k : 0;
        i1 = cols - k < rows ? cols - k : rows;
    }
    for (int64_t i = i0; i < i1; i++)
        kbt_copy1((uint8_t *)o->data + (size_t)(i * cols + i + k) * es, one, es);
    return KILN_OK;
}

static kiln_status k_trilu(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *o = &r->out[0];
    int64_t k = 0;
    if (r->n_in > 1 && r->in[1].data && kbt_numel(&r->in[1]) > 0)
        k = kbt_load_i64(r->in[1].dtype, r->in[1].data, 0);
    bool upper = kn_attr_int(r->node, "upper", 1) != 0;
    int64_t rows = x->dims[x->rank - 2], cols = x->dims[x->rank - 1];
    int64_t mats = rows * cols != 0 ? kbt_numel(x) / (rows * cols) : 0;
    size_t es = esize(x);
    for (int64_t m = 0; m < mats; m++)
        for (int64_t i = 0; i < rows; i++) {
            size_t at = (size_t)((m * rows + i) * cols) * es;
            const uint8_t *sp = (const uint8_t *)x->data + at;
            uint8_t *op = (uint8_t *)o->data + at;
            for (int64_t j = 0; j < cols; j++) {
                bool keep = upper ? j - i >= k : j - i <= k;
                if (keep)
                    kbt_copy1(op + (size_t)j * es, sp + (size_t)j * es, es);
                else
                    memset(op + (size_t)j * es, 0, es);
            }
        }
    return KILN_OK;
}

#define K(op, fn) {op, "", "ref", NULL, NULL, NULL, NULL, NULL, fn}
#define KP(op, fn, prep) {op, "", "ref", NULL, NULL, NULL, prep, NULL, fn}

const kb_kernel kb_cpu_tensor[] = {
    K("Identity", k_copy),
    K("Reshape", k_copy),
    K("Flatten", k_copy),
    K("Squeeze", k_copy),
    K("Unsqueeze", k_copy),
    K("Transpose", k_transpose),
    K("Concat", k_concat),
    K("Split", k_split),
    K("Slice", k_slice),
    K("Gather", kbt_gather),
    K("GatherElements", kbt_gather_elements),
    KP("GatherND", kbt_gather_nd, kbt_nd_prepare),
    KP("ScatterND", kbt_scatter_nd, kbt_nd_prepare),
    K("ScatterElements", kbt_scatter_elements),
    K("Scatter", kbt_scatter_elements),
    K("Expand", k_expand),
    K("Tile", k_tile),
    KP("Pad", k_pad, k_pad_prepare),
    KP("CenterCropPad", k_pad, k_pad_prepare),
    K("Shape", k_shape),
    K("Size", k_size),
    K("ConstantOfShape", k_constant_of_shape),
    K("Range", k_range),
    K("NonZero", kbt_nonzero),
    KP("TopK", kbt_topk, kbt_topk_prepare),
    K("OneHot", kbt_onehot),
    K("Trilu", k_trilu),
    K("DepthToSpace", k_depth_space),
    K("SpaceToDepth", k_depth_space),
    K("EyeLike", k_eyelike),
    KP("Resize", kbt_resize, kbt_resize_prepare),
    KP("Upsample", kbt_resize, kbt_resize_prepare),
    K("Compress", kbt_compress),
    K("ReverseSequence", kbt_reverse_sequence),
    KP("Unique", kbt_unique, kbt_unique_prepare),
};
const size_t kb_cpu_tensor_count = KN_ARRAY_LEN(kb_cpu_tensor);
