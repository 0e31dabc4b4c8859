/* kt_json.c - the JSON reader and writer of the Triton backend (kt_json.h).
 * Recursive descent with a depth limit; text comes from the server. */
#include "kt_json.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KT_JSON_MAX_DEPTH 64

typedef struct parser {
    const char *p, *end;
    char *err;
    size_t err_cap;
    int depth;
} parser;

static void fail(parser *ps, const char *what) {
    if (ps->err && ps->err_cap && !ps->err[0])
        snprintf(ps->err, ps->err_cap, "%s at byte %zu", what, (size_t)(ps->end - ps->p));
}

static void skip_ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

kt_json *kt_json_new(kt_json_type type) {
    kt_json *v = calloc(1, sizeof *v);
    if (v) v->type = type;
    return v;
}

void kt_json_free(kt_json *v) {
    if (!v) return;
    for (size_t i = 0; i < v->count; i++) kt_json_free(v->items[i]);
    free(v->items);
    free(v->key);
    free(v->str);
    free(v);
}

static int push(kt_json *parent, kt_json *child) {
    if (parent->count == parent->cap) {
        size_t cap = parent->cap ? parent->cap * 2 : 8;
        kt_json **items = realloc(parent->items, cap * sizeof *items);
        if (!items) return -1;
        parent->items = items;
        parent->cap = cap;
    }
    parent->items[parent->count++] = child;
    return 0;
}

static void put_utf8(char *out, size_t *n, unsigned cp) {
    if (cp < 0x80) {
        out[(*n)++] = (char)cp;
    } else if (cp < 0x800) {
        out[(*n)++] = (char)(0xC0 | (cp >> 6));
        out[(*n)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out[(*n)++] = (char)(0xE0 | (cp >> 12));
        out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[(*n)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        out[(*n)++] = (char)(0xF0 | (cp >> 18));
        out[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[(*n)++] = (char)(0x80 | (cp & 0x3F));
    }
}

static int hex4(const char *s, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

/* A string literal at ps->p (the opening quote); the decoded text, malloc'd. */
static char *parse_string(parser *ps) {
    ps->p++;
    const char *start = ps->p;
    size_t cap = 0;
    for (const char *q = start; q < ps->end && *q != '"'; q++) {
        cap++;
        if (*q == '\\') q++, cap++;
    }
    char *out = malloc(cap * 2 + 8);
    if (!out) return fail(ps, "out of memory"), NULL;
    size_t n = 0;
    while (ps->p < ps->end && *ps->p != '"') {
        char c = *ps->p++;
        if ((unsigned char)c < 0x20) { free(out); fail(ps, "control character in string"); return NULL; }
        if (c != '\\') { out[n++] = c; continue; }
        if (ps->p >= ps->end) break;
        char e = *ps->p++;
        switch (e) {
        case '"': out[n++] = '"'; break;
        case '\\': out[n++] = '\\'; break;
        case '/': out[n++] = '/'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'n': out[n++] = '\n'; break;
        case 'r': out[n++] = '\r'; break;
        case 't': out[n++] = '\t'; break;
        case 'u': {
            unsigned cp;
            if (ps->end - ps->p < 4 || hex4(ps->p, &cp)) { free(out); fail(ps, "bad \\u escape"); return NULL; }
            ps->p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && ps->end - ps->p >= 6 && ps->p[0] == '\\' &&
                ps->p[1] == 'u') {
                unsigned lo;
                if (!hex4(ps->p + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    ps->p += 6;
                }
            }
            put_utf8(out, &n, cp);
            break;
        }
        default: free(out); fail(ps, "bad escape"); return NULL;
        }
    }
    if (ps->p >= ps->end) { free(out); fail(ps, "unterminated string"); return NULL; }
    ps->p++;
    out[n] = 0;
    return out;
}

static kt_json *parse_value(parser *ps);

static kt_json *parse_container(parser *ps, int is_obj) {
    kt_json *v = kt_json_new(is_obj ? KT_JSON_OBJECT : KT_JSON_ARRAY);
    if (!v) return NULL;
    if (++ps->depth > KT_JSON_MAX_DEPTH) { fail(ps, "nesting too deep"); kt_json_free(v); return NULL; }
    ps->p++;
    skip_ws(ps);
    char close = is_obj ? '}' : ']';
    if (ps->p < ps->end && *ps->p == close) { ps->p++; ps->depth--; return v; }
    for (;;) {
        char *key = NULL;
        skip_ws(ps);
        if (is_obj) {
            if (ps->p >= ps->end || *ps->p != '"') { fail(ps, "expected a member name"); goto bad; }
            if (!(key = parse_string(ps))) goto bad;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') { free(key); fail(ps, "expected ':'"); goto bad; }
            ps->p++;
        }
        kt_json *child = parse_value(ps);
        if (!child) { free(key); goto bad; }
        child->key = key;
        if (push(v, child)) { kt_json_free(child); goto bad; }
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') { ps->p++; continue; }
        if (ps->p < ps->end && *ps->p == close) { ps->p++; break; }
        fail(ps, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
        goto bad;
    }
    ps->depth--;
    return v;
bad:
    kt_json_free(v);
    return NULL;
}

static kt_json *parse_value(parser *ps) {
    skip_ws(ps);
    if (ps->p >= ps->end) return fail(ps, "unexpected end"), NULL;
    char c = *ps->p;
    if (c == '{' || c == '[') return parse_container(ps, c == '{');
    if (c == '"') {
        char *s = parse_string(ps);
        if (!s) return NULL;
        kt_json *v = kt_json_new(KT_JSON_STRING);
        if (!v) { free(s); return NULL; }
        v->str = s;
        return v;
    }
    static const struct { const char *word; kt_json_type type; int b; } words[] = {
        {"true", KT_JSON_BOOL, 1}, {"false", KT_JSON_BOOL, 0}, {"null", KT_JSON_NULL, 0}};
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(words[i].word);
        if ((size_t)(ps->end - ps->p) >= n && !memcmp(ps->p, words[i].word, n)) {
            ps->p += n;
            kt_json *v = kt_json_new(words[i].type);
            if (v) v->boolean = words[i].b;
            return v;
        }
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        const char *s = ps->p;
        while (ps->p < ps->end && (isdigit((unsigned char)*ps->p) || strchr("+-.eE", *ps->p))) ps->p++;
        size_t n = (size_t)(ps->p - s);
        kt_json *v = kt_json_new(KT_JSON_NUMBER);
        if (!v || !(v->str = malloc(n + 1))) { kt_json_free(v); return NULL; }
        memcpy(v->str, s, n);
        v->str[n] = 0;
        char *e;
        v->num = strtod(v->str, &e);
        if (*e) { fail(ps, "bad number"); kt_json_free(v); return NULL; }
        return v;
    }
    fail(ps, "unexpected character");
    return NULL;
}

kt_json *kt_json_parse(const char *text, size_t n, char *err, size_t err_cap) {
    parser ps = {text, text + n, err, err_cap, 0};
    if (err && err_cap) err[0] = 0;
    kt_json *v = parse_value(&ps);
    if (!v) return NULL;
    skip_ws(&ps);
    if (ps.p != ps.end) { fail(&ps, "trailing text"); kt_json_free(v); return NULL; }
    return v;
}

typedef struct sbuf { char *d; size_t n, cap; int oom; } sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *d = realloc(b->d, cap);
        if (!d) { b->oom = 1; return; }
        b->d = d;
        b->cap = cap;
    }
    memcpy(b->d + b->n, s, n);
    b->n += n;
    b->d[b->n] = 0;
}
static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static void write_string(sbuf *b, const char *s) {
    sb_add(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { char e[2] = {'\\', (char)c}; sb_add(b, e, 2); }
        else if (c < 0x20) { char e[8]; snprintf(e, sizeof e, "\\u%04x", c); sb_str(b, e); }
        else sb_add(b, (const char *)s, 1);
    }
    sb_add(b, "\"", 1);
}

static void write_value(sbuf *b, const kt_json *v) {
    switch (v->type) {
    case KT_JSON_NULL: sb_str(b, "null"); break;
    case KT_JSON_BOOL: sb_str(b, v->boolean ? "true" : "false"); break;
    case KT_JSON_NUMBER: sb_str(b, v->str ? v->str : "0"); break;
    case KT_JSON_STRING: write_string(b, v->str ? v->str : ""); break;
    case KT_JSON_ARRAY:
    case KT_JSON_OBJECT:
        sb_str(b, v->type == KT_JSON_ARRAY ? "[" : "{");
        for (size_t i = 0; i < v->count; i++) {
            if (i) sb_str(b, ",");
            if (v->type == KT_JSON_OBJECT) {
                write_string(b, v->items[i]->key ? v->items[i]->key : "");
                sb_str(b, ":");
            }
            write_value(b, v->items[i]);
        }
        sb_str(b, v->type == KT_JSON_ARRAY ? "]" : "}");
        break;
    }
}

char *kt_json_write(const kt_json *v) {
    sbuf b = {0};
    write_value(&b, v);
    if (b.oom) { free(b.d); return NULL; }
    return b.d;
}

kt_json *kt_json_get(const kt_json *obj, const char *key) {
    if (!obj || obj->type != KT_JSON_OBJECT) return NULL;
    for (size_t i = 0; i < obj->count; i++)
        if (obj->items[i]->key && !strcmp(obj->items[i]->key, key)) return obj->items[i];
    return NULL;
}

int kt_json_int(const kt_json *v, int64_t *out) {
    if (!v || (v->type != KT_JSON_NUMBER && v->type != KT_JSON_STRING) || !v->str) return -1;
    char *e;
    errno = 0;
    long long x = strtoll(v->str, &e, 10);
    if (e == v->str || *e || errno) return -1;
    *out = (int64_t)x;
    return 0;
}

const char *kt_json_str(const kt_json *v) {
    return v && v->type == KT_JSON_STRING ? v->str : NULL;
}

kt_json *kt_json_new_string(const char *s) {
    kt_json *v = kt_json_new(KT_JSON_STRING);
    if (v && !(v->str = strdup(s))) { free(v); return NULL; }
    return v;
}

kt_json *kt_json_new_int(int64_t x) {
    char t[32];
    snprintf(t, sizeof t, "%lld", (long long)x);
    kt_json *v = kt_json_new(KT_JSON_NUMBER);
    if (v && !(v->str = strdup(t))) { free(v); return NULL; }
    if (v) v->num = (double)x;
    return v;
}

int kt_json_append(kt_json *arr, kt_json *child) {
    if (!arr || !child || arr->type != KT_JSON_ARRAY) { kt_json_free(child); return -1; }
    if (push(arr, child)) { kt_json_free(child); return -1; }
    return 0;
}

int kt_json_set(kt_json *obj, const char *key, kt_json *child) {
    if (!obj || !child || obj->type != KT_JSON_OBJECT) { kt_json_free(child); return -1; }
    free(child->key);
    if (!(child->key = strdup(key))) { kt_json_free(child); return -1; }
    for (size_t i = 0; i < obj->count; i++) {
        if (obj->items[i]->key && !strcmp(obj->items[i]->key, key)) {
            kt_json_free(obj->items[i]);
            obj->items[i] = child;
            return 0;
        }
    }
    if (push(obj, child)) { kt_json_free(child); return -1; }
    return 0;
}
