/* cmd_plugins.c - `kiln plugins list`: every registered plugin creator with
 * its identity, where it came from and its fields; and the exec flags that
 * load plugin libraries (trtexec's --staticPlugins / --dynamicPlugins /
 * --setPluginsToSerialize). */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kiln/kiln_plugin.h"
#include "plugins_cli.h"

static const char *field_type_name(kiln_field_type t) {
    static const char *const names[] = {"int8",    "int16",   "int32",   "int64",  "float16",
                                        "bfloat16", "float32", "float64", "string", "bytes"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

/* --pluginNamespace: the namespace every library loaded from the command
 * line gives its creators (trtexec has no flag for it; TensorRT's C++ API
 * takes it in initLibNvInferPlugins). NULL: the library's own. */
static const char *g_namespace;
/* The plugin flags cli_plugin_take_flags took, for commands that run kiln
 * again (debug reduce runs compare). */
static char **g_taken;
static int g_n_taken;

void cli_plugin_set_namespace(const char *ns) { g_namespace = ns && *ns ? ns : NULL; }
const char *cli_plugin_namespace(void) { return g_namespace; }
int cli_plugin_taken_flags(char *const **args) {
    *args = g_taken;
    return g_n_taken;
}

static void remember(const char *arg) {
    char **grown = realloc(g_taken, (size_t)(g_n_taken + 1) * sizeof *g_taken);
    if (!grown)
        return;
    g_taken = grown;
    if ((g_taken[g_n_taken] = strdup(arg)) != NULL)
        g_n_taken++;
}

int cli_plugin_namespace_flag(const char *name, const char *value) {
    if (strcmp(name, "--pluginNamespace") != 0)
        return 0;
    if (!value || !*value) {
        cli_error("--pluginNamespace needs a value: the namespace the loaded plugin libraries "
                  "register their creators in");
        return -1;
    }
    cli_plugin_set_namespace(value);
    return 1;
}

int cli_plugin_load_list(const char *list, int embed) {
    char *copy = strdup(list ? list : "");
    if (!copy)
        return 0;
    int ok = 1;
    for (char *save = NULL, *p = strtok_r(copy, ",", &save); p && ok; p = strtok_r(NULL, ",", &save)) {
        kiln_plugin_library *lib = NULL;
        kiln_status st = kiln_plugin_load_library(p, g_namespace, &lib);
        if (st != KILN_OK) {
            cli_kiln_error("loading plugin library", st);
            ok = 0;
            break;
        }
        if (embed && kiln_plugin_library_set_embedded(lib, 1) != KILN_OK) {
            cli_kiln_error("--setPluginsToSerialize", KILN_ERR_INTERNAL);
            ok = 0;
        }
        cli_info("plugin library %s loaded%s (sha256 %.16s...)", p,
                 embed ? ", its bytes go into built plans" : "", kiln_plugin_library_sha256(lib));
    }
    free(copy);
    return ok;
}

int cli_plugin_allow_sha_list(const char *list) {
    char *copy = strdup(list ? list : "");
    if (!copy)
        return 0;
    int ok = 1, n = 0;
    for (char *save = NULL, *p = strtok_r(copy, ",", &save); p && ok; p = strtok_r(NULL, ",", &save)) {
        kiln_status st = kiln_plugin_allow_embedded_sha256(p);
        if (st != KILN_OK) {
            cli_kiln_error("--allowEmbeddedPluginSha256", st);
            ok = 0;
        }
        n++;
    }
    free(copy);
    if (ok && n == 0) {
        cli_error("--allowEmbeddedPluginSha256 needs a comma-separated list of SHA-256s");
        ok = 0;
    }
    return ok;
}

/* A library named in --setPluginsToSerialize that --dynamicPlugins already
 * loaded is only marked; others are loaded and marked. */
static int mark_embedded(const char *list) {
    char *copy = strdup(list ? list : "");
    if (!copy)
        return 0;
    int ok = 1;
    for (char *save = NULL, *p = strtok_r(copy, ",", &save); p && ok; p = strtok_r(NULL, ",", &save)) {
        kiln_plugin_library *found = NULL;
        for (int i = 0; i < kiln_plugin_count() && !found; i++) {
            const kiln_plugin_library *lib = kiln_plugin_creator_library(kiln_plugin_at(i, NULL));
            if (lib && strcmp(kiln_plugin_library_path(lib), p) == 0)
                found = (kiln_plugin_library *)lib;
        }
        if (found) {
            ok = kiln_plugin_library_set_embedded(found, 1) == KILN_OK;
            cli_info("plugin library %s: its bytes go into built plans", p);
        } else {
            ok = cli_plugin_load_list(p, 1);
        }
    }
    free(copy);
    return ok;
}

int cli_plugin_take_flags(int *argc, char **argv) {
    int out = 0;
    const char *serialize = NULL;
    /* the namespace first: it applies to every library, wherever it is named */
    for (int i = 0; i < *argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '=');
        size_t n = eq ? (size_t)(eq - a) : strlen(a);
        if (n == 17 && strncmp(a, "--pluginNamespace", 17) == 0) {
            if (cli_plugin_namespace_flag("--pluginNamespace", eq ? eq + 1 : NULL) < 0)
                return 2;
            remember(a);
        }
    }
    for (int i = 0; i < *argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '=');
        size_t n = eq ? (size_t)(eq - a) : strlen(a);
        const char *v = eq ? eq + 1 : NULL;
#define IS(flag) (n == strlen(flag) && strncmp(a, flag, n) == 0)
        if (IS("--pluginNamespace")) {
            continue; /* taken above */
        } else if (IS("--staticPlugins") || IS("--dynamicPlugins") || IS("--plugins")) {
            if (!v || !*v) {
                cli_error("%.*s needs a value: a comma-separated list of plugin libraries", (int)n, a);
                return 2;
            }
            remember(a);
            if (!cli_plugin_load_list(v, 0))
                return 1; /* the work failed (docs/cli.md: exit status 1) */
        } else if (IS("--setPluginsToSerialize")) {
            if (!v || !*v) {
                cli_error("--setPluginsToSerialize needs a comma-separated list of libraries");
                return 2;
            }
            remember(a);
            serialize = v;
        } else if (IS("--allowEmbeddedPlugins")) {
            if (v) {
                cli_error("--allowEmbeddedPlugins is a switch and takes no value");
                return 2;
            }
            remember(a);
            kiln_plugin_allow_embedded_libraries(1);
        } else if (IS("--allowEmbeddedPluginSha256")) {
            if (!cli_plugin_allow_sha_list(v))
                return 2;
            remember(a);
        } else {
            argv[out++] = argv[i];
        }
#undef IS
    }
    if (serialize && !mark_embedded(serialize))
        return 1;
    *argc = out;
    return 0;
}

void cli_plugin_exec_usage(FILE *f) {
    fprintf(f,
            "\nPlugins:\n"
            "  --staticPlugins=A.so,B.so  load plugin libraries into the process (their\n"
            "                             bytes stay out of plans)\n"
            "  --dynamicPlugins=A.so,...  load plugin libraries that --setPluginsToSerialize\n"
            "                             may embed\n"
            "  --setPluginsToSerialize=A.so,...  embed these libraries' bytes in the plan\n"
            "                             (loaded first when not loaded yet)\n"
            "  --allowEmbeddedPlugins     let a loaded plan load the libraries embedded in it\n"
            "                             (only when their SHA-256 matches the plan's\n"
            "                             manifest; kiln addition)\n"
            "  --allowEmbeddedPluginSha256=H1,H2  let a loaded plan load only the embedded\n"
            "                             libraries whose bytes hash to one of these SHA-256s\n"
            "                             (the trust decision comes from you, not the plan;\n"
            "                             implies permission for those; kiln addition)\n"
            "  --pluginNamespace=NS       the namespace the loaded libraries register their\n"
            "                             creators in (for models whose plugin nodes carry\n"
            "                             plugin_namespace; trtexec has no such flag)\n");
}

void cli_plugins_usage(FILE *f) {
    fprintf(f,
            "Usage: kiln plugins list [--load=LIB.so]... [--namespace=NS]\n"
            "\n"
            "List every registered plugin creator: name, version, namespace, where it came\n"
            "from (library path and SHA-256) and its fields (name, type, length, required).\n"
            "  --load=LIB.so      load a plugin library first (repeatable, or a comma list)\n"
            "  --namespace=NS     give the creators of the libraries loaded after it this\n"
            "                     namespace\n");
}

int cli_cmd_plugins(int argc, char **argv) {
    if (argc < 1 || strcmp(argv[0], "list") != 0) {
        if (argc >= 1 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "help") == 0)) {
            cli_plugins_usage(stdout);
            return 0;
        }
        cli_error("kiln plugins: expected 'list' (see kiln help plugins)");
        return 2;
    }
    const char *ns = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--load=", 7) == 0 || strncmp(a, "--plugins=", 10) == 0) {
            const char *list = strchr(a, '=') + 1;
            char *copy = strdup(list);
            for (char *save = NULL, *p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
                kiln_plugin_library *lib = NULL;
                kiln_status st = kiln_plugin_load_library(p, ns, &lib);
                if (st != KILN_OK) {
                    cli_kiln_error("loading plugin library", st);
                    free(copy);
                    return 1;
                }
            }
            free(copy);
        } else if (strcmp(a, "--load") == 0 && i + 1 < argc) {
            kiln_plugin_library *lib = NULL;
            kiln_status st = kiln_plugin_load_library(argv[++i], ns, &lib);
            if (st != KILN_OK) {
                cli_kiln_error("loading plugin library", st);
                return 1;
            }
        } else if (strncmp(a, "--namespace=", 12) == 0) {
            ns = a + 12;
        } else if (strcmp(a, "--help") == 0) {
            cli_plugins_usage(stdout);
            return 0;
        } else {
            cli_error("kiln plugins list: unknown argument '%s'", a);
            return 2;
        }
    }
    int n = kiln_plugin_count();
    printf("%d plugin creator(s) registered\n", n);
    for (int i = 0; i < n; i++) {
        const char *src = NULL;
        const kiln_plugin_creator *c = kiln_plugin_at(i, &src);
        if (!c)
            continue;
        const kiln_plugin_library *lib = kiln_plugin_creator_library(c);
        printf("%s  version '%s'  namespace '%s'  (ABI %u)\n", c->name, c->version,
               c->plugin_namespace ? c->plugin_namespace : "", c->abi_version);
        printf("    from: %s%s%s\n", src ? src : "?", lib ? "  sha256 " : "",
               lib ? kiln_plugin_library_sha256(lib) : "");
        if (c->n_fields == 0)
            printf("    fields: none\n");
        for (int k = 0; k < c->n_fields; k++) {
            const kiln_field_spec *s = &c->fields[k];
            char len[32];
            if (s->length < 0)
                snprintf(len, sizeof len, "any length");
            else
                snprintf(len, sizeof len, "length %lld", (long long)s->length);
            printf("    field %-16s %-9s %-12s %s\n", s->name, field_type_name(s->type), len,
                   s->required ? "required" : "optional");
        }
    }
    return 0;
}
