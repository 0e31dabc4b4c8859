/* kiln_plugin.h - the plugin ABI: custom layers as shared libraries, with
 * the core / build / runtime split of TensorRT's IPluginV3, and the registry
 * that finds them by (name, version, namespace).
 *
 * ABI rules (docs/plugin-guide.md says more):
 * - every struct a plugin or kiln fills begins with abi_version and
 *   struct_size; structs only grow at the end; a reader uses a member only
 *   when struct_size covers it;
 * - released layouts are frozen by static assertions at the end of this file;
 * - strings are UTF-8, NUL-terminated, and owned by whoever filled the struct
 *   for as long as the object lives;
 * - every call that can fail returns kiln_status; the plugin describes the
 *   failure with host->set_error before returning, and kiln reports it with the
 *   plugin's identity and the layer's name. */
#ifndef KILN_PLUGIN_H
#define KILN_PLUGIN_H

#include "kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the layouts in this header. A library built against version V
 * loads into any kiln whose KILN_PLUGIN_ABI_VERSION >= V. */
#define KILN_PLUGIN_ABI_VERSION 1u

/* Name of the function a plugin library exports (kiln_plugin_get_creators_fn). */
#define KILN_PLUGIN_ENTRY_POINT "kiln_plugin_get_creators"

/* ---------------------------------------------------------------------------
 * Services kiln gives plugins. */
typedef struct kiln_plugin_host {
    uint32_t abi_version;
    uint32_t struct_size;
    /* Describe the failure the current call is about to return. Copied. */
    void (*set_error)(const char *message);
    /* Write to kiln's logger. */
    void (*log)(kiln_severity severity, const char *message);
} kiln_plugin_host;

/* ---------------------------------------------------------------------------
 * Fields: typed parameters of a plugin (its ONNX attributes, what a plan
 * stores). */
typedef enum kiln_field_type {
    KILN_FIELD_INT8 = 0,
    KILN_FIELD_INT16 = 1,
    KILN_FIELD_INT32 = 2,
    KILN_FIELD_INT64 = 3,
    KILN_FIELD_FLOAT16 = 4,   /* IEEE half, as uint16_t bits */
    KILN_FIELD_BFLOAT16 = 5,  /* bfloat16, as uint16_t bits */
    KILN_FIELD_FLOAT32 = 6,
    KILN_FIELD_FLOAT64 = 7,
    KILN_FIELD_STRING = 8,    /* length = bytes, without a NUL */
    KILN_FIELD_BYTES = 9      /* opaque bytes; length = bytes */
} kiln_field_type;

/* One field value: `length` elements of `type` at `data` (borrowed). */
typedef struct kiln_field {
    const char *name;
    kiln_field_type type;
    int64_t length;
    const void *data;
} kiln_field;

typedef struct kiln_field_collection {
    int32_t count;
    const kiln_field *fields;
} kiln_field_collection;

/* What a creator accepts: a field's name, type and length (-1 = any
 * length, 1 = a scalar), and whether it must be given. */
typedef struct kiln_field_spec {
    const char *name;
    kiln_field_type type;
    int64_t length;
    int32_t required;
} kiln_field_spec;

/* ---------------------------------------------------------------------------
 * Tensors as plugins see them. */
typedef enum kiln_layout {
    KILN_LAYOUT_LINEAR = 0,   /* row-major, as ONNX (NCHW for images) */
    KILN_LAYOUT_NHWC = 1      /* channels last, for 4-D tensors */
} kiln_layout;

typedef struct kiln_tensor_desc {
    kiln_dtype dtype;
    kiln_layout layout;
    int32_t rank;
    int64_t dims[KILN_MAX_DIMS];  /* -1 where not known yet (format queries) */
} kiln_tensor_desc;

/* ---------------------------------------------------------------------------
 * Symbolic dimensions: output shapes are expressions over input dimensions so
 * that one plugin instance serves every shape of a profile. Expressions are
 * owned by kiln and live for the duration of the call that hands them out. */
typedef struct kiln_dim_expr kiln_dim_expr;

typedef enum kiln_dim_op {
    KILN_DIM_SUM = 0,
    KILN_DIM_SUB = 1,
    KILN_DIM_PROD = 2,
    KILN_DIM_FLOOR_DIV = 3,
    KILN_DIM_CEIL_DIV = 4,
    KILN_DIM_MIN = 5,
    KILN_DIM_MAX = 6
} kiln_dim_op;

typedef struct kiln_dims_expr {
    int32_t rank;
    const kiln_dim_expr *d[KILN_MAX_DIMS];
} kiln_dims_expr;

typedef struct kiln_expr_builder {
    uint32_t abi_version;
    uint32_t struct_size;
    void *ctx;
    const kiln_dim_expr *(*constant)(void *ctx, int64_t value);
    const kiln_dim_expr *(*operation)(void *ctx, kiln_dim_op op, const kiln_dim_expr *a,
                                      const kiln_dim_expr *b);
    /* Whether e is known now, and its value when it is. */
    int32_t (*is_constant)(void *ctx, const kiln_dim_expr *e);
    int64_t (*constant_value)(void *ctx, const kiln_dim_expr *e);
} kiln_expr_builder;

/* ---------------------------------------------------------------------------
 * A plugin instance: three capability tables over the plugin's own state. */
typedef struct kiln_plugin kiln_plugin;

/* Identity. */
typedef struct kiln_plugin_core {
    uint32_t abi_version;
    uint32_t struct_size;
    const char *name;
    const char *version;
    const char *plugin_namespace;
} kiln_plugin_core;

/* Used while building a plan. */
typedef struct kiln_plugin_build {
    uint32_t abi_version;
    uint32_t struct_size;
    int32_t (*num_outputs)(void *self);
    /* Output types from input types. */
    kiln_status (*output_dtypes)(void *self, const kiln_dtype *in, int32_t n_in, kiln_dtype *out,
                                 int32_t n_out);
    /* Output shapes as expressions over the inputs' dimensions. */
    kiln_status (*output_shapes)(void *self, const kiln_dims_expr *in, int32_t n_in,
                                 kiln_dims_expr *out, int32_t n_out, const kiln_expr_builder *eb);
    /* Whether position `pos` (inputs first, then outputs) may take
     * descs[pos].dtype / layout, given the choices already made for
     * positions < pos. Returns 1 or 0. */
    int32_t (*supports_format)(void *self, int32_t pos, const kiln_tensor_desc *descs,
                               int32_t n_in, int32_t n_out);
    /* The formats chosen (dims as the opt profile point). May be NULL. */
    kiln_status (*configure)(void *self, const kiln_tensor_desc *in, int32_t n_in,
                             const kiln_tensor_desc *out, int32_t n_out);
    /* Scratch bytes enqueue needs for the largest shapes. May be NULL (0). */
    size_t (*workspace_size)(void *self, const kiln_tensor_desc *in, int32_t n_in,
                             const kiln_tensor_desc *out, int32_t n_out);
} kiln_plugin_build;

/* Used when running. */
typedef struct kiln_plugin_runtime {
    uint32_t abi_version;
    uint32_t struct_size;
    /* Shapes changed (called outside enqueue). May be NULL. */
    kiln_status (*on_shape_change)(void *self, const kiln_tensor_desc *in, int32_t n_in,
                                   const kiln_tensor_desc *out, int32_t n_out);
    /* Run on `stream` (NULL on the CPU backend: run now). Pointers are device
     * pointers on a GPU backend. Must not allocate or synchronise. */
    kiln_status (*enqueue)(void *self, const kiln_tensor_desc *in, const void *const *inputs,
                           int32_t n_in, const kiln_tensor_desc *out, void *const *outputs,
                           int32_t n_out, void *workspace, void *stream);
    /* The fields that recreate this instance (stored in plans). The
     * collection stays valid until the next call on this instance. */
    kiln_status (*get_fields)(void *self, kiln_field_collection *out);
    /* A deep copy (kiln clones one instance per execution context). */
    kiln_status (*clone)(void *self, kiln_plugin **out);
    /* Free the instance, its tables' owner and `self`. */
    void (*destroy)(void *self);
} kiln_plugin_runtime;

struct kiln_plugin {
    uint32_t abi_version;
    uint32_t struct_size;
    void *self;                           /* passed to every call */
    const kiln_plugin_core *core;         /* never NULL */
    const kiln_plugin_build *build;       /* NULL for runtime-phase instances */
    const kiln_plugin_runtime *runtime;   /* never NULL */
};

typedef enum kiln_plugin_phase {
    KILN_PLUGIN_PHASE_BUILD = 0,
    KILN_PLUGIN_PHASE_RUNTIME = 1
} kiln_plugin_phase;

/* Makes plugin instances of one (name, version, namespace). */
typedef struct kiln_plugin_creator {
    uint32_t abi_version;
    uint32_t struct_size;
    const char *name;
    const char *version;
    const char *plugin_namespace;
    const kiln_field_spec *fields;     /* the schema of accepted fields */
    int32_t n_fields;
    void *self;
    kiln_status (*create)(void *self, const char *layer_name, const kiln_field_collection *fields,
                          kiln_plugin_phase phase, kiln_plugin **out);
} kiln_plugin_creator;

/* The one function a plugin library exports, named KILN_PLUGIN_ENTRY_POINT.
 * `host` stays valid while the library is loaded. Sets *creators to an array
 * of *count pointers owned by the library. plugin_namespace, when not NULL
 * or "", asks the library to give its creators that namespace. */
typedef kiln_status (*kiln_plugin_get_creators_fn)(const kiln_plugin_host *host,
                                                   uint32_t host_abi_version,
                                                   const char *plugin_namespace,
                                                   const kiln_plugin_creator *const **creators,
                                                   int32_t *count);

/* ---------------------------------------------------------------------------
 * The registry (process-wide, thread-safe). */
typedef struct kiln_plugin_library kiln_plugin_library;

/* Register a creator (borrowed until deregistered). `source` names where it
 * came from in messages ("static", a library path). A duplicate identity is
 * refused naming both sources. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_plugin_register(const kiln_plugin_creator *creator,
                                                         const char *source);
KILN_API KILN_NODISCARD kiln_status kiln_plugin_deregister(const char *name, const char *version,
                                                           const char *plugin_namespace);
/* The creator of an identity, or NULL. version NULL = any, namespace NULL = "". */
KILN_API const kiln_plugin_creator *kiln_plugin_find(const char *name, const char *version,
                                                     const char *plugin_namespace);
KILN_API int kiln_plugin_count(void);
/* Creator i (0 <= i < count), and where it came from; NULL past the end. */
KILN_API const kiln_plugin_creator *kiln_plugin_at(int i, const char **source);

/* dlopen a plugin library and register its creators. plugin_namespace may be
 * NULL. The error says which step failed: the OS loader (with the library or
 * symbol it could not find), the missing entry point, an ABI version this
 * kiln does not support, or a duplicate identity. `path` names a file, never
 * a name to search for: it is resolved once (realpath, relative to the
 * working folder; LD_LIBRARY_PATH plays no part), that file is opened once
 * and hashed from the descriptor, and it is loaded only while the resolved
 * path is still that file (refused otherwise); a FIFO or device is refused
 * without blocking, and a world-writable file or folder is logged as a
 * warning. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_plugin_load_library(const char *path,
                                                             const char *plugin_namespace,
                                                             kiln_plugin_library **out);
/* kiln_plugin_load_library, but the library must have this SHA-256 (64
 * lowercase hex digits, as kiln manifest writes them; NULL: any): the file is
 * opened once, hashed from that descriptor, and refused before any of its
 * code runs when the hash differs. `kiln doctor --manifest` loads this way.
 * Added in 0.1 (issue 28). */
KILN_API KILN_NODISCARD kiln_status kiln_plugin_load_library_sha256(const char *path,
                                                                    const char *plugin_namespace,
                                                                    const char *sha256,
                                                                    kiln_plugin_library **out);
/* Deregister a library's creators and unload it; refused while an engine still
 * uses them. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_plugin_deregister_library(kiln_plugin_library *lib);

/* Where a loaded library came from: its path and the SHA-256 of its bytes
 * (64 hex digits). Borrowed until the library is deregistered. Added in 0.1. */
KILN_API const char *kiln_plugin_library_path(const kiln_plugin_library *lib);
KILN_API const char *kiln_plugin_library_sha256(const kiln_plugin_library *lib);

/* Whether plans built from now on carry this library's bytes, so that a
 * loader can use the plan without installing the library (it must allow it:
 * kiln_plugin_allow_embedded_libraries). `kiln exec --setPluginsToSerialize`.
 * Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_plugin_library_set_embedded(kiln_plugin_library *lib,
                                                                     int embed);

/* The library a registered creator came from, or NULL (registered directly).
 * Added in 0.1. */
KILN_API const kiln_plugin_library *kiln_plugin_creator_library(const kiln_plugin_creator *c);

/* Whether plans may load the plugin libraries embedded in them
 * (--setPluginsToSerialize). Off by default: an embedded library is code from
 * the plan file. Even when allowed, a library is loaded only when its SHA-256
 * matches the plan's manifest, and only after the whole plan is validated.
 * While the allow-list of kiln_plugin_allow_embedded_sha256 is not empty,
 * that list decides instead. Process-wide. Added in 0.1. */
KILN_API void kiln_plugin_allow_embedded_libraries(int allow);

/* Add one SHA-256 (64 hex digits) to the process-wide allow-list of embedded
 * libraries; NULL empties the list. While the list is not empty it alone
 * decides: a library embedded in a plan is loaded only when the SHA-256 kiln
 * computes from its bytes is on the list (whatever
 * kiln_plugin_allow_embedded_libraries says), and the plan's own hash must
 * still match those bytes. The hash stored in a plan proves only that the
 * bytes are the ones its builder embedded, not who built them; this list is
 * the caller's word. `--allowEmbeddedPluginSha256`. Refuses anything but 64
 * hex digits. Added in 0.1 (issue 28). */
KILN_API KILN_NODISCARD kiln_status kiln_plugin_allow_embedded_sha256(const char *sha256);

/* The plugin records of a plan as JSON: {"libraries": [{"file", "sha256",
 * "packaging"}], "plugins": [{"layer", "name", "version", "namespace",
 * "library"}]} (library: index or -1). *json is freed with kiln_free.
 * Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_plan_plugins_json(const void *plan, size_t size,
                                                           char **json);

/* The host table kiln hands plugin libraries (set_error, log), for creators
 * registered directly with kiln_plugin_register (a language binding's
 * plugins), which never see kiln_plugin_get_creators. Never NULL; valid for
 * the life of the process. Added in 0.2 (issue 33). */
KILN_API const kiln_plugin_host *kiln_plugin_get_host(void);

/* SHA-256 of n bytes as 64 hex digits and a NUL. Added in 0.1. */
KILN_API void kiln_sha256_hex(const void *data, size_t n, char out[65]);

#ifdef __cplusplus
}
#endif

/* Frozen layouts of ABI version 1 (x86-64 / aarch64 LP64). */
#if defined(__LP64__) && !defined(__cplusplus)
_Static_assert(sizeof(kiln_plugin_host) == 24, "kiln_plugin_host layout changed");
_Static_assert(sizeof(kiln_field) == 32, "kiln_field layout changed");
_Static_assert(sizeof(kiln_field_spec) == 32, "kiln_field_spec layout changed");
_Static_assert(sizeof(kiln_tensor_desc) == 80, "kiln_tensor_desc layout changed");
_Static_assert(sizeof(kiln_dims_expr) == 72, "kiln_dims_expr layout changed");
_Static_assert(sizeof(kiln_expr_builder) == 48, "kiln_expr_builder layout changed");
_Static_assert(sizeof(kiln_plugin_core) == 32, "kiln_plugin_core layout changed");
_Static_assert(sizeof(kiln_plugin_build) == 56, "kiln_plugin_build layout changed");
_Static_assert(sizeof(kiln_plugin_runtime) == 48, "kiln_plugin_runtime layout changed");
_Static_assert(sizeof(struct kiln_plugin) == 40, "kiln_plugin layout changed");
_Static_assert(sizeof(kiln_plugin_creator) == 64, "kiln_plugin_creator layout changed");
#endif

#endif
