/* kt_json.h - a small JSON tree for the Triton backend: Triton hands model
 * configurations over as JSON text and takes them back the same way. */
#ifndef KT_JSON_H
#define KT_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum kt_json_type {
    KT_JSON_NULL = 0,
    KT_JSON_BOOL,
    KT_JSON_NUMBER,
    KT_JSON_STRING,
    KT_JSON_ARRAY,
    KT_JSON_OBJECT
} kt_json_type;

typedef struct kt_json kt_json;
struct kt_json {
    kt_json_type type;
    char *key;          /* member name inside an object, else NULL */
    char *str;          /* STRING: the text; NUMBER: the literal as written */
    double num;
    int boolean;
    kt_json **items;    /* ARRAY / OBJECT members in order */
    size_t count, cap;
};

/* Parse `n` bytes of JSON. NULL on malformed text, with a message in err. */
kt_json *kt_json_parse(const char *text, size_t n, char *err, size_t err_cap);
void kt_json_free(kt_json *v);
/* Serialize; caller frees with free(). NULL when out of memory. */
char *kt_json_write(const kt_json *v);

/* Object member by name, or NULL. */
kt_json *kt_json_get(const kt_json *obj, const char *key);
/* An integer from a number or a string holding one (protobuf's JSON writes
 * int64 fields as strings). Returns 0 and sets *out on success, -1 if not. */
int kt_json_int(const kt_json *v, int64_t *out);
/* Borrowed string of a STRING value, or NULL. */
const char *kt_json_str(const kt_json *v);

/* Builders; each returns the new value (NULL when out of memory). The
 * added value is owned by its parent. */
kt_json *kt_json_new(kt_json_type type);
kt_json *kt_json_new_string(const char *s);
kt_json *kt_json_new_int(int64_t v);
/* Append `child` to an array, or set it as member `key` of an object
 * (replacing a member of that name). Takes ownership; -1 on failure. */
int kt_json_append(kt_json *arr, kt_json *child);
int kt_json_set(kt_json *obj, const char *key, kt_json *child);

#endif
