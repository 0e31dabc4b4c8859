/* util.c - growable byte buffer, string map and clock. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core.h"

void kn_buf_append(kn_buf *b, const void *data, size_t n) {
    if (b->failed || n == 0)
        return;
    if (b->len + n > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->len + n) {
            if (nc > SIZE_MAX / 2) {
                b->failed = true;
                return;
            }
            nc *= 2;
        }
        uint8_t *p = kn_realloc(b->data, nc);
        if (!p) {
            b->failed = true;
            return;
        }
        b->data = p;
        b->cap = nc;
    }
    memcpy(b->data + b->len, data, n);
    b->len += n;
}

void kn_buf_printf(kn_buf *b, const char *fmt, ...) {
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = true;
        return;
    }
    if ((size_t)n < sizeof small) {
        kn_buf_append(b, small, (size_t)n);
        return;
    }
    char *big = kn_malloc((size_t)n + 1);
    if (!big) {
        b->failed = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    kn_buf_append(b, big, (size_t)n);
    kn_free(big);
}

void kn_buf_pad(kn_buf *b, size_t align) {
    static const uint8_t zeros[64] = {0};
    while (!b->failed && b->len % align)
        kn_buf_append(b, zeros, align - b->len % align < 64 ? align - b->len % align : 64);
}

void kn_buf_free(kn_buf *b) {
    kn_free(b->data);
    memset(b, 0, sizeof *b);
}

void kn_buf_json_string(kn_buf *b, const char *s) {
    kn_buf_append(b, "\"", 1);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            kn_buf_append(b, e, 2);
        } else if (c < 0x20) {
            kn_buf_printf(b, "\\u%04x", c);
        } else {
            kn_buf_append(b, s, 1);
        }
    }
    kn_buf_append(b, "\"", 1);
}

double kn_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static size_t str_hash(const char *s) {
    size_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

kiln_status kn_strmap_put(kn_strmap *m, const char *key, int val) {
    if ((m->count + 1) * 2 > m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 64;
        const char **nk = kn_calloc(nc, sizeof *nk);
        int *nv = kn_calloc(nc, sizeof *nv);
        if (!nk || !nv) {
            kn_free(nk);
            kn_free(nv);
            return KILN_ERR_OUT_OF_MEMORY;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->keys[i])
                continue;
            size_t j = str_hash(m->keys[i]) & (nc - 1);
            while (nk[j])
                j = (j + 1) & (nc - 1);
            nk[j] = m->keys[i];
            nv[j] = m->vals[i];
        }
        kn_free(m->keys);
        kn_free(m->vals);
        m->keys = nk;
        m->vals = nv;
        m->cap = nc;
    }
    size_t j = str_hash(key) & (m->cap - 1);
    while (m->keys[j]) {
        if (strcmp(m->keys[j], key) == 0) {
            m->vals[j] = val;
            return KILN_OK;
        }
        j = (j + 1) & (m->cap - 1);
    }
    m->keys[j] = key;
    m->vals[j] = val;
    m->count++;
    return KILN_OK;
}

int kn_strmap_get(const kn_strmap *m, const char *key) {
    if (!m->cap)
        return -1;
    size_t j = str_hash(key) & (m->cap - 1);
    while (m->keys[j]) {
        if (strcmp(m->keys[j], key) == 0)
            return m->vals[j];
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

void kn_strmap_free(kn_strmap *m) {
    kn_free(m->keys);
    kn_free(m->vals);
    memset(m, 0, sizeof *m);
}
