/* cmd_manifest.c - `kiln manifest plan.kiln --plugins=a.so,... -o m.json`: the
 * deployment manifest of a plan: its SHA-256 and the kiln that reads it, and
 * each plugin library it needs (file, SHA-256, the identities it provides,
 * packaging external or embedded). `kiln doctor --manifest` checks a machine
 * against it. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json.h"
#include "kiln/kiln_plugin.h"
#include "plugins_cli.h"

void cli_manifest_usage(FILE *f) {
    fprintf(f,
            "Usage: kiln manifest PLAN [--plugins=A.so,B.so] [--pluginNamespace=NS] [-o M.json]\n"
            "\n"
            "Write the deployment manifest of a plan (JSON, stdout without -o): the plan's\n"
            "SHA-256, kiln version, backend and target, and for each plugin library the plan\n"
            "needs: file, SHA-256, the (name, version, namespace) identities it provides and\n"
            "its packaging (external: install the file; embedded: inside the plan).\n"
            "  --plugins=LIST     the libraries to describe (the ones you will ship)\n"
            "  -o FILE, --output=FILE  where to write the manifest\n");
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static void json_str(FILE *f, const char *s) { cli_json_string(f, s ? s : ""); }

/* Identities the registered creators of `lib` provide, as a JSON array. */
static void lib_identities(FILE *f, const kiln_plugin_library *lib) {
    fprintf(f, "[");
    int k = 0;
    for (int i = 0; i < kiln_plugin_count(); i++) {
        const kiln_plugin_creator *c = kiln_plugin_at(i, NULL);
        if (!c || kiln_plugin_creator_library(c) != lib)
            continue;
        fprintf(f, "%s{\"name\": ", k++ ? ", " : "");
        json_str(f, c->name);
        fprintf(f, ", \"version\": ");
        json_str(f, c->version);
        fprintf(f, ", \"namespace\": ");
        json_str(f, c->plugin_namespace);
        fprintf(f, "}");
    }
    fprintf(f, "]");
}

/* The registered library whose file has this SHA-256 (or, failing that, this
 * file name). */
static const kiln_plugin_library *find_lib(const char *sha, const char *file) {
    const kiln_plugin_library *by_name = NULL;
    for (int i = 0; i < kiln_plugin_count(); i++) {
        const kiln_plugin_library *lib = kiln_plugin_creator_library(kiln_plugin_at(i, NULL));
        if (!lib)
            continue;
        if (strcmp(kiln_plugin_library_sha256(lib), sha) == 0)
            return lib;
        if (strcmp(base_name(kiln_plugin_library_path(lib)), file) == 0)
            by_name = lib;
    }
    return by_name;
}

int cli_cmd_manifest(int argc, char **argv) {
    const char *plan_path = NULL, *out_path = NULL, *plugins = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--plugins=", 10) == 0)
            plugins = a + 10;
        else if (strcmp(a, "--plugins") == 0 && i + 1 < argc)
            plugins = argv[++i];
        else if (strcmp(a, "-o") == 0 && i + 1 < argc)
            out_path = argv[++i];
        else if (strncmp(a, "--pluginNamespace", 17) == 0 && (a[17] == '=' || !a[17])) {
            if (cli_plugin_namespace_flag("--pluginNamespace", a[17] ? a + 18 : NULL) < 0)
                return 2;
        }
        else if (strncmp(a, "--output=", 9) == 0)
            out_path = a + 9;
        else if (strcmp(a, "--help") == 0) {
            cli_manifest_usage(stdout);
            return 0;
        } else if (a[0] != '-' && !plan_path)
            plan_path = a;
        else {
            cli_error("kiln manifest: unknown argument '%s' (see kiln help manifest)", a);
            return 2;
        }
    }
    if (!plan_path) {
        cli_error("kiln manifest: give a plan file (see kiln help manifest)");
        return 2;
    }
    if (plugins && !cli_plugin_load_list(plugins, 0))
        return 1;
    void *plan = NULL;
    size_t size = 0;
    if (!cli_read_file(plan_path, &plan, &size))
        return 1;
    kiln_plan_info info;
    kiln_status st = kiln_plan_read_info(plan, size, &info);
    char *pj = NULL;
    if (st == KILN_OK)
        st = kiln_plan_plugins_json(plan, size, &pj);
    if (st != KILN_OK) {
        cli_kiln_error(plan_path, st);
        free(plan);
        return 1;
    }
    char sha[65], err[256];
    kiln_sha256_hex(plan, size, sha);
    free(plan);
    cj_value *recs = cj_parse(pj, err, sizeof err);
    kiln_free(pj);
    if (!recs) {
        cli_error("%s: the plan's plugin records do not parse: %s", plan_path, err);
        return 1;
    }
    FILE *f = out_path ? fopen(out_path, "w") : stdout;
    if (!f) {
        cli_error("kiln manifest: cannot create '%s'", out_path);
        cj_free(recs);
        return 1;
    }
    fprintf(f, "{\n  \"kiln_version\": ");
    json_str(f, kiln_version_string());
    fprintf(f, ",\n  \"plan\": {\"file\": ");
    json_str(f, base_name(plan_path));
    fprintf(f, ", \"sha256\": \"%s\", \"bytes\": %zu, \"built_by\": \"%u.%u.%u\", \"format_version\": %u, "
               "\"backend\": ", sha, size, info.kiln_version / 10000, info.kiln_version / 100 % 100,
            info.kiln_version % 100, info.format_version);
    json_str(f, info.backend);
    fprintf(f, ", \"target\": ");
    json_str(f, info.target);
    fprintf(f, "},\n  \"libraries\": [");
    const cj_value *libs = cj_get(recs, "libraries"), *plugs = cj_get(recs, "plugins");
    int missing = 0;
    for (size_t i = 0; libs && i < libs->n; i++) {
        const cj_value *l = &libs->items[i];
        const char *file = cj_str(l, "file", ""), *lsha = cj_str(l, "sha256", "");
        const char *pack = cj_str(l, "packaging", "external");
        const kiln_plugin_library *lib = find_lib(lsha, file);
        fprintf(f, "%s\n    {\"file\": ", i ? "," : "");
        json_str(f, file);
        fprintf(f, ", \"sha256\": \"%s\", \"packaging\": \"%s\", \"path\": ", lsha, pack);
        if (lib)
            json_str(f, kiln_plugin_library_path(lib));
        else
            fprintf(f, "null");
        if (lib && strcmp(kiln_plugin_library_sha256(lib), lsha) != 0)
            cli_warn("%s: the plan was built with a library of SHA-256 %.16s..., --plugins gave "
                     "one of %.16s...: the manifest records the plan's",
                     file, lsha, kiln_plugin_library_sha256(lib));
        fprintf(f, ", \"identities\": ");
        if (lib) {
            lib_identities(f, lib);
        } else { /* from the plan's records of this library */
            if (strcmp(pack, "external") == 0) {
                cli_warn("the plan needs library '%s' but --plugins gives none that matches", file);
                missing++;
            }
            fprintf(f, "[");
            int k = 0;
            for (size_t r = 0; plugs && r < plugs->n; r++) {
                if ((size_t)cj_num(&plugs->items[r], "library", -1) != i)
                    continue;
                fprintf(f, "%s{\"name\": ", k++ ? ", " : "");
                json_str(f, cj_str(&plugs->items[r], "name", ""));
                fprintf(f, ", \"version\": ");
                json_str(f, cj_str(&plugs->items[r], "version", ""));
                fprintf(f, ", \"namespace\": ");
                json_str(f, cj_str(&plugs->items[r], "namespace", ""));
                fprintf(f, "}");
            }
            fprintf(f, "]");
        }
        fprintf(f, "}");
    }
    fprintf(f, "%s],\n  \"plugins\": [", libs && libs->n ? "\n  " : "");
    for (size_t r = 0; plugs && r < plugs->n; r++) {
        const cj_value *p = &plugs->items[r];
        fprintf(f, "%s\n    {\"layer\": ", r ? "," : "");
        json_str(f, cj_str(p, "layer", ""));
        fprintf(f, ", \"name\": ");
        json_str(f, cj_str(p, "name", ""));
        fprintf(f, ", \"version\": ");
        json_str(f, cj_str(p, "version", ""));
        fprintf(f, ", \"namespace\": ");
        json_str(f, cj_str(p, "namespace", ""));
        int li = (int)cj_num(p, "library", -1);
        fprintf(f, ", \"library\": ");
        if (li >= 0 && libs && (size_t)li < libs->n)
            json_str(f, cj_str(&libs->items[li], "file", ""));
        else
            fprintf(f, "null");
        fprintf(f, "}");
    }
    fprintf(f, "%s]\n}\n", plugs && plugs->n ? "\n  " : "");
    cj_free(recs);
    if (out_path) {
        if (fclose(f) != 0) {
            cli_error("kiln manifest: cannot write '%s'", out_path);
            return 1;
        }
        cli_info("manifest written to %s", out_path);
    }
    return missing ? 1 : 0;
}
