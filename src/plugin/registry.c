/* registry.c - the process-wide plugin registry keyed by (name, version,
 * namespace), the library loader (dlopen with diagnostics that name the step
 * that failed) and the host table plugins call back into. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plugin.h"

struct kiln_plugin_library {
    char *path;         /* as given, or "<file> (embedded in the plan)" */
    char *file;         /* the file it was loaded from (a removed temp file when embedded) */
    uint8_t *bytes;     /* embedded libraries: the bytes, to embed them again */
    size_t n_bytes;
    char sha256[65];
    void *handle;
    int uses;           /* kernel states (engines, build runs) using its creators */
    bool embed;         /* plans built now carry its bytes */
};

typedef struct entry {
    const kiln_plugin_creator *c;
    char *source;
    kiln_plugin_library *lib;  /* NULL when registered directly */
} entry;

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static entry *reg;
static int reg_n, reg_cap;
static int allow_embedded;

/* ---- the host table ---- */

static _Thread_local char plugin_msg[1024];

static void host_set_error(const char *message) {
    snprintf(plugin_msg, sizeof plugin_msg, "%s", message ? message : "(null)");
}

static void host_log(kiln_severity sev, const char *message) {
    kn_log(sev, "plugin: %s", message ? message : "");
}

static const kiln_plugin_host host = {KILN_PLUGIN_ABI_VERSION, sizeof(kiln_plugin_host),
                                      host_set_error, host_log};

const kiln_plugin_host *kpl_host(void) { return &host; }
void kpl_error_clear(void) { plugin_msg[0] = 0; }
const char *kpl_error_text(void) { return plugin_msg[0] ? plugin_msg : "the plugin gave no message"; }

/* ---- identities ---- */

static const char *nz(const char *s) { return s ? s : ""; }

void kpl_identity(char *buf, size_t cap, const char *name, const char *version, const char *ns) {
    snprintf(buf, cap, "'%s' (version '%s', namespace '%s')", nz(name), nz(version), nz(ns));
}

static bool same_identity(const kiln_plugin_creator *c, const char *name, const char *version,
                          const char *ns) {
    return strcmp(nz(c->name), nz(name)) == 0 && (!version || strcmp(nz(c->version), version) == 0) &&
           strcmp(nz(c->plugin_namespace), nz(ns)) == 0;
}

static int find_locked(const char *name, const char *version, const char *ns) {
    for (int i = 0; i < reg_n; i++)
        if (same_identity(reg[i].c, name, version, ns))
            return i;
    return -1;
}

void kpl_list_same_name(char *buf, size_t cap, const char *name) {
    size_t at = 0;
    buf[0] = 0;
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < reg_n && at + 1 < cap; i++) {
        if (strcmp(nz(reg[i].c->name), nz(name)) != 0)
            continue;
        int w = snprintf(buf + at, cap - at, "%s(version '%s', namespace '%s' from %s)",
                         at ? ", " : "", nz(reg[i].c->version), nz(reg[i].c->plugin_namespace),
                         reg[i].source);
        if (w < 0)
            break;
        at += (size_t)w;
    }
    pthread_mutex_unlock(&reg_mu);
    if (!buf[0])
        snprintf(buf, cap, "none");
}

/* ABI checks on what a library or caller hands over. */
static kiln_status check_creator(const kiln_plugin_creator *c, const char *source) {
    if (!c)
        return kn_error(KILN_ERR_PLUGIN, "%s: a creator pointer is NULL", source);
    if (c->abi_version > KILN_PLUGIN_ABI_VERSION || c->abi_version == 0)
        return kn_error(KILN_ERR_VERSION,
                        "%s: creator '%s' uses plugin ABI version %u; this kiln supports 1..%u "
                        "(rebuild the plugin against this kiln's kiln_plugin.h)",
                        source, c->struct_size >= 24 && c->name ? c->name : "?", c->abi_version,
                        KILN_PLUGIN_ABI_VERSION);
    if (c->struct_size < sizeof(kiln_plugin_creator))
        return kn_error(KILN_ERR_VERSION,
                        "%s: creator '%s' has struct_size %u, smaller than version 1's %zu",
                        source, c->struct_size >= 24 && c->name ? c->name : "?", c->struct_size,
                        sizeof(kiln_plugin_creator));
    if (!c->name || !c->name[0] || !c->version || !c->create)
        return kn_error(KILN_ERR_PLUGIN, "%s: a creator has no name, version or create function",
                        source);
    if (c->n_fields < 0 || (c->n_fields > 0 && !c->fields))
        return kn_error(KILN_ERR_PLUGIN, "%s: creator '%s' has a bad field schema (%d fields)",
                        source, c->name, c->n_fields);
    return KILN_OK;
}

static kiln_status add_locked(const kiln_plugin_creator *c, const char *source,
                              kiln_plugin_library *lib) {
    int dup = find_locked(c->name, c->version, c->plugin_namespace);
    if (dup >= 0) {
        char id[512];
        kpl_identity(id, sizeof id, c->name, c->version, c->plugin_namespace);
        return kn_error(KILN_ERR_PLUGIN,
                        "plugin %s from %s is already registered from %s: deregister one of them "
                        "or load it with another namespace",
                        id, source, reg[dup].source);
    }
    KN_TRY(kn_grow((void **)&reg, &reg_cap, reg_n + 1, sizeof *reg));
    char *src = kn_strdup(source);
    if (!src)
        return KILN_ERR_OUT_OF_MEMORY;
    reg[reg_n].c = c;
    reg[reg_n].source = src;
    reg[reg_n].lib = lib;
    reg_n++;
    return KILN_OK;
}

static void remove_at_locked(int i) {
    kn_free(reg[i].source);
    memmove(&reg[i], &reg[i + 1], (size_t)(reg_n - i - 1) * sizeof *reg);
    reg_n--;
}

/* ---- public registry ---- */

KILN_API kiln_status kiln_plugin_register(const kiln_plugin_creator *creator, const char *source) {
    const char *src = source && *source ? source : "static";
    KN_TRY(check_creator(creator, src));
    pthread_mutex_lock(&reg_mu);
    kiln_status st = add_locked(creator, src, NULL);
    pthread_mutex_unlock(&reg_mu);
    return st;
}

KILN_API kiln_status kiln_plugin_deregister(const char *name, const char *version,
                                            const char *plugin_namespace) {
    char id[512];
    kpl_identity(id, sizeof id, name, version, plugin_namespace);
    pthread_mutex_lock(&reg_mu);
    int i = find_locked(name, version, plugin_namespace);
    kiln_status st = KILN_OK;
    if (i < 0)
        st = kn_error(KILN_ERR_NOT_FOUND, "plugin %s is not registered", id);
    else if (reg[i].lib && reg[i].lib->uses > 0)
        st = kn_error(KILN_ERR_PLUGIN, "plugin %s is in use by %d engine layer(s)", id,
                      reg[i].lib->uses);
    else if (reg[i].lib)
        st = kn_error(KILN_ERR_PLUGIN,
                      "plugin %s came from library '%s': use kiln_plugin_deregister_library", id,
                      reg[i].lib->path);
    else
        remove_at_locked(i);
    pthread_mutex_unlock(&reg_mu);
    return st;
}

KILN_API const kiln_plugin_creator *kiln_plugin_find(const char *name, const char *version,
                                                     const char *plugin_namespace) {
    if (!name)
        return NULL;
    pthread_mutex_lock(&reg_mu);
    int i = find_locked(name, version, plugin_namespace);
    const kiln_plugin_creator *c = i >= 0 ? reg[i].c : NULL;
    pthread_mutex_unlock(&reg_mu);
    return c;
}

KILN_API int kiln_plugin_count(void) {
    pthread_mutex_lock(&reg_mu);
    int n = reg_n;
    pthread_mutex_unlock(&reg_mu);
    return n;
}

KILN_API const kiln_plugin_creator *kiln_plugin_at(int i, const char **source) {
    pthread_mutex_lock(&reg_mu);
    const kiln_plugin_creator *c = NULL;
    if (i >= 0 && i < reg_n) {
        c = reg[i].c;
        if (source)
            *source = reg[i].source;
    }
    pthread_mutex_unlock(&reg_mu);
    return c;
}

bool kpl_creator_origin(const kiln_plugin_creator *c, const char **path, const char **sha256,
                        const char **source) {
    bool found = false;
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < reg_n; i++)
        if (reg[i].c == c) {
            found = true;
            if (path)
                *path = reg[i].lib ? reg[i].lib->path : NULL;
            if (sha256)
                *sha256 = reg[i].lib ? reg[i].lib->sha256 : NULL;
            if (source)
                *source = reg[i].source;
        }
    pthread_mutex_unlock(&reg_mu);
    return found;
}

KILN_API const kiln_plugin_library *kiln_plugin_creator_library(const kiln_plugin_creator *c) {
    const kiln_plugin_library *lib = NULL;
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < reg_n; i++)
        if (reg[i].c == c)
            lib = reg[i].lib;
    pthread_mutex_unlock(&reg_mu);
    return lib;
}

static void use_delta(const kiln_plugin_creator *c, int d) {
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < reg_n; i++)
        if (reg[i].c == c && reg[i].lib)
            reg[i].lib->uses += d;
    pthread_mutex_unlock(&reg_mu);
}
void kpl_acquire(const kiln_plugin_creator *c) { use_delta(c, 1); }
void kpl_release(const kiln_plugin_creator *c) { use_delta(c, -1); }

KILN_API void kiln_plugin_allow_embedded_libraries(int allow) {
    pthread_mutex_lock(&reg_mu);
    allow_embedded = allow != 0;
    pthread_mutex_unlock(&reg_mu);
}

bool kpl_embedded_allowed(void) {
    pthread_mutex_lock(&reg_mu);
    bool a = allow_embedded != 0;
    pthread_mutex_unlock(&reg_mu);
    return a;
}

KILN_API void kiln_sha256_hex(const void *data, size_t n, char out[65]) {
    kn_sha256_hex(data, n, out);
}

KILN_API const char *kiln_plugin_library_path(const kiln_plugin_library *lib) {
    return lib ? lib->path : NULL;
}
KILN_API const char *kiln_plugin_library_sha256(const kiln_plugin_library *lib) {
    return lib ? lib->sha256 : NULL;
}

/* ---- libraries ---- */

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* Turn the OS loader's message into one that says what to do. */
static kiln_status loader_error(const char *path, const char *msg) {
    const char *m = msg ? msg : "unknown error";
    const char *undef = strstr(m, "undefined symbol: ");
    if (undef) {
        char sym[256];
        snprintf(sym, sizeof sym, "%s", undef + strlen("undefined symbol: "));
        sym[strcspn(sym, " ,(")] = 0;
        return kn_error(KILN_ERR_PLUGIN,
                        "plugin library '%s': the OS loader failed: unresolved symbol '%s' (the "
                        "library needs a symbol no loaded library defines: link the library that "
                        "defines it, or build the plugin against this kiln) [%s]",
                        path, sym, m);
    }
    const char *cant = strstr(m, ": cannot open shared object file");
    if (cant) {
        char dep[256];
        size_t n = (size_t)(cant - m);
        snprintf(dep, sizeof dep, "%.*s", (int)(n < 255 ? n : 255), m);
        if (strcmp(base_name(dep), base_name(path)) != 0)
            return kn_error(KILN_ERR_PLUGIN,
                            "plugin library '%s': the OS loader failed: missing dependency '%s' "
                            "(install it or add its folder to LD_LIBRARY_PATH; `ldd %s` lists "
                            "what is missing) [%s]",
                            path, dep, path, m);
    }
    return kn_error(KILN_ERR_PLUGIN, "plugin library '%s': the OS loader failed: %s", path, m);
}

static void lib_free(kiln_plugin_library *lib) {
    if (!lib)
        return;
    if (lib->handle)
        dlclose(lib->handle);
    kn_free(lib->path);
    kn_free(lib->file);
    kn_free(lib->bytes);
    kn_free(lib);
}

KILN_API kiln_status kiln_plugin_library_set_embedded(kiln_plugin_library *lib, int embed) {
    if (!lib)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_plugin_library_set_embedded: NULL library");
    pthread_mutex_lock(&reg_mu);
    lib->embed = embed != 0;
    pthread_mutex_unlock(&reg_mu);
    return KILN_OK;
}

bool kpl_library_embedded(const kiln_plugin_library *lib) {
    if (!lib)
        return false;
    pthread_mutex_lock(&reg_mu);
    bool e = lib->embed;
    pthread_mutex_unlock(&reg_mu);
    return e;
}

kiln_status kpl_library_bytes(const kiln_plugin_library *lib, uint8_t **data, size_t *size) {
    if (lib->bytes) {
        if (!(*data = kn_malloc(lib->n_bytes + 1)))
            return KILN_ERR_OUT_OF_MEMORY;
        memcpy(*data, lib->bytes, lib->n_bytes);
        *size = lib->n_bytes;
        return KILN_OK;
    }
    kiln_status st = kn_file_read(lib->file, data, size);
    return st == KILN_OK ? st : kn_error_wrap(st, "plugin library '%s'", lib->path);
}

/* Read the file for its SHA-256 (the plan manifest and `kiln doctor` compare it). */
static kiln_status hash_file(const char *path, char out[65]) {
    uint8_t *data = NULL;
    size_t size = 0;
    kiln_status st = kn_file_read(path, &data, &size);
    if (st != KILN_OK)
        return kn_error_wrap(st, "plugin library '%s': the file cannot be read", path);
    kn_sha256_hex(data, size, out);
    kn_free(data);
    return KILN_OK;
}

static kiln_status load(const char *path, const char *display, const char *ns,
                        kiln_plugin_library **out) {
    kiln_plugin_library *lib = kn_calloc(1, sizeof *lib);
    if (!lib)
        return KILN_ERR_OUT_OF_MEMORY;
    if (!(lib->path = kn_strdup(display)) || !(lib->file = kn_strdup(path))) {
        lib_free(lib);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    kiln_status st = hash_file(path, lib->sha256);
    if (st != KILN_OK) {
        lib_free(lib);
        return st;
    }
    dlerror();
    lib->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib->handle) {
        st = loader_error(display, dlerror());
        lib_free(lib);
        return st;
    }
    dlerror();
    void *sym = dlsym(lib->handle, KILN_PLUGIN_ENTRY_POINT);
    if (!sym) {
        lib_free(lib);
        return kn_error(KILN_ERR_PLUGIN,
                        "plugin library '%s': no entry point: the library does not export '%s' "
                        "(declare it extern \"C\" with default visibility)",
                        display, KILN_PLUGIN_ENTRY_POINT);
    }
    kiln_plugin_get_creators_fn get;
    memcpy(&get, &sym, sizeof get); /* object to function pointer, as POSIX allows */
    const kiln_plugin_creator *const *cs = NULL;
    int32_t count = 0;
    kpl_error_clear();
    st = get(&host, KILN_PLUGIN_ABI_VERSION, ns, &cs, &count);
    if (st != KILN_OK || count < 0 || (count > 0 && !cs)) {
        if (st == KILN_OK)
            st = KILN_ERR_PLUGIN;
        kn_error(KILN_ERR_PLUGIN, "plugin library '%s': %s failed: %s", display,
                 KILN_PLUGIN_ENTRY_POINT, kpl_error_text());
        lib_free(lib);
        return KILN_ERR_PLUGIN;
    }
    for (int i = 0; i < count; i++) {
        char src[600];
        snprintf(src, sizeof src, "plugin library '%s'", display);
        if ((st = check_creator(cs[i], src)) != KILN_OK) {
            lib_free(lib);
            return st;
        }
    }
    /* all or nothing: a duplicate leaves nothing of this library registered */
    pthread_mutex_lock(&reg_mu);
    int added = 0;
    for (int i = 0; i < count && st == KILN_OK; i++) {
        st = add_locked(cs[i], display, lib);
        if (st == KILN_OK)
            added++;
    }
    if (st != KILN_OK)
        for (int i = reg_n - 1; i >= 0 && added > 0; i--)
            if (reg[i].lib == lib) {
                remove_at_locked(i);
                added--;
            }
    pthread_mutex_unlock(&reg_mu);
    if (st != KILN_OK) {
        lib_free(lib);
        return st;
    }
    kn_log(KILN_LOG_INFO, "plugin library '%s': %d creator(s) registered (sha256 %.16s...)",
           display, count, lib->sha256);
    if (out)
        *out = lib;
    return KILN_OK;
}

KILN_API kiln_status kiln_plugin_load_library(const char *path, const char *plugin_namespace,
                                              kiln_plugin_library **out) {
    if (!path)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_plugin_load_library: NULL path");
    if (access(path, R_OK) != 0)
        return kn_error(KILN_ERR_IO, "plugin library '%s' cannot be opened: %s", path,
                        strerror(errno));
    return load(path, path, plugin_namespace, out);
}

kiln_status kpl_load_bytes(const void *data, size_t size, const char *file_name,
                           kiln_plugin_library **out) {
    const char *dir = getenv("TMPDIR");
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s/kiln-plugin-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(tmp); /* 0600: no other user can swap the file before dlopen */
    if (fd < 0)
        return kn_error(KILN_ERR_IO, "embedded plugin library '%s': cannot create a temp file: %s",
                        file_name, strerror(errno));
    const uint8_t *p = data;
    size_t left = size;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w <= 0) {
            close(fd);
            unlink(tmp);
            return kn_error(KILN_ERR_IO, "embedded plugin library '%s': cannot write '%s'",
                            file_name, tmp);
        }
        p += w;
        left -= (size_t)w;
    }
    close(fd);
    char display[600];
    snprintf(display, sizeof display, "%s (embedded in the plan)", file_name);
    kiln_plugin_library *lib = NULL;
    kiln_status st = load(tmp, display, NULL, &lib);
    unlink(tmp);
    if (st != KILN_OK)
        return st;
    uint8_t *copy = kn_malloc(size + 1);
    if (copy) { /* kept so that a plan built in this process can embed it again */
        memcpy(copy, data, size);
        pthread_mutex_lock(&reg_mu);
        lib->bytes = copy;
        lib->n_bytes = size;
        pthread_mutex_unlock(&reg_mu);
    }
    *out = lib;
    return KILN_OK;
}

KILN_API kiln_status kiln_plugin_deregister_library(kiln_plugin_library *lib) {
    if (!lib)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_plugin_deregister_library: NULL library");
    pthread_mutex_lock(&reg_mu);
    if (lib->uses > 0) {
        int uses = lib->uses;
        pthread_mutex_unlock(&reg_mu);
        return kn_error(KILN_ERR_PLUGIN,
                        "plugin library '%s' is still used by %d engine layer(s): destroy those "
                        "engines first",
                        lib->path, uses);
    }
    for (int i = reg_n - 1; i >= 0; i--)
        if (reg[i].lib == lib)
            remove_at_locked(i);
    pthread_mutex_unlock(&reg_mu);
    lib_free(lib);
    return KILN_OK;
}
