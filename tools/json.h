/* json.h - a small JSON reader for the kiln command line: parses a whole
 * document into a tree so `kiln inspect` can read the engine's layer report. */
#ifndef KILN_CLI_JSON_H
#define KILN_CLI_JSON_H

#include <stdbool.h>
#include <stddef.h>

typedef enum cj_type { CJ_NULL, CJ_BOOL, CJ_NUMBER, CJ_STRING, CJ_ARRAY, CJ_OBJECT } cj_type;

typedef struct cj_value cj_value;
struct cj_value {
    cj_type type;
    double number;      /* CJ_NUMBER; CJ_BOOL as 0/1 */
    char *string;       /* CJ_STRING; for members of an object, the key is in `key` */
    char *key;          /* set when this value is a member of an object */
    size_t n;           /* CJ_ARRAY / CJ_OBJECT: child count */
    cj_value *items;    /* children */
};

/* Parse `text` (NUL-terminated). Returns NULL on a syntax error, with a
 * message in err (at least 128 bytes). Free with cj_free. NaN, Infinity and
 * -Infinity are accepted as numbers. */
cj_value *cj_parse(const char *text, char *err, size_t err_cap);
void cj_free(cj_value *v);

/* Member of an object by key, or NULL. */
const cj_value *cj_get(const cj_value *obj, const char *key);
/* The first member found among several candidate keys (NULL-terminated list). */
const cj_value *cj_get_any(const cj_value *obj, const char *const *keys);
/* A member's value as a string or number, with a fallback. */
const char *cj_str(const cj_value *obj, const char *key, const char *fallback);
double cj_num(const cj_value *obj, const char *key, double fallback);

#endif
