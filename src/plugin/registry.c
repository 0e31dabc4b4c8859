/* registry.c - the process-wide plugin registry keyed by (name, version,
 * namespace) and, for libraries that came out of plans, their SHA-256; the
 * library loader (one file resolved, opened, hashed and loaded, with
 * diagnostics that name the step that failed), the allow-list of embedded
 * libraries and the host table plugins call back into. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plugin.h"

struct kiln_plugin_library {
    char *path;         /* as given, or "<file> (embedded in the plan)" */
    char *file;         /* the absolute path it was loaded from (a removed temp file when embedded) */
    uint8_t *bytes;     /* embedded libraries: the bytes, to embed them again */
    size_t n_bytes;
    char sha256[65];    /* of the bytes read from the descriptor of the file that was loaded */
    void *handle;
    int uses;           /* kernel states (engines, build runs) using its creators */
    bool embed;         /* plans built now carry its bytes */
    bool from_plan;     /* its bytes came out of a plan: it serves only plans naming its SHA-256 */
};

typedef struct entry {
    const kiln_plugin_creator *c;
    char *source;
    kiln_plugin_library *lib;  /* NULL when registered directly */
} entry;

/* Files the OS loader holds (or held: dlclose need not unload), to tell
 * whether an object it would hand back for a path is the file there now. */
typedef struct loaded_file {
    char *file;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec ctime;
} loaded_file;

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static entry *reg;
static int reg_n, reg_cap;
static int allow_embedded;
static char (*allow_sha)[65]; /* the caller's allow-list of embedded libraries */
static int allow_n, allow_cap;
static loaded_file *held;
static int held_n, held_cap;

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
const kiln_plugin_host *kiln_plugin_get_host(void) { return &host; }
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

static bool from_plan(const entry *e) { return e->lib && e->lib->from_plan; }

/* The caller's registration of an identity when there is one (it is unique),
 * else the first one a plan's embedded library made. */
static int find_locked(const char *name, const char *version, const char *ns) {
    int planned = -1;
    for (int i = 0; i < reg_n; i++)
        if (same_identity(reg[i].c, name, version, ns)) {
            if (!from_plan(&reg[i]))
                return i;
            if (planned < 0)
                planned = i;
        }
    return planned;
}

/* An entry of this identity whose library has this SHA-256 ("" = registered
 * directly, no library), the caller's first. */
static int find_sha_locked(const char *name, const char *version, const char *ns,
                           const char *sha) {
    int planned = -1;
    for (int i = 0; i < reg_n; i++) {
        const entry *e = &reg[i];
        if (!same_identity(e->c, name, version, ns))
            continue;
        if (sha[0] ? !(e->lib && strcmp(e->lib->sha256, sha) == 0) : e->lib != NULL)
            continue;
        if (!from_plan(e))
            return i;
        if (planned < 0)
            planned = i;
    }
    return planned;
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

/* An identity is registered at most once by the caller (directly or from a
 * library it named), and at most once per SHA-256 from libraries embedded in
 * plans: two plans may carry two builds of one plugin, each engine bound to
 * its own (kpl_find_bound). */
static int dup_locked(const kiln_plugin_creator *c, const kiln_plugin_library *lib) {
    for (int i = 0; i < reg_n; i++) {
        if (!same_identity(reg[i].c, c->name, c->version, c->plugin_namespace))
            continue;
        bool planned = lib && lib->from_plan;
        if (planned ? from_plan(&reg[i]) && strcmp(reg[i].lib->sha256, lib->sha256) == 0
                    : !from_plan(&reg[i]))
            return i;
    }
    return -1;
}

static kiln_status add_locked(const kiln_plugin_creator *c, const char *source,
                              kiln_plugin_library *lib) {
    int dup = dup_locked(c, lib);
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

const kiln_plugin_creator *kpl_find_bound(const char *name, const char *version, const char *ns,
                                          const char *sha256) {
    if (!name || !sha256)
        return NULL;
    pthread_mutex_lock(&reg_mu);
    int i = find_sha_locked(name, version, ns, sha256);
    const kiln_plugin_creator *c = i >= 0 ? reg[i].c : NULL;
    pthread_mutex_unlock(&reg_mu);
    return c;
}

const kiln_plugin_creator *kpl_find_caller(const char *name, const char *version, const char *ns,
                                           char sha256[65]) {
    const kiln_plugin_creator *c = NULL;
    pthread_mutex_lock(&reg_mu);
    int i = find_locked(name, version, ns);
    if (i >= 0 && !from_plan(&reg[i])) {
        c = reg[i].c;
        snprintf(sha256, 65, "%s", reg[i].lib ? reg[i].lib->sha256 : "");
    }
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

KILN_API kiln_status kiln_plugin_allow_embedded_sha256(const char *sha256) {
    if (!sha256) {
        pthread_mutex_lock(&reg_mu);
        kn_free(allow_sha);
        allow_sha = NULL;
        allow_n = allow_cap = 0;
        pthread_mutex_unlock(&reg_mu);
        return KILN_OK;
    }
    char hex[65];
    size_t n = strlen(sha256);
    for (size_t i = 0; i < n && i < 64; i++) {
        char ch = sha256[i];
        hex[i] = ch >= 'A' && ch <= 'F' ? (char)(ch - 'A' + 'a') : ch;
        if (!((hex[i] >= '0' && hex[i] <= '9') || (hex[i] >= 'a' && hex[i] <= 'f')))
            n = 0;
    }
    if (n != 64)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "kiln_plugin_allow_embedded_sha256: '%.80s' is not a SHA-256 (64 hex "
                        "digits)", sha256);
    hex[64] = 0;
    kiln_status st = KILN_OK;
    pthread_mutex_lock(&reg_mu);
    int i = 0;
    while (i < allow_n && strcmp(allow_sha[i], hex) != 0)
        i++;
    if (i == allow_n && (st = kn_grow((void **)&allow_sha, &allow_cap, allow_n + 1,
                                      sizeof *allow_sha)) == KILN_OK)
        memcpy(allow_sha[allow_n++], hex, 65);
    pthread_mutex_unlock(&reg_mu);
    return st;
}

kpl_permit kpl_embedded_permit(const char *sha256) {
    pthread_mutex_lock(&reg_mu);
    kpl_permit p = allow_embedded ? KPL_PERMIT_YES : KPL_PERMIT_OFF;
    if (allow_n > 0) {
        p = KPL_PERMIT_NOT_LISTED;
        for (int i = 0; i < allow_n; i++)
            if (strcmp(allow_sha[i], sha256) == 0)
                p = KPL_PERMIT_YES;
    }
    pthread_mutex_unlock(&reg_mu);
    return p;
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

/* ---- one file: resolved once, opened once, hashed from that descriptor,
 * loaded from that path only while it is still that same file ---- */

typedef struct lfile {
    char abs[PATH_MAX];  /* realpath of what the caller named */
    int fd;
    struct stat st;      /* fstat of fd before hashing */
    char sha[65];        /* of the bytes read from fd */
} lfile;

static bool same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* Same file with the same size and change time: not written since. (A
 * write to a file always moves its ctime, which no user can set back.) */
static bool unchanged(const struct stat *a, const struct stat *b) {
    return same_file(a, b) && a->st_size == b->st_size &&
           a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

static void hex32(const uint8_t d[32], char out[65]) {
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = digits[d[i] >> 4];
        out[2 * i + 1] = digits[d[i] & 15];
    }
    out[64] = 0;
}

/* Resolve, open without blocking, refuse anything but a regular file, hash
 * every byte fstat counted. f->fd is open on success only. */
static kiln_status open_hash(const char *path, const char *display, lfile *f) {
    f->fd = -1;
    if (!realpath(path, f->abs))
        return kn_error(KILN_ERR_IO, "plugin library '%s' cannot be opened: %s", display,
                        strerror(errno));
    f->fd = open(f->abs, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (f->fd < 0)
        return kn_error(KILN_ERR_IO, "plugin library '%s' (%s) cannot be opened: %s", display,
                        f->abs, strerror(errno));
    kiln_status st = KILN_OK;
    if (fstat(f->fd, &f->st) != 0 || !S_ISREG(f->st.st_mode))
        st = kn_error(KILN_ERR_IO, "plugin library '%s' (%s) is not a regular file", display,
                      f->abs);
    kn_sha256 h;
    kn_sha256_init(&h);
    uint8_t buf[1 << 14];
    off_t at = 0;
    while (st == KILN_OK && at < f->st.st_size) {
        off_t left = f->st.st_size - at;
        ssize_t r = pread(f->fd, buf, left < (off_t)sizeof buf ? (size_t)left : sizeof buf, at);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            st = kn_error(KILN_ERR_IO, "plugin library '%s' (%s) cannot be read at byte %lld%s%s",
                          display, f->abs, (long long)at, r == 0 ? ": it shrank while being read" : ": ",
                          r == 0 ? "" : strerror(errno));
        else {
            kn_sha256_update(&h, buf, (size_t)r);
            at += r;
        }
    }
    if (st != KILN_OK) {
        close(f->fd);
        f->fd = -1;
        return st;
    }
    uint8_t d[32];
    kn_sha256_final(&h, d);
    hex32(d, f->sha);
    return KILN_OK;
}

/* A file any user may change, or one in a folder where another user may put
 * a different file in its place, is worth a warning: the SHA-256 kiln
 * reports is then only what was there at that moment. */
static void warn_writable(const char *display, const lfile *f) {
    if (f->st.st_mode & S_IWOTH)
        kn_log(KILN_LOG_WARNING,
               "plugin library '%s' (%s) is world-writable: any user can change the code "
               "loaded from it",
               display, f->abs);
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", f->abs);
    bool parent = true;
    for (char *slash = strrchr(dir, '/'); slash; slash = strrchr(dir, '/')) {
        bool root = slash == dir;
        slash[root ? 1 : 0] = 0;
        struct stat ds;
        /* a sticky folder (/tmp) lets only a file's owner replace it */
        if (stat(dir, &ds) == 0 && (ds.st_mode & S_IWOTH) &&
            (!(ds.st_mode & S_ISVTX) || (parent && f->st.st_uid != geteuid()))) {
            kn_log(KILN_LOG_WARNING,
                   "plugin library '%s' (%s) lies in world-writable folder '%s': another user "
                   "can put a different library in its place",
                   display, f->abs, dir);
            return;
        }
        parent = false;
        if (root)
            break;
    }
}

/* The OS loader hands back an object already loaded under the same path, or
 * from the same file, instead of reading the file again. That is fine when
 * it is this very file unchanged (loaded before by kiln); otherwise the code
 * that would run is not what was hashed. */
static kiln_status check_held(const lfile *f, const char *display) {
    void *h0 = dlopen(f->abs, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (!h0)
        return KILN_OK;
    dlclose(h0);
    int same = 0, stale = 0;
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < held_n; i++) {
        struct stat hs;
        memset(&hs, 0, sizeof hs);
        hs.st_dev = held[i].dev;
        hs.st_ino = held[i].ino;
        hs.st_size = held[i].size;
        hs.st_ctim = held[i].ctime;
        hs.st_mtim = f->st.st_mtim;
        bool path = strcmp(held[i].file, f->abs) == 0;
        if (unchanged(&hs, &f->st))
            same++;
        else if (path)
            stale++;
    }
    pthread_mutex_unlock(&reg_mu);
    if (same && !stale)
        return KILN_OK;
    if (stale)
        return kn_error(KILN_ERR_PLUGIN,
                        "plugin library '%s': an earlier '%s' is still loaded in this process, "
                        "and the OS loader would use it instead of the file there now (whose "
                        "SHA-256 kiln computed): restart the process to load the new file",
                        display, f->abs);
    return kn_error(KILN_ERR_PLUGIN,
                    "plugin library '%s': '%s' is already loaded in this process by other means "
                    "than kiln, so kiln cannot tell that the code loaded is this file's: load "
                    "plugin libraries only through kiln_plugin_load_library",
                    display, f->abs);
}

static kiln_status record_held(const lfile *f) {
    kiln_status st = KILN_OK;
    pthread_mutex_lock(&reg_mu);
    int i = 0;
    while (i < held_n && strcmp(held[i].file, f->abs) != 0)
        i++;
    if (i == held_n) {
        char *copy = kn_strdup(f->abs);
        if (!copy || (st = kn_grow((void **)&held, &held_cap, held_n + 1, sizeof *held)) != KILN_OK) {
            kn_free(copy);
            st = KILN_ERR_OUT_OF_MEMORY;
        } else
            held[held_n++].file = copy;
    }
    if (st == KILN_OK) {
        held[i].dev = f->st.st_dev;
        held[i].ino = f->st.st_ino;
        held[i].size = f->st.st_size;
        held[i].ctime = f->st.st_ctim;
    }
    pthread_mutex_unlock(&reg_mu);
    return st;
}

/* dlopen the resolved path only while it names the file that was hashed,
 * and check after the load that neither the path nor the file changed. */
static kiln_status dlopen_checked(const lfile *f, const char *display, void **out) {
    struct stat now;
    if (stat(f->abs, &now) != 0 || !same_file(&now, &f->st))
        return kn_error(KILN_ERR_PLUGIN,
                        "plugin library '%s': '%s' was replaced after kiln hashed it: refusing to "
                        "load it",
                        display, f->abs);
    KN_TRY(check_held(f, display));
    dlerror();
    void *h = dlopen(f->abs, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return loader_error(display, dlerror());
    struct stat path_after, fd_after;
    if (stat(f->abs, &path_after) != 0 || fstat(f->fd, &fd_after) != 0 ||
        !same_file(&path_after, &f->st) || !unchanged(&fd_after, &f->st)) {
        dlclose(h);
        return kn_error(KILN_ERR_PLUGIN,
                        "plugin library '%s': '%s' changed while it was being loaded, so the code "
                        "loaded may not be what was hashed: refusing it",
                        display, f->abs);
    }
    kiln_status st = record_held(f);
    if (st != KILN_OK) {
        dlclose(h);
        return st;
    }
    *out = h;
    return KILN_OK;
}

/* Load one library: `expect` (may be NULL) is the SHA-256 it must have,
 * checked before any of its code runs; `planned`: its bytes came out of a
 * plan. */
static kiln_status load(const char *path, const char *display, const char *ns, const char *expect,
                        bool planned, kiln_plugin_library **out) {
    lfile f;
    KN_TRY(open_hash(path, display, &f));
    kiln_status st = KILN_OK;
    if (expect && strcmp(expect, f.sha) != 0)
        st = kn_error(KILN_ERR_PLUGIN,
                      "plugin library '%s' (%s): its SHA-256 is %s, not the expected %s: "
                      "refusing to load it",
                      display, f.abs, f.sha, expect);
    void *handle = NULL;
    if (st == KILN_OK) {
        warn_writable(display, &f);
        st = dlopen_checked(&f, display, &handle);
    }
    close(f.fd);
    if (st != KILN_OK)
        return st;
    kiln_plugin_library *lib = kn_calloc(1, sizeof *lib);
    if (!lib) {
        dlclose(handle);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    lib->handle = handle;
    lib->from_plan = planned;
    memcpy(lib->sha256, f.sha, sizeof lib->sha256);
    if (!(lib->path = kn_strdup(display)) || !(lib->file = kn_strdup(f.abs))) {
        lib_free(lib);
        return KILN_ERR_OUT_OF_MEMORY;
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
    kn_log(KILN_LOG_INFO, "plugin library '%s' (%s): %d creator(s) registered (sha256 %s)",
           display, lib->file, count, lib->sha256);
    if (out)
        *out = lib;
    return KILN_OK;
}

static bool is_sha256(const char *s) {
    if (!s || strlen(s) != 64)
        return false;
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

KILN_API kiln_status kiln_plugin_load_library(const char *path, const char *plugin_namespace,
                                              kiln_plugin_library **out) {
    if (!path)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_plugin_load_library: NULL path");
    return load(path, path, plugin_namespace, NULL, false, out);
}

KILN_API kiln_status kiln_plugin_load_library_sha256(const char *path,
                                                     const char *plugin_namespace,
                                                     const char *sha256,
                                                     kiln_plugin_library **out) {
    if (!path)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_plugin_load_library_sha256: NULL path");
    if (sha256 && !is_sha256(sha256))
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "kiln_plugin_load_library_sha256: '%.80s' is not a SHA-256 (64 lowercase "
                        "hex digits)", sha256);
    return load(path, path, plugin_namespace, sha256, false, out);
}

kiln_status kpl_load_bytes(const void *data, size_t size, const char *file_name,
                           kiln_plugin_library **out) {
    char sha[65];
    kn_sha256_hex(data, size, sha);
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
        if (w < 0 && errno == EINTR)
            continue;
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
    /* the file must hold exactly the bytes that were checked */
    kiln_status st = load(tmp, display, NULL, sha, true, &lib);
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
