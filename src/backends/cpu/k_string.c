/* k_string.c - CPU kernels on string tensors (a string element is a
 * `const char *` to NUL-terminated UTF-8): Cast and CastLike to and from
 * string (called by the Cast kernel of k_elementwise.c), StringNormalizer. Strings a kernel makes live in its instance's
 * arena until the context runs the node again (or is destroyed), so
 * consumers in the same run and the caller after it read them. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k_elementwise.h"
#include "k_nn.h"

typedef struct str_inst {
    char *arena;
    size_t cap;
} str_inst;

kiln_status kb_str_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                               int n_in, const kb_tensor *out, int n_out, void **inst,
                               size_t *workspace) {
    (void)state, (void)node, (void)in, (void)n_in, (void)out, (void)n_out;
    *workspace = 0;
    *inst = kn_calloc(1, sizeof(str_inst));
    return *inst ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
}

void kb_str_release(void *p) {
    str_inst *s = p;
    if (s)
        kn_free(s->arena);
    kn_free(s);
}

/* The arena, at least `bytes` long (its old strings are dropped). */
static char *arena(str_inst *s, size_t bytes) {
    if (bytes > s->cap) {
        char *a = kn_malloc(bytes);
        if (!a)
            return NULL;
        kn_free(s->arena);
        s->arena = a;
        s->cap = bytes;
    }
    return s->arena ? s->arena : (char *)"";
}

/* The shortest text that reads back as the same float (digits <= max). */
static int shortest(char *buf, size_t cap, double v, bool single) {
    if (isnan(v))
        return snprintf(buf, cap, "NaN");
    if (isinf(v))
        return snprintf(buf, cap, v > 0 ? "INF" : "-INF");
    int maxd = single ? 9 : 17, len = 0;
    for (int p = 1; p <= maxd; p++) {
        len = snprintf(buf, cap, "%.*g", p, v);
        double back = strtod(buf, NULL);
        if (single ? (float)back == (float)v : back == v)
            break;
    }
    return len;
}

/* Element i of a number or bool tensor as text. */
static int to_text(char *buf, size_t cap, const kb_tensor *x, size_t i) {
    switch (x->dtype) {
    case KILN_DTYPE_FLOAT: case KILN_DTYPE_FLOAT16: case KILN_DTYPE_BFLOAT16:
        return shortest(buf, cap, kb_ld(x->data, x->dtype, i), true);
    case KILN_DTYPE_DOUBLE: return shortest(buf, cap, ((const double *)x->data)[i], false);
    case KILN_DTYPE_INT64: return snprintf(buf, cap, "%lld", (long long)((const int64_t *)x->data)[i]);
    case KILN_DTYPE_UINT64:
        return snprintf(buf, cap, "%llu", (unsigned long long)((const uint64_t *)x->data)[i]);
    case KILN_DTYPE_BOOL: return snprintf(buf, cap, "%s", ((const uint8_t *)x->data)[i] ? "True" : "False");
    default: return snprintf(buf, cap, "%lld", (long long)kb_ld(x->data, x->dtype, i));
    }
}

/* Text to element i of a number or bool tensor: decimal or hexadecimal
 * floats, "NaN", "INF", "+INF", "-INF" (any case); integers in base 10. */
static void from_text(const char *s, kb_tensor *y, size_t i) {
    switch (y->dtype) {
    case KILN_DTYPE_INT64: ((int64_t *)y->data)[i] = strtoll(s, NULL, 10); return;
    case KILN_DTYPE_UINT64: ((uint64_t *)y->data)[i] = strtoull(s, NULL, 10); return;
    case KILN_DTYPE_DOUBLE: ((double *)y->data)[i] = strtod(s, NULL); return;
    case KILN_DTYPE_BOOL:
        ((uint8_t *)y->data)[i] = strcmp(s, "True") == 0 || strcmp(s, "true") == 0 || strtod(s, NULL) != 0;
        return;
    default: kb_st(y->data, y->dtype, i, strtod(s, NULL)); return;
    }
}

kiln_status kb_str_cast_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    kb_tensor *y = &r->out[0];
    size_t n = (size_t)kb_numel(x);
    if (x->dtype == KILN_DTYPE_STRING && y->dtype == KILN_DTYPE_STRING) {
        if (y->data != x->data && n)
            memmove(y->data, x->data, n * sizeof(char *));
        return KILN_OK;
    }
    if (x->dtype == KILN_DTYPE_STRING) {
        const char *const *s = x->data;
        for (size_t i = 0; i < n; i++)
            from_text(s[i] ? s[i] : "", y, i);
        return KILN_OK;
    }
    enum { W = 32 }; /* a float's %.17g, an int64, with room */
    char *a = arena(r->inst, n * W + 1);
    if (!a)
        return KILN_ERR_OUT_OF_MEMORY;
    const char **out = y->data;
    for (size_t i = 0; i < n; i++) {
        to_text(a + i * W, W, x, i);
        out[i] = a + i * W;
    }
    return KILN_OK;
}

static bool stopword(const kn_attr *sw, const char *s, bool sensitive) {
    for (size_t k = 0; sw && k < sw->n; k++)
        if (sensitive ? strcmp(sw->strings[k], s) == 0 : strcasecmp(sw->strings[k], s) == 0)
            return true;
    return false;
}

/* StringNormalizer: stopwords removed (compared exactly, or ignoring
 * ASCII case), then ASCII letters lowered or raised; bytes past ASCII are
 * kept as they are (no locale tables). */
static kiln_status strnorm_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    kb_tensor *y = &r->out[0];
    const kn_node *node = r->node;
    const kn_attr *sw = kn_attr_find(node, "stopwords");
    if (sw && sw->type != KN_ATTR_STRINGS)
        sw = NULL;
    bool sensitive = kn_attr_int(node, "is_case_sensitive", 0) != 0;
    const char *act = kn_attr_string(node, "case_change_action", "NONE");
    int mode = strcmp(act, "LOWER") == 0 ? 1 : strcmp(act, "UPPER") == 0 ? 2 : 0;
    size_t n = (size_t)kb_numel(x), bytes = 1;
    const char *const *s = x->data;
    for (size_t i = 0; i < n; i++)
        bytes += strlen(s[i] ? s[i] : "") + 1;
    char *a = arena(r->inst, bytes), *at = a;
    if (!a)
        return KILN_ERR_OUT_OF_MEMORY;
    const char **out = y->data;
    int64_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        const char *v = s[i] ? s[i] : "";
        if (stopword(sw, v, sensitive))
            continue;
        size_t len = strlen(v);
        for (size_t k = 0; k <= len; k++) {
            unsigned char ch = (unsigned char)v[k];
            at[k] = (char)(ch < 128 && mode == 1 ? tolower(ch) : ch < 128 && mode == 2 ? toupper(ch) : ch);
        }
        out[kept++] = at;
        at += len + 1;
    }
    if (kept == 0) { /* all removed: one empty string */
        *at = 0;
        out[kept++] = at;
    }
    y->dims[y->rank - 1] = kept;
    return KILN_OK;
}

const kb_kernel kb_cpu_string[] = {
    {"StringNormalizer", "", "ref", NULL, NULL, NULL, kb_str_prepare, kb_str_release, strnorm_run},
};
const size_t kb_cpu_string_count = KN_ARRAY_LEN(kb_cpu_string);
