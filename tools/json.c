/* json.c - a recursive-descent JSON reader building a small tree (see json.h).
 * Depth is limited so that a hostile document cannot exhaust the stack. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

#define CJ_MAX_DEPTH 64

typedef struct cj_parser {
    const char *p;
    const char *start;
    char *err;
    size_t err_cap;
    bool failed;
} cj_parser;

static void fail(cj_parser *ps, const char *what) {
    if (!ps->failed)
        snprintf(ps->err, ps->err_cap, "JSON: %s at offset %ld", what, (long)(ps->p - ps->start));
    ps->failed = true;
}

static void skip_ws(cj_parser *ps) {
    while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')
        ps->p++;
}

static bool parse_value(cj_parser *ps, cj_value *v, int depth);

static void put_utf8(char **out, unsigned cp) {
    char *o = *out;
    if (cp < 0x80) {
        *o++ = (char)cp;
    } else if (cp < 0x800) {
        *o++ = (char)(0xc0 | (cp >> 6));
        *o++ = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        *o++ = (char)(0xe0 | (cp >> 12));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
        *o++ = (char)(0x80 | (cp & 0x3f));
    } else {
        *o++ = (char)(0xf0 | (cp >> 18));
        *o++ = (char)(0x80 | ((cp >> 12) & 0x3f));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
        *o++ = (char)(0x80 | (cp & 0x3f));
    }
    *out = o;
}

static bool hex4(const char *s, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return false;
    }
    *out = v;
    return true;
}

/* ps->p is at the opening quote. The decoded string is never longer than the
 * escaped one, so one allocation of the raw length suffices. */
static char *parse_string(cj_parser *ps) {
    const char *s = ++ps->p;
    const char *e = s;
    while (*e && *e != '"') {
        if (*e == '\\' && e[1])
            e++;
        e++;
    }
    if (*e != '"') {
        fail(ps, "unterminated string");
        return NULL;
    }
    char *out = malloc((size_t)(e - s) + 1), *o = out;
    if (!out) {
        fail(ps, "out of memory");
        return NULL;
    }
    while (s < e) {
        if (*s != '\\') {
            *o++ = *s++;
            continue;
        }
        s++;
        switch (*s) {
        case 'n': *o++ = '\n'; s++; break;
        case 't': *o++ = '\t'; s++; break;
        case 'r': *o++ = '\r'; s++; break;
        case 'b': *o++ = '\b'; s++; break;
        case 'f': *o++ = '\f'; s++; break;
        case 'u': {
            unsigned cp;
            if (e - s < 5 || !hex4(s + 1, &cp)) {
                free(out);
                fail(ps, "bad \\u escape");
                return NULL;
            }
            s += 5;
            if (cp >= 0xd800 && cp < 0xdc00 && e - s >= 6 && s[0] == '\\' && s[1] == 'u') {
                unsigned lo;
                if (hex4(s + 2, &lo) && lo >= 0xdc00 && lo < 0xe000) {
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                    s += 6;
                }
            }
            /* a \u escape is 6 bytes and decodes to at most 4 */
            put_utf8(&o, cp);
            break;
        }
        default: *o++ = *s++; break; /* \" \\ \/ */
        }
    }
    *o = '\0';
    ps->p = e + 1;
    return out;
}

static bool parse_container(cj_parser *ps, cj_value *v, int depth, bool object) {
    char close = object ? '}' : ']';
    size_t cap = 0;
    v->type = object ? CJ_OBJECT : CJ_ARRAY;
    ps->p++;
    skip_ws(ps);
    if (*ps->p == close) {
        ps->p++;
        return true;
    }
    for (;;) {
        if (v->n == cap) {
            size_t ncap = cap ? cap * 2 : 4;
            cj_value *ni = realloc(v->items, ncap * sizeof *ni);
            if (!ni) {
                fail(ps, "out of memory");
                return false;
            }
            v->items = ni;
            cap = ncap;
        }
        cj_value *child = &v->items[v->n];
        memset(child, 0, sizeof *child);
        v->n++;
        skip_ws(ps);
        if (object) {
            if (*ps->p != '"') {
                fail(ps, "expected a key");
                return false;
            }
            if (!(child->key = parse_string(ps)))
                return false;
            skip_ws(ps);
            if (*ps->p != ':') {
                fail(ps, "expected ':'");
                return false;
            }
            ps->p++;
        }
        if (!parse_value(ps, child, depth + 1))
            return false;
        skip_ws(ps);
        if (*ps->p == ',') {
            ps->p++;
            continue;
        }
        if (*ps->p == close) {
            ps->p++;
            return true;
        }
        fail(ps, object ? "expected ',' or '}'" : "expected ',' or ']'");
        return false;
    }
}

static bool parse_value(cj_parser *ps, cj_value *v, int depth) {
    if (depth > CJ_MAX_DEPTH) {
        fail(ps, "nested too deeply");
        return false;
    }
    skip_ws(ps);
    const char *p = ps->p;
    if (*p == '{' || *p == '[')
        return parse_container(ps, v, depth, *p == '{');
    if (*p == '"') {
        v->type = CJ_STRING;
        return (v->string = parse_string(ps)) != NULL;
    }
    static const struct {
        const char *word;
        cj_type type;
        double number;
    } words[] = {{"true", CJ_BOOL, 1}, {"false", CJ_BOOL, 0}, {"null", CJ_NULL, 0},
                 {"NaN", CJ_NUMBER, NAN}, {"Infinity", CJ_NUMBER, INFINITY},
                 {"-Infinity", CJ_NUMBER, -INFINITY}};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        size_t n = strlen(words[i].word);
        if (strncmp(p, words[i].word, n) == 0) {
            v->type = words[i].type;
            v->number = words[i].number;
            ps->p += n;
            return true;
        }
    }
    char *end;
    double d = strtod(p, &end);
    if (end == p) {
        fail(ps, "unexpected character");
        return false;
    }
    v->type = CJ_NUMBER;
    v->number = d;
    ps->p = end;
    return true;
}

static void free_children(cj_value *v) {
    for (size_t i = 0; i < v->n; i++)
        free_children(&v->items[i]);
    free(v->items);
    free(v->string);
    free(v->key);
}

void cj_free(cj_value *v) {
    if (!v)
        return;
    free_children(v);
    free(v);
}

cj_value *cj_parse(const char *text, char *err, size_t err_cap) {
    cj_parser ps = {text, text, err, err_cap, false};
    cj_value *root = calloc(1, sizeof *root);
    if (!root) {
        snprintf(err, err_cap, "JSON: out of memory");
        return NULL;
    }
    if (parse_value(&ps, root, 0)) {
        skip_ws(&ps);
        if (*ps.p == '\0')
            return root;
        fail(&ps, "trailing text");
    }
    cj_free(root);
    return NULL;
}

const cj_value *cj_get(const cj_value *obj, const char *key) {
    if (!obj || obj->type != CJ_OBJECT)
        return NULL;
    for (size_t i = 0; i < obj->n; i++)
        if (strcmp(obj->items[i].key, key) == 0)
            return &obj->items[i];
    return NULL;
}

const cj_value *cj_get_any(const cj_value *obj, const char *const *keys) {
    for (; *keys; keys++) {
        const cj_value *v = cj_get(obj, *keys);
        if (v)
            return v;
    }
    return NULL;
}

const char *cj_str(const cj_value *obj, const char *key, const char *fallback) {
    const cj_value *v = cj_get(obj, key);
    return v && v->type == CJ_STRING ? v->string : fallback;
}

double cj_num(const cj_value *obj, const char *key, double fallback) {
    const cj_value *v = cj_get(obj, key);
    return v && (v->type == CJ_NUMBER || v->type == CJ_BOOL) ? v->number : fallback;
}
