/* npy.c - NumPy .npy/.npz reading and writing of named host tensors, for
 * the accuracy tools and the Python package (npy.h; public form
 * include/kiln/kiln_tools.h). Every length and offset read from a file is
 * checked before use; errors name the file and byte offset. */
#include "tools/npy.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/file_open.h"

#ifdef KILN_HAVE_ZLIB
#include <zlib.h>
#endif

static bool fail(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static _Thread_local npy_fail_kind t_kind;

npy_fail_kind npy_last_kind(void) { return t_kind; }

static bool fail(char *err, const char *fmt, ...) {
    t_kind = strstr(fmt, "out of memory") ? NPY_FAIL_MEMORY : NPY_FAIL_PARSE;
    va_list ap;
    va_start(ap, fmt);
    if (err)
        vsnprintf(err, NPY_ERR_CAP, fmt, ap);
    va_end(ap);
    return false;
}

/* A failure to read or write the file itself (not its content). */
#define fail_io(...) (fail(__VA_ARGS__), t_kind = t_kind == NPY_FAIL_MEMORY ? t_kind : NPY_FAIL_IO, false)

static char *dupstr(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

bool npy_volume(int rank, const int64_t *dims, size_t *n) {
    size_t v = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0)
            return false;
        size_t d = (size_t)dims[i];
        if (d && v > SIZE_MAX / d)
            return false;
        v *= d;
    }
    *n = v;
    return true;
}

/* ---------------- dtypes ----------------
 * .npy descr strings: byte order ('<' little, '|' not applicable, '=' native,
 * '>' big) then kind and item size. */

static const struct {
    const char *code; /* kind + size, without the byte order */
    kiln_dtype dtype;
} k_codes[] = {
    {"f2", KILN_DTYPE_FLOAT16}, {"f4", KILN_DTYPE_FLOAT},  {"f8", KILN_DTYPE_DOUBLE},
    {"i1", KILN_DTYPE_INT8},    {"i2", KILN_DTYPE_INT16},  {"i4", KILN_DTYPE_INT32},
    {"i8", KILN_DTYPE_INT64},   {"u1", KILN_DTYPE_UINT8},  {"u2", KILN_DTYPE_UINT16},
    {"u4", KILN_DTYPE_UINT32},  {"u8", KILN_DTYPE_UINT64}, {"b1", KILN_DTYPE_BOOL},
    {"V2", KILN_DTYPE_BFLOAT16},
};

static bool descr_to_dtype(const char *d, kiln_dtype *out) {
    if (strcmp(d, "bfloat16") == 0) {
        *out = KILN_DTYPE_BFLOAT16;
        return true;
    }
    if (d[0] != '<' && d[0] != '|' && d[0] != '=')
        return false;
    for (size_t i = 0; i < sizeof k_codes / sizeof k_codes[0]; i++)
        if (strcmp(d + 1, k_codes[i].code) == 0) {
            /* '|' is only meaningful for one-byte items and void */
            *out = k_codes[i].dtype;
            return true;
        }
    return false;
}

static const char *dtype_to_descr(kiln_dtype dt) {
    switch (dt) {
    case KILN_DTYPE_FLOAT16: return "<f2";
    case KILN_DTYPE_FLOAT: return "<f4";
    case KILN_DTYPE_DOUBLE: return "<f8";
    case KILN_DTYPE_INT8: return "|i1";
    case KILN_DTYPE_INT16: return "<i2";
    case KILN_DTYPE_INT32: return "<i4";
    case KILN_DTYPE_INT64: return "<i8";
    case KILN_DTYPE_UINT8: return "|u1";
    case KILN_DTYPE_UINT16: return "<u2";
    case KILN_DTYPE_UINT32: return "<u4";
    case KILN_DTYPE_UINT64: return "<u8";
    case KILN_DTYPE_BOOL: return "|b1";
    case KILN_DTYPE_BFLOAT16: return "<V2";
    default: return NULL;
    }
}

/* ---------------- .npy ----------------
 * Layout: bytes 0-5 "\x93NUMPY"; byte 6 major version (1, 2 or 3); byte 7
 * minor; then the header length, 2 bytes little-endian (v1) or 4 bytes (v2,
 * v3); then the header, a Python dict literal (ASCII; UTF-8 in v3) with keys
 * 'descr', 'fortran_order' and 'shape', padded with spaces and ended by
 * '\n'; then the data, item after item. */

typedef struct hdr_parser {
    const char *s, *end;
    size_t base;    /* file offset of s[0] */
    const char *p;
    const char *file;
    char *err;
} hdr_parser;

static size_t hp_off(const hdr_parser *h) { return h->base + (size_t)(h->p - h->s); }

static void hp_ws(hdr_parser *h) {
    while (h->p < h->end && (*h->p == ' ' || *h->p == '\t' || *h->p == '\n' || *h->p == '\r'))
        h->p++;
}

static bool hp_expect(hdr_parser *h, char c, const char *what) {
    hp_ws(h);
    if (h->p >= h->end || *h->p != c)
        return fail(h->err, "%s: byte %zu: header: expected '%c' %s", h->file, hp_off(h), c,
                    what);
    h->p++;
    return true;
}

static bool hp_string(hdr_parser *h, char *buf, size_t cap) {
    hp_ws(h);
    if (h->p >= h->end || (*h->p != '\'' && *h->p != '"'))
        return fail(h->err, "%s: byte %zu: header: expected a quoted string", h->file, hp_off(h));
    char q = *h->p++;
    size_t n = 0;
    while (h->p < h->end && *h->p != q) {
        if (n + 1 >= cap)
            return fail(h->err, "%s: byte %zu: header: string too long", h->file, hp_off(h));
        buf[n++] = *h->p++;
    }
    if (h->p >= h->end)
        return fail(h->err, "%s: byte %zu: header: unterminated string", h->file, hp_off(h));
    h->p++;
    buf[n] = '\0';
    return true;
}

static bool hp_word(hdr_parser *h, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(h->end - h->p) >= n && memcmp(h->p, w, n) == 0) {
        h->p += n;
        return true;
    }
    return false;
}

static bool hp_shape(hdr_parser *h, npy_array *a) {
    if (!hp_expect(h, '(', "to open the shape tuple"))
        return false;
    a->rank = 0;
    for (;;) {
        hp_ws(h);
        if (h->p < h->end && *h->p == ')') {
            h->p++;
            return true;
        }
        if (h->p >= h->end || *h->p < '0' || *h->p > '9')
            return fail(h->err, "%s: byte %zu: header: expected a dimension (a non-negative "
                        "integer) in the shape", h->file, hp_off(h));
        int64_t v = 0;
        while (h->p < h->end && *h->p >= '0' && *h->p <= '9') {
            if (v > (INT64_MAX - 9) / 10)
                return fail(h->err, "%s: byte %zu: header: dimension too large", h->file,
                            hp_off(h));
            v = v * 10 + (*h->p++ - '0');
        }
        hp_ws(h);
        if (h->p < h->end && *h->p == 'L') /* Python 2 long suffix */
            h->p++;
        if (a->rank == KILN_MAX_DIMS)
            return fail(h->err, "%s: byte %zu: header: more than %d dimensions", h->file,
                        hp_off(h), KILN_MAX_DIMS);
        a->dims[a->rank++] = v;
        hp_ws(h);
        if (h->p < h->end && *h->p == ',')
            h->p++;
        else if (h->p < h->end && *h->p == ')')
            continue;
        else
            return fail(h->err, "%s: byte %zu: header: expected ',' or ')' in the shape",
                        h->file, hp_off(h));
    }
}

/* Fortran-ordered data to C order. */
static void fortran_to_c(const npy_array *a, const uint8_t *src, uint8_t *dst, size_t n,
                         size_t es) {
    int64_t idx[KILN_MAX_DIMS] = {0};
    for (size_t k = 0; k < n; k++) {
        size_t off = 0, stride = 1;
        for (int d = 0; d < a->rank; d++) {
            off += (size_t)idx[d] * stride;
            stride *= (size_t)a->dims[d];
        }
        memcpy(dst + k * es, src + off * es, es);
        for (int d = a->rank - 1; d >= 0; d--) {
            if (++idx[d] < a->dims[d])
                break;
            idx[d] = 0;
        }
    }
}

bool npy_decode(const void *buf, size_t size, const char *file, npy_array *out, char *err) {
    const uint8_t *b = buf;
    if (size < 10)
        return fail(err, "%s: byte 0: %zu bytes is too short for a .npy file (at least 10)", file,
                    size);
    if (memcmp(b, "\x93NUMPY", 6) != 0)
        return fail(err, "%s: byte 0: not a .npy file (no \\x93NUMPY magic)", file);
    int major = b[6];
    size_t hlen, hstart;
    if (major == 1) {
        hlen = (size_t)b[8] | (size_t)b[9] << 8;
        hstart = 10;
    } else if (major == 2 || major == 3) {
        if (size < 12)
            return fail(err, "%s: byte 8: truncated header length", file);
        hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
        hstart = 12;
    } else {
        return fail(err, "%s: byte 6: unsupported .npy format version %d.%d (kiln reads 1, 2 "
                    "and 3)", file, major, b[7]);
    }
    if (hlen > size - hstart)
        return fail(err, "%s: byte %zu: header of %zu bytes runs past the end of the file "
                    "(%zu bytes)", file, hstart - 2, hlen, size);
    hdr_parser h = {(const char *)b + hstart, (const char *)b + hstart + hlen, hstart,
                    (const char *)b + hstart, file, err};
    char key[64], descr[64] = "";
    bool have_descr = false, have_order = false, have_shape = false, fortran = false;
    npy_array a;
    memset(&a, 0, sizeof a);
    if (!hp_expect(&h, '{', "to open the header dict"))
        return false;
    for (;;) {
        hp_ws(&h);
        if (h.p < h.end && *h.p == '}')
            break;
        size_t key_off = hp_off(&h);
        if (!hp_string(&h, key, sizeof key) || !hp_expect(&h, ':', "after a key"))
            return false;
        hp_ws(&h);
        if (strcmp(key, "descr") == 0) {
            if (h.p < h.end && *h.p == '[')
                return fail(err, "%s: byte %zu: structured dtypes are not supported", file,
                            hp_off(&h));
            size_t voff = hp_off(&h);
            if (!hp_string(&h, descr, sizeof descr))
                return false;
            if (descr[0] == '>' && strcmp(descr + 1, "i1") != 0 && strcmp(descr + 1, "u1") != 0 &&
                strcmp(descr + 1, "b1") != 0)
                return fail(err, "%s: byte %zu: big-endian data ('%s') is not supported; save "
                            "it little-endian (arr.astype(arr.dtype.newbyteorder('<')))",
                            file, voff, descr);
            if (descr[0] == '>')
                descr[0] = '|';
            if (!descr_to_dtype(descr, &a.dtype))
                return fail(err, "%s: byte %zu: unsupported dtype '%s' (kiln reads f2 f4 f8 i1 "
                            "i2 i4 i8 u1 u2 u4 u8 b1 and bfloat16 as <V2)", file, voff, descr);
            have_descr = true;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (hp_word(&h, "True"))
                fortran = true;
            else if (hp_word(&h, "False"))
                fortran = false;
            else
                return fail(err, "%s: byte %zu: fortran_order must be True or False", file,
                            hp_off(&h));
            have_order = true;
        } else if (strcmp(key, "shape") == 0) {
            if (!hp_shape(&h, &a))
                return false;
            have_shape = true;
        } else {
            return fail(err, "%s: byte %zu: unexpected header key '%s'", file, key_off, key);
        }
        hp_ws(&h);
        if (h.p < h.end && *h.p == ',') {
            h.p++;
            continue;
        }
        hp_ws(&h);
        if (h.p < h.end && *h.p == '}')
            break;
        return fail(err, "%s: byte %zu: header: expected ',' or '}'", file, hp_off(&h));
    }
    if (!have_descr || !have_order || !have_shape)
        return fail(err, "%s: byte %zu: header lacks '%s'", file, hstart,
                    !have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
    size_t n, es = kiln_dtype_size(a.dtype), data_off = hstart + hlen;
    if (!npy_volume(a.rank, a.dims, &n) || (es && n > SIZE_MAX / es))
        return fail(err, "%s: byte %zu: shape is too large", file, hstart);
    size_t bytes = n * es, have = size - data_off;
    if (have < bytes)
        return fail(err, "%s: byte %zu: data truncated: shape needs %zu bytes of %s, the file "
                    "has %zu", file, data_off, bytes, descr, have);
    if (have > bytes)
        return fail(err, "%s: byte %zu: %zu unexpected bytes after the data", file,
                    data_off + bytes, have - bytes);
    a.data = malloc(bytes ? bytes : 1);
    if (!a.data)
        return fail(err, "%s: out of memory (%zu bytes)", file, bytes);
    if (fortran && a.rank > 1)
        fortran_to_c(&a, b + data_off, a.data, n, es);
    else if (bytes)
        memcpy(a.data, b + data_off, bytes);
    if (a.dtype == KILN_DTYPE_BOOL)
        for (size_t i = 0; i < n; i++)
            ((uint8_t *)a.data)[i] = ((uint8_t *)a.data)[i] != 0;
    a.bytes = bytes;
    *out = a;
    return true;
}

bool npy_encode(const npy_array *a, void **buf, size_t *size, char *err) {
    const char *descr = dtype_to_descr(a->dtype);
    if (!descr)
        return fail(err, "tensor '%s': data type %s cannot be written to .npy",
                    a->name ? a->name : "", kiln_dtype_name(a->dtype));
    char hdr[512];
    int len = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                       descr);
    for (int d = 0; d < a->rank; d++)
        len += snprintf(hdr + len, sizeof hdr - (size_t)len, "%lld%s", (long long)a->dims[d],
                        a->rank == 1 ? "," : d + 1 < a->rank ? ", " : "");
    len += snprintf(hdr + len, sizeof hdr - (size_t)len, "), }");
    /* pad with spaces so that magic + length + header + '\n' is a multiple of 64 */
    size_t pre = 10, total = pre + (size_t)len + 1;
    size_t padded = (total + 63) / 64 * 64;
    size_t hlen = padded - pre;
    if (hlen > 0xffff)
        return fail(err, "tensor '%s': .npy header too long", a->name ? a->name : "");
    uint8_t *out = malloc(padded + a->bytes + 1);
    if (!out)
        return fail(err, "out of memory");
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    out[8] = (uint8_t)(hlen & 0xff);
    out[9] = (uint8_t)(hlen >> 8);
    memcpy(out + pre, hdr, (size_t)len);
    memset(out + pre + len, ' ', hlen - (size_t)len - 1);
    out[padded - 1] = '\n';
    if (a->bytes)
        memcpy(out + padded, a->data, a->bytes);
    *buf = out;
    *size = padded + a->bytes;
    return true;
}

/* ---------------- .npz (zip) ----------------
 * Read through the central directory. End of central directory record
 * (EOCD, signature 0x06054b50, 22 bytes + comment): entries in the directory
 * at +10 (2 bytes), directory size at +12 (4), directory offset at +16 (4).
 * When those are saturated, the zip64 EOCD locator (0x07064b50) sits 20 bytes
 * before the EOCD and gives the zip64 EOCD's offset at +8 (8); the zip64 EOCD
 * (0x06064b50) holds the entry count at +32 (8) and the directory offset at
 * +48 (8). Each directory entry (0x02014b50, 46 bytes + name + extra +
 * comment): method at +10, crc32 at +16, compressed size at +20, size at
 * +24, name length at +28, extra length at +30, comment length at +32,
 * local header offset at +42. A zip64 extra field (id 0x0001) holds, in this
 * order, the size, compressed size and offset whose 32-bit field is
 * 0xffffffff. Local header (0x04034b50, 30 bytes + name + extra): the data
 * follows; its own name/extra lengths at +26/+28. Method 0 is stored, 8 is
 * deflate. */

static uint32_t rd16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t rd32(const uint8_t *p) { return rd16(p) | rd16(p + 2) << 16; }
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr16(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void wr32(uint8_t *p, uint32_t v) {
    wr16(p, v & 0xffff);
    wr16(p + 2, v >> 16);
}

static uint32_t crc32_update(uint32_t crc, const uint8_t *p, size_t n) {
    static uint32_t table[256];
    static int ready;
    if (!ready) { /* built on first use; the same values every time, so a race is harmless */
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    crc = ~crc;
    for (size_t i = 0; i < n; i++)
        crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

static bool inflate_member(const uint8_t *src, size_t csize, uint8_t *dst, size_t usize,
                           const char *file, const char *member, size_t off, char *err) {
#ifdef KILN_HAVE_ZLIB
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, -15) != Z_OK)
        return fail(err, "%s: cannot start zlib", file);
    size_t in_done = 0, out_done = 0;
    int r = Z_OK;
    while (r == Z_OK) {
        /* zlib counts in uInt: feed large members in pieces */
        size_t in_left = csize - in_done, out_left = usize - out_done;
        z.next_in = (Bytef *)(uintptr_t)(src + in_done);
        z.avail_in = (uInt)(in_left > 0x40000000u ? 0x40000000u : in_left);
        z.next_out = dst + out_done;
        z.avail_out = (uInt)(out_left > 0x40000000u ? 0x40000000u : out_left);
        uInt ai = z.avail_in, ao = z.avail_out;
        r = inflate(&z, Z_FINISH);
        in_done += ai - z.avail_in;
        out_done += ao - z.avail_out;
        if (r == Z_BUF_ERROR && (ai - z.avail_in || ao - z.avail_out))
            r = Z_OK; /* progress: go on with the next piece */
        if (r == Z_OK && in_done == csize && out_done == usize)
            r = Z_BUF_ERROR;
    }
    inflateEnd(&z);
    if (r != Z_STREAM_END || out_done != usize)
        return fail(err, "%s: byte %zu: deflate data is corrupt or its size is not the %zu "
                    "bytes the directory says%s%s", member, off, usize,
                    z.msg ? ": " : "", z.msg ? z.msg : "");
    return true;
#else
    (void)src;
    (void)csize;
    (void)dst;
    (void)usize;
    (void)file;
    return fail(err, "%s: byte %zu: deflate-compressed, and this kiln was built without zlib "
                "(save with np.savez, not np.savez_compressed)", member, off);
#endif
}

static bool zip64_extra(const uint8_t *ex, size_t exlen, uint64_t *usize, uint64_t *csize,
                        uint64_t *loff) {
    size_t p = 0;
    while (p + 4 <= exlen) {
        uint32_t id = rd16(ex + p), len = rd16(ex + p + 2);
        if (p + 4 + len > exlen)
            return false;
        if (id == 1) {
            size_t q = p + 4, end = q + len;
            uint64_t *f[3] = {usize, csize, loff};
            for (int k = 0; k < 3; k++) {
                if (*f[k] != 0xffffffffu)
                    continue;
                if (q + 8 > end)
                    return false;
                *f[k] = rd64(ex + q);
                q += 8;
            }
            return true;
        }
        p += 4 + len;
    }
    return true;
}

size_t npy_input_budget(void) {
    const char *env = getenv("KILN_MAX_INPUT_BYTES");
    if (env && *env) {
        char *end = NULL;
        errno = 0;
        unsigned long long v = strtoull(env, &end, 10);
        if (errno == 0 && end && *end == '\0' && v > 0)
            return v > SIZE_MAX ? SIZE_MAX : (size_t)v;
    }
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && (unsigned long)pages <= SIZE_MAX / 2 / (unsigned long)page)
        return (size_t)pages * (size_t)page / 2;
    return (size_t)1 << 32;
}

/* One .npy member, as its central directory entry and local header give it. */
typedef struct npz_member {
    const char *name; /* in the file, not NUL-terminated; nlen bytes with ".npy" */
    size_t nlen;
    size_t dir;       /* offset of the directory entry */
    size_t loff;      /* local header */
    size_t data, end; /* the member's bytes in the file: [data, end) */
    uint32_t method, crc;
    uint64_t usize;
} npz_member;

/* Names in messages: at most 200 bytes of a member's name. */
#define MNAME(m) (int)((m)->nlen > 200 ? 200 : (m)->nlen), (m)->name

static int by_offset(const void *a, const void *b) {
    const npz_member *x = *(npz_member *const *)a, *y = *(npz_member *const *)b;
    return x->loff < y->loff ? -1 : x->loff > y->loff;
}

static int by_name(const void *a, const void *b) {
    const npz_member *x = *(npz_member *const *)a, *y = *(npz_member *const *)b;
    size_t n = x->nlen < y->nlen ? x->nlen : y->nlen;
    int c = memcmp(x->name, y->name, n);
    return c ? c : x->nlen < y->nlen ? -1 : x->nlen > y->nlen;
}

/* Read directory entry e at *p: fills *m for a .npy member (*is_npy), and
 * moves *p past the entry. */
static bool npz_entry(const uint8_t *b, size_t size, const char *file, uint64_t e, size_t *p,
                      npz_member *m, bool *is_npy, char *err) {
    size_t q = *p;
    if (q > size || size - q < 46 || rd32(b + q) != 0x02014b50u)
        return fail(err, "%s: byte %zu: central directory entry %llu is damaged", file, q,
                    (unsigned long long)e);
    uint32_t method = rd16(b + q + 10), crc = rd32(b + q + 16);
    uint64_t csize = rd32(b + q + 20), usize = rd32(b + q + 24), loff = rd32(b + q + 42);
    size_t nlen = rd16(b + q + 28), exlen = rd16(b + q + 30), clen = rd16(b + q + 32);
    if (size - q - 46 < nlen + exlen + clen)
        return fail(err, "%s: byte %zu: central directory entry %llu runs past the end", file,
                    q, (unsigned long long)e);
    memset(m, 0, sizeof *m);
    m->name = (const char *)b + q + 46;
    m->nlen = nlen;
    m->dir = q;
    if (!zip64_extra(b + q + 46 + nlen, exlen, &usize, &csize, &loff))
        return fail(err, "%s: byte %zu: member '%.*s': damaged zip64 extra field", file,
                    q + 46 + nlen, MNAME(m));
    *p = q + 46 + nlen + exlen + clen;
    *is_npy = nlen >= 4 && memcmp(m->name + nlen - 4, ".npy", 4) == 0;
    if (!*is_npy)
        return true; /* not an array: skipped */
    if (memchr(m->name, 0, nlen))
        return fail(err, "%s: byte %zu: member name holds a NUL byte", file, q + 46);
    if (loff > size || size - loff < 30 || rd32(b + loff) != 0x04034b50u)
        return fail(err, "%s: byte %llu: member '%.*s': bad local header", file,
                    (unsigned long long)loff, MNAME(m));
    size_t data = (size_t)loff + 30 + rd16(b + loff + 26) + rd16(b + loff + 28);
    if (data > size || csize > size - data)
        return fail(err, "%s: byte %llu: member '%.*s': %llu bytes of data run past the end "
                    "of the file", file, (unsigned long long)loff, MNAME(m),
                    (unsigned long long)csize);
    if (method != 0 && method != 8)
        return fail(err, "%s: byte %llu: member '%.*s': compression method %u is not "
                    "supported (stored and deflate are)", file, (unsigned long long)loff,
                    MNAME(m), method);
    /* deflate expands at most 1032 to 1: a member claiming more is damaged
     * (and would have us allocate what the file cannot fill) */
    if (usize > (uint64_t)1 << 40 || (method == 0 && usize != csize) ||
        (method == 8 && usize > csize * 1032 + 1024))
        return fail(err, "%s: byte %llu: member '%.*s': implausible size %llu", file,
                    (unsigned long long)loff, MNAME(m), (unsigned long long)usize);
    m->loff = (size_t)loff;
    m->data = data;
    m->end = data + (size_t)csize;
    m->method = method;
    m->crc = crc;
    m->usize = usize;
    return true;
}

/* The directory's members may not share bytes (an archive whose entries all
 * point at one deflate stream would expand without bound), may not repeat a
 * name, and together may not expand past the input budget. */
static bool npz_check_members(npz_member *m, size_t n, const char *file, char *err) {
    npz_member **v = malloc((n ? n : 1) * sizeof *v);
    if (!v)
        return fail(err, "%s: out of memory", file);
    bool ok = true;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        v[i] = &m[i];
        total = total > UINT64_MAX - m[i].usize ? UINT64_MAX : total + m[i].usize;
    }
    qsort(v, n, sizeof *v, by_offset);
    for (size_t i = 1; ok && i < n; i++)
        if (v[i]->loff < v[i - 1]->end)
            ok = fail(err, "%s: byte %zu: member '%.*s' overlaps member '%.*s' (bytes %zu to "
                      "%zu): members of an archive may not share data", file, v[i]->loff,
                      MNAME(v[i]), MNAME(v[i - 1]), v[i - 1]->loff, v[i - 1]->end);
    if (ok) {
        qsort(v, n, sizeof *v, by_name);
        for (size_t i = 1; ok && i < n; i++)
            if (by_name(&v[i - 1], &v[i]) == 0)
                ok = fail(err, "%s: byte %zu: member '%.*s' appears twice in the archive",
                          file, v[i]->dir, MNAME(v[i]));
    }
    size_t budget = npy_input_budget();
    if (ok && total > budget)
        ok = fail(err, "%s: its arrays expand to %llu bytes, over the input memory budget of "
                  "%zu bytes (set KILN_MAX_INPUT_BYTES to change it)", file,
                  (unsigned long long)total, budget);
    free(v);
    return ok;
}

/* Append a decoded array, taking its name and data. */
static bool list_take(npy_list *l, npy_array *a) {
    if (l->n == l->cap) {
        if (l->cap > INT_MAX / 2)
            return false;
        int cap = l->cap ? l->cap * 2 : 8;
        npy_array *ni = realloc(l->items, (size_t)cap * sizeof *ni);
        if (!ni)
            return false;
        l->items = ni;
        l->cap = cap;
    }
    l->items[l->n++] = *a;
    memset(a, 0, sizeof *a);
    return true;
}

/* Decode member m (checked by npz_entry) and append it to l. */
static bool npz_member_decode(const uint8_t *b, const npz_member *m, const char *file,
                              npy_list *l, char *err) {
    uint8_t *mem = (uint8_t *)(uintptr_t)(b + m->data), *owned = NULL;
    size_t usize = (size_t)m->usize;
    char where[1200];
    snprintf(where, sizeof where, "%s[%.*s]", file, MNAME(m));
    if (m->method == 8) {
        owned = malloc(usize + 1);
        if (!owned)
            return fail(err, "%s: out of memory (%zu bytes)", where, usize);
        if (!inflate_member(b + m->data, m->end - m->data, owned, usize, file, where, m->data,
                            err)) {
            free(owned);
            return false;
        }
        mem = owned;
    }
    if (crc32_update(0, mem, usize) != m->crc) {
        free(owned);
        return fail(err, "%s: byte %zu: member '%.*s': CRC-32 mismatch (the file is damaged)",
                    file, m->data, MNAME(m));
    }
    npy_array a;
    bool ok = npy_decode(mem, usize, where, &a, err);
    free(owned);
    if (!ok)
        return false;
    a.name = dupstr(m->name, m->nlen - 4);
    if (!a.name || !list_take(l, &a)) {
        npy_array_free(&a);
        return fail(err, "%s: out of memory", file);
    }
    return true;
}

bool npz_decode(const void *buf, size_t size, const char *file, npy_list *out, char *err) {
    const uint8_t *b = buf;
    if (size < 22)
        return fail(err, "%s: byte 0: %zu bytes is too short for a .npz (zip) file", file, size);
    size_t eocd = SIZE_MAX;
    size_t lo = size > 22 + 65535 ? size - 22 - 65535 : 0;
    for (size_t p = size - 22 + 1; p-- > lo;)
        if (rd32(b + p) == 0x06054b50u) {
            eocd = p;
            break;
        }
    if (eocd == SIZE_MAX)
        return fail(err, "%s: byte %zu: not a .npz (zip) file: no end-of-central-directory "
                    "record", file, size);
    uint64_t count = rd16(b + eocd + 10), cd_off = rd32(b + eocd + 16);
    if ((count == 0xffff || cd_off == 0xffffffffu) && eocd >= 20 &&
        rd32(b + eocd - 20) == 0x07064b50u) {
        uint64_t z64 = rd64(b + eocd - 20 + 8);
        if (size < 56 || z64 > size - 56 || rd32(b + z64) != 0x06064b50u)
            return fail(err, "%s: byte %zu: bad zip64 end-of-central-directory locator", file,
                        eocd - 20);
        count = rd64(b + z64 + 32);
        cd_off = rd64(b + z64 + 48);
    }
    if (cd_off > size)
        return fail(err, "%s: byte %zu: central directory offset %llu is past the end of the "
                    "file", file, eocd + 16, (unsigned long long)cd_off);
    /* each directory entry takes at least 46 bytes */
    if (count > (size - cd_off) / 46)
        return fail(err, "%s: byte %zu: %llu directory entries cannot fit in the %llu bytes "
                    "after the directory's offset", file, eocd + 10, (unsigned long long)count,
                    (unsigned long long)(size - cd_off));
    npz_member *m = malloc(((size_t)count + 1) * sizeof *m);
    if (!m)
        return fail(err, "%s: out of memory", file);
    size_t n = 0, p = (size_t)cd_off;
    bool ok = true;
    for (uint64_t e = 0; ok && e < count; e++) {
        bool is_npy = false;
        ok = npz_entry(b, size, file, e, &p, &m[n], &is_npy, err);
        if (ok && is_npy)
            n++;
    }
    if (ok)
        ok = npz_check_members(m, n, file, err);
    npy_list l;
    memset(&l, 0, sizeof l);
    for (size_t i = 0; ok && i < n; i++)
        ok = npz_member_decode(b, &m[i], file, &l, err);
    free(m);
    if (!ok) {
        npy_list_free(&l);
        return false;
    }
    *out = l;
    return true;
}

bool npz_encode(const npy_list *l, void **buf, size_t *size, char *err) {
    /* first pass: encode members; second: lay out local headers, the
     * directory and the EOCD */
    void **imgs = calloc((size_t)l->n + 1, sizeof *imgs);
    size_t *lens = calloc((size_t)l->n + 1, sizeof *lens);
    uint32_t *crcs = calloc((size_t)l->n + 1, sizeof *crcs);
    uint8_t *out = NULL;
    bool ok = imgs && lens && crcs;
    size_t total = 22;
    for (int i = 0; ok && i < l->n; i++) {
        ok = npy_encode(&l->items[i], &imgs[i], &lens[i], err);
        if (ok) {
            crcs[i] = crc32_update(0, imgs[i], lens[i]);
            size_t nl = strlen(l->items[i].name) + 4;
            total += 30 + nl + lens[i] + 46 + nl;
            if (lens[i] >= 0xffffffffu || nl > 0xffff)
                ok = fail(err, "tensor '%s' is too large for kiln's .npz writer (4 GiB)",
                          l->items[i].name);
        }
    }
    if (ok && (total >= 0xffffffffu || l->n >= 0xffff))
        ok = fail(err, ".npz too large for kiln's writer (4 GiB, 65535 members)");
    if (ok && !(out = malloc(total)))
        ok = fail(err, "out of memory");
    if (ok) {
        size_t p = 0;
        size_t *offs = lens; /* reuse: local header offsets after the data is placed */
        size_t *sizes = calloc((size_t)l->n + 1, sizeof *sizes);
        if (!sizes) {
            ok = fail(err, "out of memory");
        } else {
            for (int i = 0; i < l->n; i++) {
                size_t nl = strlen(l->items[i].name);
                sizes[i] = lens[i];
                offs[i] = p;
                uint8_t *h = out + p;
                memset(h, 0, 30);
                wr32(h, 0x04034b50u);
                wr16(h + 4, 20);
                wr32(h + 14, crcs[i]);
                wr32(h + 18, (uint32_t)sizes[i]);
                wr32(h + 22, (uint32_t)sizes[i]);
                wr16(h + 26, (uint32_t)(nl + 4));
                memcpy(h + 30, l->items[i].name, nl);
                memcpy(h + 30 + nl, ".npy", 4);
                memcpy(h + 34 + nl, imgs[i], sizes[i]);
                p += 34 + nl + sizes[i];
            }
            size_t cd = p;
            for (int i = 0; i < l->n; i++) {
                size_t nl = strlen(l->items[i].name);
                uint8_t *h = out + p;
                memset(h, 0, 46);
                wr32(h, 0x02014b50u);
                wr16(h + 4, 20);
                wr16(h + 6, 20);
                wr32(h + 16, crcs[i]);
                wr32(h + 20, (uint32_t)sizes[i]);
                wr32(h + 24, (uint32_t)sizes[i]);
                wr16(h + 28, (uint32_t)(nl + 4));
                wr32(h + 42, (uint32_t)offs[i]);
                memcpy(h + 46, l->items[i].name, nl);
                memcpy(h + 46 + nl, ".npy", 4);
                p += 50 + nl;
            }
            uint8_t *e = out + p;
            memset(e, 0, 22);
            wr32(e, 0x06054b50u);
            wr16(e + 8, (uint32_t)l->n);
            wr16(e + 10, (uint32_t)l->n);
            wr32(e + 12, (uint32_t)(p - cd));
            wr32(e + 16, (uint32_t)cd);
            p += 22;
            *buf = out;
            *size = p;
            out = NULL;
            free(sizes);
        }
    }
    for (int i = 0; imgs && i < l->n; i++)
        free(imgs[i]);
    free(imgs);
    free(lens);
    free(crcs);
    free(out);
    return ok;
}

/* ---------------- files ---------------- */

/* The whole of a regular file (kn_open_regular: a FIFO or device is refused
 * without blocking), at most the size it had when opened and at most the
 * input budget. */
static bool read_all(const char *path, uint8_t **data, size_t *size, char *err) {
    int fd = -1;
    uint64_t n = 0;
    int e = kn_open_regular(path, &fd, &n);
    if (e == KN_OPEN_NOT_REGULAR)
        return fail_io(err, "'%s' is not a regular file (a FIFO, device or directory is not read)",
                    path);
    if (e != 0)
        return fail_io(err, "cannot open '%s': %s", path, strerror(e));
    size_t budget = npy_input_budget();
    if (n > budget) {
        close(fd);
        return fail_io(err, "'%s' is %llu bytes, over the input memory budget of %zu bytes (set "
                    "KILN_MAX_INPUT_BYTES to change it)", path, (unsigned long long)n, budget);
    }
    uint8_t *b = n < SIZE_MAX ? malloc((size_t)n + 1) : NULL;
    if (!b) {
        close(fd);
        return fail_io(err, "cannot read '%s': out of memory (%llu bytes)", path,
                    (unsigned long long)n);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, b + got, (size_t)n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int re = r < 0 ? errno : 0;
            close(fd);
            free(b);
            return re ? fail_io(err, "cannot read '%s' at byte %zu: %s", path, got, strerror(re))
                      : fail_io(err, "'%s' ended at byte %zu of %llu (it changed while being read)",
                             path, got, (unsigned long long)n);
        }
        got += (size_t)r;
    }
    close(fd);
    *data = b;
    *size = got;
    return true;
}

static bool write_all(const char *path, const void *data, size_t size, char *err) {
    FILE *f = fopen(path, "wb");
    if (!f)
        return fail_io(err, "cannot create '%s': %s", path, strerror(errno));
    bool ok = fwrite(data, 1, size, f) == size;
    ok = fclose(f) == 0 && ok;
    return ok || fail_io(err, "cannot write '%s': %s", path, strerror(errno));
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

bool npy_load_file(const char *path, npy_list *out, char *err) {
    uint8_t *data = NULL;
    size_t size = 0;
    if (!read_all(path, &data, &size, err))
        return false;
    bool ok;
    bool is_zip = size >= 4 && rd32(data) == 0x04034b50u;
    if (is_zip || ends_with(path, ".npz")) {
        ok = npz_decode(data, size, path, out, err);
    } else {
        npy_array a;
        ok = npy_decode(data, size, path, &a, err);
        if (ok) {
            const char *base = strrchr(path, '/');
            base = base ? base + 1 : path;
            size_t n = strlen(base);
            if (ends_with(base, ".npy"))
                n -= 4;
            memset(out, 0, sizeof *out);
            char *nm = dupstr(base, n);
            ok = nm && npy_list_add(out, nm, a.dtype, a.rank, a.dims, a.data, a.bytes);
            free(nm);
            npy_array_free(&a);
            if (!ok)
                fail(err, "out of memory");
        }
    }
    free(data);
    return ok;
}

bool npy_save_file(const char *path, const npy_array *a, char *err) {
    void *buf;
    size_t size;
    if (!npy_encode(a, &buf, &size, err))
        return false;
    bool ok = write_all(path, buf, size, err);
    free(buf);
    return ok;
}

bool npz_save_file(const char *path, const npy_list *l, char *err) {
    void *buf;
    size_t size;
    if (!npz_encode(l, &buf, &size, err))
        return false;
    bool ok = write_all(path, buf, size, err);
    free(buf);
    return ok;
}

/* ---------------- entries ---------------- */

bool npy_list_add(npy_list *l, const char *name, kiln_dtype dtype, int rank, const int64_t *dims,
                  const void *data, size_t bytes) {
    if (rank < 0 || rank > KILN_MAX_DIMS)
        return false;
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 8;
        npy_array *ni = realloc(l->items, (size_t)cap * sizeof *ni);
        if (!ni)
            return false;
        l->items = ni;
        l->cap = cap;
    }
    npy_array *a = &l->items[l->n];
    memset(a, 0, sizeof *a);
    a->name = dupstr(name, strlen(name));
    a->data = malloc(bytes ? bytes : 1);
    if (!a->name || !a->data) {
        free(a->name);
        free(a->data);
        return false;
    }
    a->dtype = dtype;
    a->rank = rank;
    if (rank)
        memcpy(a->dims, dims, (size_t)rank * sizeof *dims);
    if (bytes)
        memcpy(a->data, data, bytes);
    a->bytes = bytes;
    l->n++;
    return true;
}

const npy_array *npy_list_find(const npy_list *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->items[i].name, name) == 0)
            return &l->items[i];
    return NULL;
}

void npy_array_free(npy_array *a) {
    if (!a)
        return;
    free(a->name);
    free(a->data);
    memset(a, 0, sizeof *a);
}

void npy_list_free(npy_list *l) {
    if (!l)
        return;
    for (int i = 0; i < l->n; i++)
        npy_array_free(&l->items[i]);
    free(l->items);
    memset(l, 0, sizeof *l);
}

/* ---------------- elements ---------------- */

double npy_get(kiln_dtype dt, const void *p, size_t i) {
    switch (dt) {
    case KILN_DTYPE_FLOAT: return ((const float *)p)[i];
    case KILN_DTYPE_DOUBLE: return ((const double *)p)[i];
    case KILN_DTYPE_FLOAT16: return kiln_half_to_float(((const uint16_t *)p)[i]);
    case KILN_DTYPE_BFLOAT16: return kiln_bfloat16_to_float(((const uint16_t *)p)[i]);
    case KILN_DTYPE_INT8: return ((const int8_t *)p)[i];
    case KILN_DTYPE_UINT8: return ((const uint8_t *)p)[i];
    case KILN_DTYPE_BOOL: return ((const uint8_t *)p)[i] != 0;
    case KILN_DTYPE_INT16: return ((const int16_t *)p)[i];
    case KILN_DTYPE_UINT16: return ((const uint16_t *)p)[i];
    case KILN_DTYPE_INT32: return ((const int32_t *)p)[i];
    case KILN_DTYPE_UINT32: return ((const uint32_t *)p)[i];
    case KILN_DTYPE_INT64: return (double)((const int64_t *)p)[i];
    case KILN_DTYPE_UINT64: return (double)((const uint64_t *)p)[i];
    default: return NAN;
    }
}

/* double to integer without undefined behaviour: NaN is 0, out-of-range
 * values saturate at 64 bits, narrower types wrap (two's complement). */
static int64_t to_i64(double v) {
    if (isnan(v))
        return 0;
    if (v >= 9.2233720368547758e18)
        return INT64_MAX;
    if (v <= -9.2233720368547758e18)
        return INT64_MIN;
    return (int64_t)v;
}

static uint64_t to_u64(double v) {
    if (v >= 1.8446744073709552e19)
        return UINT64_MAX;
    if (v >= 0)
        return (uint64_t)v;
    return (uint64_t)to_i64(v);
}

/* double to float: beyond float's range is an infinity, not undefined */
static float to_f32(double v) {
    if (v > 3.4028234663852886e38)
        return INFINITY;
    if (v < -3.4028234663852886e38)
        return -INFINITY;
    return (float)v;
}

void npy_set(kiln_dtype dt, void *p, size_t i, double v) {
    switch (dt) {
    case KILN_DTYPE_FLOAT: ((float *)p)[i] = to_f32(v); break;
    case KILN_DTYPE_DOUBLE: ((double *)p)[i] = v; break;
    case KILN_DTYPE_FLOAT16: ((uint16_t *)p)[i] = kiln_float_to_half(to_f32(v)); break;
    case KILN_DTYPE_BFLOAT16: ((uint16_t *)p)[i] = kiln_float_to_bfloat16(to_f32(v)); break;
    case KILN_DTYPE_INT8: ((int8_t *)p)[i] = (int8_t)to_i64(v); break;
    case KILN_DTYPE_UINT8: ((uint8_t *)p)[i] = (uint8_t)to_u64(v); break;
    case KILN_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    case KILN_DTYPE_INT16: ((int16_t *)p)[i] = (int16_t)to_i64(v); break;
    case KILN_DTYPE_UINT16: ((uint16_t *)p)[i] = (uint16_t)to_u64(v); break;
    case KILN_DTYPE_INT32: ((int32_t *)p)[i] = (int32_t)to_i64(v); break;
    case KILN_DTYPE_UINT32: ((uint32_t *)p)[i] = (uint32_t)to_u64(v); break;
    case KILN_DTYPE_INT64: ((int64_t *)p)[i] = to_i64(v); break;
    case KILN_DTYPE_UINT64: ((uint64_t *)p)[i] = to_u64(v); break;
    default: break;
    }
}
