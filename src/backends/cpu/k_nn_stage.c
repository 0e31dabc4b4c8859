/* k_nn_stage.c - float copies for the float-only reference paths: inputs and
 * the output of another real type (float16, bfloat16, double) are converted
 * into workspace memory, the float kernel runs, and the result is converted
 * back. */
#include <string.h>

#include "k_nn.h"

static size_t align64(size_t n) { return (n + 63u) & ~(size_t)63u; }

static bool needs_stage(kiln_dtype t) {
    return t != KILN_DTYPE_UNDEFINED && t != KILN_DTYPE_FLOAT;
}

size_t kb_stage_bytes(const kb_tensor *in, int n_in, const kb_tensor *out) {
    size_t s = 0;
    for (int i = 0; i < n_in && i < KB_STAGE_MAX; i++)
        if (needs_stage(in[i].dtype))
            s += align64((size_t)kb_numel(&in[i]) * sizeof(float));
    if (needs_stage(out->dtype))
        s += align64((size_t)kb_numel(out) * sizeof(float));
    return s;
}

bool kb_stage_types_ok(const kb_tensor *in, int n_in, const kb_tensor *out) {
    for (int i = 0; i < n_in && i < KB_STAGE_MAX; i++)
        if (in[i].data && !kb_is_real(in[i].dtype))
            return false;
    return n_in <= KB_STAGE_MAX && kb_is_real(out->dtype);
}

void kb_stage_in(const kb_tensor *in, int n_in, const kb_tensor *out, void *mem, kb_staged *st) {
    uint8_t *m = mem;
    memset(st, 0, sizeof *st);
    for (int i = 0; i < n_in && i < KB_STAGE_MAX; i++) {
        st->in[i] = in[i];
        if (!needs_stage(in[i].dtype) || !in[i].data)
            continue;
        int64_t n = kb_numel(&in[i]);
        float *f = (float *)m;
        for (int64_t k = 0; k < n; k++)
            f[k] = (float)kb_ld(in[i].data, in[i].dtype, (size_t)k);
        st->in[i].data = f;
        st->in[i].dtype = KILN_DTYPE_FLOAT;
        m += align64((size_t)n * sizeof(float));
    }
    st->out = *out;
    if (needs_stage(out->dtype)) {
        st->out.data = m;
        st->out.dtype = KILN_DTYPE_FLOAT;
    }
}

void kb_stage_out(const kb_staged *st, kb_tensor *out) {
    if (st->out.data == out->data)
        return;
    const float *f = st->out.data;
    for (int64_t k = 0; k < kb_numel(out); k++)
        kb_st(out->data, out->dtype, (size_t)k, f[k]);
}
