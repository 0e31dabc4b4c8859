/* plugin.h - kiln's private side of the plugin ABI: the registry's internals
 * (libraries, use counts, the host table), field collections and their byte
 * form, plugin nodes in the IR, the kernel adapter, the builder's checks and
 * the plan's plugin-records section. */
#ifndef KILN_PLUGIN_PRIVATE_H
#define KILN_PLUGIN_PRIVATE_H

#include <string.h>

#include "backends/backend.h"
#include "kiln/kiln_plugin.h"

/* Plugin nodes in the IR have this domain; op_type is the plugin's name and
 * the attributes below hold the rest of the identity and the fields. */
#define KPL_DOMAIN "kiln.plugin"
#define KPL_ATTR_VERSION "plugin_version"
#define KPL_ATTR_NAMESPACE "plugin_namespace"
#define KPL_ATTR_FIELDS "plugin_fields"       /* serialized fields (kpl_fields_write) */
#define KPL_ATTR_WORKSPACE "plugin_workspace" /* bytes enqueue needs at the largest shapes */
/* Set by the runtime on every plugin layer of a loaded plan (whatever the
 * plan itself carried under this name is replaced): the SHA-256 of the
 * library whose creator the layer is bound to, "" for one registered
 * directly. */
#define KPL_ATTR_BOUND "plugin_bound_sha256"

/* ---- registry internals (registry.c) ---- */
/* The plugin host table handed to libraries. */
KN_HIDDEN const kiln_plugin_host *kpl_host(void);
/* Forget the message a plugin set; call before calling into a plugin. */
KN_HIDDEN void kpl_error_clear(void);
/* The message the plugin set with host->set_error, or "no message". */
KN_HIDDEN const char *kpl_error_text(void);
/* Library a registered creator came from (NULL: registered directly) and
 * its SHA-256 (hex) and path; returns false when the creator is not
 * registered. */
KN_HIDDEN bool kpl_creator_origin(const kiln_plugin_creator *c, const char **path,
                                  const char **sha256, const char **source);
/* Engines (kernel states) hold a use count on the creator's library. */
KN_HIDDEN void kpl_acquire(const kiln_plugin_creator *c);
KN_HIDDEN void kpl_release(const kiln_plugin_creator *c);
/* Whether plans built now embed this library's bytes (--setPluginsToSerialize). */
KN_HIDDEN bool kpl_library_embedded(const kiln_plugin_library *lib);
/* The library's bytes, as loaded (kn_malloc'd copy). */
KN_HIDDEN kiln_status kpl_library_bytes(const kiln_plugin_library *lib, uint8_t **data,
                                        size_t *size);
/* Whether a library embedded in a plan, whose bytes hash to sha256, may be
 * loaded: when the caller gave an allow-list (kiln_plugin_allow_embedded_sha256)
 * only what is on it, else what kiln_plugin_allow_embedded_libraries says. */
typedef enum kpl_permit {
    KPL_PERMIT_YES,
    KPL_PERMIT_OFF,        /* embedded libraries are not allowed */
    KPL_PERMIT_NOT_LISTED  /* the caller's allow-list does not hold this SHA-256 */
} kpl_permit;
KN_HIDDEN kpl_permit kpl_embedded_permit(const char *sha256);
/* Load a library from bytes: private temp file, dlopen, unlink. Registered
 * as coming from a plan: it serves only plans that name its SHA-256. */
KN_HIDDEN kiln_status kpl_load_bytes(const void *data, size_t size, const char *file_name,
                                     kiln_plugin_library **out);
/* The creator of an identity from a library with this SHA-256 ("" = one
 * registered directly, with no library), or NULL. */
KN_HIDDEN const kiln_plugin_creator *kpl_find_bound(const char *name, const char *version,
                                                    const char *ns, const char *sha256);
/* The caller's own registration of an identity (directly or from a library
 * it named; never one that came out of a plan), or NULL; sha256 gets its
 * library's SHA-256, or "" when registered directly. */
KN_HIDDEN const kiln_plugin_creator *kpl_find_caller(const char *name, const char *version,
                                                     const char *ns, char sha256[65]);
/* "name" (version "v", namespace "ns") for messages. */
KN_HIDDEN void kpl_identity(char *buf, size_t cap, const char *name, const char *version,
                            const char *ns);
/* Registered creators named `name`, as "(v1, ns1), (v2, ns2)" or "none". */
KN_HIDDEN void kpl_list_same_name(char *buf, size_t cap, const char *name);

/* ---- fields (fields.c) ---- */
/* An owned field collection: names, values and the array kiln_field_collection
 * points at. */
typedef struct kpl_fields {
    kiln_field_collection c;
    kiln_field *items;
    int cap;
} kpl_fields;
KN_HIDDEN void kpl_fields_free(kpl_fields *f);
/* Append a copy of one field. */
KN_HIDDEN kiln_status kpl_fields_add(kpl_fields *f, const char *name, kiln_field_type type,
                                     int64_t length, const void *data);
/* Bytes per element of a field type (1 for strings and bytes); 0 if unknown. */
KN_HIDDEN size_t kpl_field_elem_size(kiln_field_type t);
KN_HIDDEN const char *kpl_field_type_name(kiln_field_type t);
/* Convert a node's attributes (minus the plugin_* ones) to fields by the
 * creator's schema; errors name the node, the attribute and the expected type. */
KN_HIDDEN kiln_status kpl_fields_from_node(const kn_node *n, const kiln_plugin_creator *cr,
                                           kpl_fields *out);
/* Byte form (documented in fields.c). Appends to b. */
KN_HIDDEN void kpl_fields_write(const kiln_field_collection *c, kn_buf *b);
/* Decode bytes written by kpl_fields_write; every length is checked. */
KN_HIDDEN kiln_status kpl_fields_read(const void *data, size_t size, kpl_fields *out);

/* ---- plugin nodes (node.c) ---- */
static inline bool kpl_is_node(const kn_node *n) { return strcmp(n->domain, KPL_DOMAIN) == 0; }
/* The identity a plugin node carries. */
KN_HIDDEN void kpl_node_identity(const kn_node *n, const char **name, const char **version,
                                 const char **ns);
/* The registered creator of a plugin node, or an error naming the identity
 * and the creators of the same name that are registered. */
KN_HIDDEN kiln_status kpl_node_creator(const kn_node *n, const kiln_plugin_creator **out);
/* Create an instance from the node's stored fields, checking the tables. */
KN_HIDDEN kiln_status kpl_node_create(const kn_node *n, kiln_plugin_phase phase,
                                      const kiln_plugin_creator **cr, kiln_plugin **out);
/* Fail with "plugin 'name' (version, namespace), layer 'x': what: <plugin's message>". */
KN_HIDDEN kiln_status kpl_fail(const kn_node *n, kiln_status st, const char *what);
/* ONNX import: turn nodes whose op is not built in (or every node naming a
 * registered plugin, when override is set) into plugin nodes. strict: an op
 * that is neither built in nor a registered plugin is an error (naming the
 * identity looked up and the creators of that name); else it stays as is. */
KN_HIDDEN kiln_status kpl_import(kn_net *net, bool override_builtins, bool strict);
/* The schema of every plugin node (shape inference through the plugin). */
extern const kn_op_schema kpl_schema;
/* The kernel that runs every plugin node on any backend. */
extern const kb_kernel kpl_kernel;

/* ---- builder and plans (build.c) ---- */
/* For every plugin node: the fields round trip check, then format
 * negotiation (Cast "reformat" nodes appended where the plugin's types differ
 * from its neighbours'; toposort afterwards). `ti`: per-tensor info at the
 * opt shapes of profile 0. */
KN_HIDDEN kiln_status kpl_build_prepare(kn_net *net, const kn_tinfo *ti);
/* The plugin-records section for a built network; empty when no plugins.
 * Libraries marked with kiln_plugin_library_set_embedded go in whole. */
KN_HIDDEN kiln_status kpl_plan_section(const kn_net *net, kn_buf *out);
/* Libraries loaded for one plan, so that a plan whose engine cannot be made
 * leaves none of them registered. */
typedef struct kpl_loaded {
    kiln_plugin_library **libs;
    int n;
} kpl_loaded;
/* After the whole plan is validated (kp_read succeeded on it, giving `net`),
 * and before any plugin code runs: bind every plugin layer of net (every
 * graph) to one registered creator, loading the permitted libraries the plan
 * embeds. Each layer is bound to the exact build it gets (KPL_ATTR_BOUND):
 * the caller's own registration of its identity when there is one, else a
 * library with the SHA-256 the plan names. On failure nothing this call
 * loaded stays registered. */
KN_HIDDEN kiln_status kpl_plan_bind(const void *plan, size_t size, kn_net *net,
                                    kpl_loaded *loaded);
/* Deregister and unload what kpl_plan_bind loaded (the engine failed after
 * binding), then forget the list. Also frees the list on success (keep = 1:
 * the libraries stay registered). */
KN_HIDDEN void kpl_loaded_release(kpl_loaded *loaded, bool keep);
/* Serializes plan binding and engine creation for plans with plugins, so a
 * library one failing load removes is never one another load just bound. */
KN_HIDDEN void kpl_plan_lock(void);
/* Whether any graph of net holds a plugin layer. */
KN_HIDDEN bool kpl_net_has_plugins(const kn_net *net);
KN_HIDDEN void kpl_plan_unlock(void);

#endif
