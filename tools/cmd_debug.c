/* cmd_debug.c - `kiln debug`: tools that narrow an accuracy problem down, in
 * the spirit of Polygraphy's `debug reduce` and `debug precision`:
 *   reduce     shrink a model that fails a `kiln compare` check to the
 *              smallest subgraph that still fails it
 *   precision  find the fewest layers that must stay FP32 for a reduced-
 *              precision build to pass, printed as --layerPrecisions
 *   rewrite    read a model and write it back (the ONNX writer on its own) */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compare.h"
#include "plugins_cli.h"

void cli_debug_usage(FILE *f) {
    fputs("Usage: kiln debug reduce MODEL.onnx --check=\"COMPARE FLAGS\" [-o REDUCED.onnx]\n"
          "       kiln debug precision MODEL.onnx --fp16|--bf16 [compare flags]\n"
          "       kiln debug rewrite MODEL.onnx -o OUT.onnx\n"
          "\n"
          "reduce: runs `kiln compare SUBGRAPH.onnx CHECK` on pieces of the model and keeps\n"
          "  the smallest piece that still fails: first a bisection over the topological\n"
          "  order (cutting nodes from the end, then from the start), then removal of\n"
          "  single nodes. Tensors cut off become inputs, fed with the values the\n"
          "  reference computes on the whole model, so a piece sees the data the model\n"
          "  gives it.\n"
          "  --check=ARGS        flags for kiln compare (quoted as one argument)\n"
          "  -o FILE | --output=FILE  where to write the reduced model (reduced.onnx)\n"
          "  --fail-code=N       exit status of compare that means failure (default 1)\n"
          "  --mode=bisect|linear  bisect then linear (default), or linear only\n"
          "\n"
          "precision: builds with the given reduced precision and compares against the\n"
          "  reference, keeping layers in FP32 until it passes; then drops every FP32\n"
          "  layer it can. Prints the result as --layerPrecisions=LAYER:fp32,...\n"
          "  Takes every kiln compare flag (tolerances, inputs, --reference).\n"
          "\n"
          "rewrite: parse the model and write it again with kiln's ONNX writer.\n"
          "\n"
          "  --verbose           print every check\n",
          f);
}

/* ---------------- shared ---------------- */

static char *g_tmpdir;

static bool make_tmpdir(void) {
    static char tmpl[64];
    snprintf(tmpl, sizeof tmpl, "/tmp/kiln-debug-XXXXXX");
    g_tmpdir = mkdtemp(tmpl);
    if (!g_tmpdir)
        cli_error("cannot make a temporary folder: %s", strerror(errno));
    return g_tmpdir != NULL;
}

static void remove_tmpdir(const char *const *files, int n) {
    if (!g_tmpdir)
        return;
    char p[512];
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/%s", g_tmpdir, files[i]);
        unlink(p);
    }
    rmdir(g_tmpdir);
    g_tmpdir = NULL;
}

/* ---------------- reduce ---------------- */

typedef struct reducer {
    const kiln_network *net;
    const npy_list *golden;   /* inputs and every tensor's reference value */
    char **check;             /* compare flags */
    int n_check;
    int fail_code;
    int checks;
    char model_path[512], golden_path[512];
} reducer;

/* The subnetwork of the listed nodes, with types and shapes of its inputs
 * and outputs taken from the reference values. */
static kiln_network *extract(const reducer *r, const int *nodes, int n) {
    kiln_network *sub = NULL;
    kiln_status st = kiln_network_extract(r->net, n, nodes, &sub);
    if (st != KILN_OK) {
        cli_kiln_error("extracting a subgraph", st);
        return NULL;
    }
    for (int pass = 0; pass < 2; pass++) {
        int count = pass ? kiln_network_num_outputs(sub) : kiln_network_num_inputs(sub);
        for (int i = 0; i < count; i++) {
            const char *name =
                pass ? kiln_network_output_name(sub, i) : kiln_network_input_name(sub, i);
            const npy_array *a = npy_list_find(r->golden, name);
            if (a && (st = kiln_network_set_tensor_info(sub, name, a->dtype, a->rank, a->dims)) !=
                         KILN_OK) {
                cli_kiln_error(name, st);
                kiln_network_destroy(sub);
                return NULL;
            }
        }
    }
    return sub;
}

/* 1 when the piece fails the check, 0 when it passes, -1 on an error. */
static int piece_fails(reducer *r, const int *nodes, int n) {
    kiln_network *sub = extract(r, nodes, n);
    if (!sub)
        return -1;
    if (kiln_network_num_outputs(sub) == 0) {
        kiln_network_destroy(sub);
        return 0;
    }
    kiln_status st = kiln_onnx_write_file(sub, r->model_path);
    kiln_network_destroy(sub);
    if (st != KILN_OK) {
        cli_kiln_error("writing a subgraph", st);
        return -1;
    }
    char load[600];
    snprintf(load, sizeof load, "--load-inputs=%s", r->golden_path);
    char *const *plug = NULL;
    int n_plug = cli_plugin_taken_flags(&plug); /* the libraries this process loaded */
    char **argv = calloc((size_t)r->n_check + (size_t)n_plug + 8, sizeof *argv);
    if (!argv)
        return -1;
    int k = 0;
    argv[k++] = (char *)cmp_self_exe();
    argv[k++] = "compare";
    argv[k++] = r->model_path;
    for (int i = 0; i < n_plug; i++)
        argv[k++] = plug[i];
    for (int i = 0; i < r->n_check; i++)
        argv[k++] = r->check[i];
    argv[k++] = load;
    argv[k++] = "--quiet";
    argv[k] = NULL;
    int rc = cmp_spawn(argv, !cli_verbose);
    r->checks++;
    bool fails = rc == r->fail_code;
    cli_vlog("check %d: %d node(s) [%s .. %s]: exit %d -> %s", r->checks, n,
             kiln_network_node_name(r->net, nodes[0]),
             kiln_network_node_name(r->net, nodes[n - 1]), rc, fails ? "fails" : "passes");
    if (rc < 0 || rc == 127) {
        cli_error("cannot run '%s compare'", argv[0]);
        free(argv);
        return -1;
    }
    free(argv);
    return fails ? 1 : 0;
}

static int range_fails(reducer *r, int lo, int hi) {
    int n = hi - lo + 1;
    int *nodes = malloc((size_t)n * sizeof *nodes);
    if (!nodes)
        return -1;
    for (int i = 0; i < n; i++)
        nodes[i] = lo + i;
    int v = piece_fails(r, nodes, n);
    free(nodes);
    return v;
}

/* Golden values: the inputs and every tensor of the whole model. */
static bool golden_values(const cmp_opts *o, const char *model, npy_list *golden) {
    kiln_network *gnet = NULL;
    kiln_status st = kiln_onnx_parse_file(model, &gnet);
    if (st != KILN_OK) {
        cli_kiln_error(model, st);
        return false;
    }
    npy_list inputs, outs;
    memset(&outs, 0, sizeof outs);
    bool ok = cmp_prepare_inputs(o, gnet, &inputs);
    int n = 0;
    const char **names = NULL;
    if (ok) {
        int cap = 1;
        for (int i = 0; i < kiln_network_num_nodes(gnet); i++)
            cap += kiln_network_node_num_outputs(gnet, i);
        names = calloc((size_t)cap, sizeof *names);
        ok = names != NULL;
        for (int i = 0; ok && i < kiln_network_num_nodes(gnet); i++)
            for (int j = 0; j < kiln_network_node_num_outputs(gnet, i); j++) {
                const char *t = kiln_network_node_output(gnet, i, j);
                if (t && *t) {
                    names[n++] = t;
                    if (kiln_network_mark_output(gnet, t) != KILN_OK)
                        ok = false;
                }
            }
    }
    const char *used = NULL;
    cmp_opts ro = *o;
    ro.model = model;
    ro.ref_model = NULL;
    if (ok)
        ok = cmp_run_reference(&ro, gnet, &inputs, names, n, &outs, &used);
    if (ok)
        cli_info("Reference values of %d tensors from %s", outs.n, used);
    memset(golden, 0, sizeof *golden);
    for (int i = 0; ok && i < inputs.n; i++) {
        const npy_array *a = &inputs.items[i];
        ok = npy_list_add(golden, a->name, a->dtype, a->rank, a->dims, a->data, a->bytes);
    }
    for (int i = 0; ok && i < outs.n; i++) {
        const npy_array *a = &outs.items[i];
        if (!npy_list_find(golden, a->name))
            ok = npy_list_add(golden, a->name, a->dtype, a->rank, a->dims, a->data, a->bytes);
    }
    free(names);
    npy_list_free(&inputs);
    npy_list_free(&outs);
    kiln_network_destroy(gnet);
    if (!ok)
        npy_list_free(golden);
    return ok;
}

static int cmd_reduce(int argc, char **argv) {
    const char *model = NULL, *check = "", *out = "reduced.onnx";
    long long fail_code = 1;
    bool linear_only = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *name, *value;
        if ((strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0 || strcmp(a, "--check") == 0) &&
            i + 1 < argc) {
            if (strcmp(a, "--check") == 0)
                check = argv[++i];
            else
                out = argv[++i];
            continue;
        }
        if (!cli_split_flag(a, &name, &value)) {
            if (model) {
                cli_error("unexpected argument '%s'", a);
                return 2;
            }
            model = a;
            continue;
        }
        if (strcmp(name, "--check") == 0 && value) {
            check = value;
        } else if (strcmp(name, "--output") == 0 && value) {
            out = value;
        } else if (strcmp(name, "--fail-code") == 0) {
            if (!cli_parse_int(name, value, 0, 255, &fail_code))
                return 2;
        } else if (strcmp(name, "--mode") == 0 && value &&
                   (strcmp(value, "bisect") == 0 || strcmp(value, "linear") == 0)) {
            linear_only = strcmp(value, "linear") == 0;
        } else if (strcmp(name, "--verbose") == 0) {
            cli_verbose = true;
        } else if (strcmp(name, "--help") == 0) {
            cli_debug_usage(stdout);
            return 0;
        } else {
            cli_error("unknown flag '%s' for debug reduce (see kiln debug --help)", a);
            return 2;
        }
    }
    if (!model) {
        cli_error("debug reduce needs a model: kiln debug reduce MODEL.onnx --check=\"...\"");
        return 2;
    }
    cli_install_logger(cli_verbose);
    reducer r;
    memset(&r, 0, sizeof r);
    r.fail_code = (int)fail_code;
    r.check = cmp_split_words(check, &r.n_check);
    /* the check's input flags decide the inputs of the whole model */
    cmp_opts o;
    cmp_opts_init(&o);
    for (int i = 0; i < r.n_check; i++) {
        const char *name, *value;
        if (cli_split_flag(r.check[i], &name, &value) && cmp_flag(&o, name, value) < 0) {
            cli_error("--check: bad flag '%s'", r.check[i]);
            cmp_words_free(r.check, r.n_check);
            cmp_opts_free(&o);
            return 2;
        }
    }
    int rc = 3;
    kiln_network *net = NULL;
    npy_list golden;
    memset(&golden, 0, sizeof golden);
    int *cur = NULL;
    static const char *const tmp_files[] = {"piece.onnx", "golden.npz"};
    kiln_status st = kiln_onnx_parse_file(model, &net);
    if (st != KILN_OK) {
        cli_kiln_error(model, st);
        goto done;
    }
    if (!make_tmpdir())
        goto done;
    snprintf(r.model_path, sizeof r.model_path, "%s/piece.onnx", g_tmpdir);
    snprintf(r.golden_path, sizeof r.golden_path, "%s/golden.npz", g_tmpdir);
    r.net = net;
    r.golden = &golden;
    if (!golden_values(&o, model, &golden))
        goto done;
    char err[NPY_ERR_CAP];
    if (!npz_save_file(r.golden_path, &golden, err)) {
        cli_error("%s", err);
        goto done;
    }
    int n = kiln_network_num_nodes(net);
    if (n == 0) {
        cli_error("the model has no nodes");
        goto done;
    }
    cli_info("Checking the whole model (%d nodes): kiln compare %s", n, check);
    int v = range_fails(&r, 0, n - 1);
    if (v < 0)
        goto done;
    if (v == 0) {
        cli_error("the whole model passes the check; there is nothing to reduce");
        rc = 1;
        goto done;
    }
    int lo = 0, hi = n - 1;
    if (!linear_only) {
        /* the shortest failing prefix, then the shortest failing suffix of it */
        int a = 0, b = n - 1;
        while (a < b) {
            int mid = a + (b - a) / 2;
            if ((v = range_fails(&r, 0, mid)) < 0)
                goto done;
            if (v)
                b = mid;
            else
                a = mid + 1;
        }
        hi = b;
        a = 0;
        b = hi;
        while (a < b) {
            int mid = a + (b - a + 1) / 2;
            if ((v = range_fails(&r, mid, hi)) < 0)
                goto done;
            if (v)
                a = mid;
            else
                b = mid - 1;
        }
        lo = a;
        cli_info("Bisection: nodes %d..%d ('%s' .. '%s') fail", lo, hi,
                 kiln_network_node_name(net, lo), kiln_network_node_name(net, hi));
    }
    /* then single nodes, from the end */
    int m = hi - lo + 1;
    cur = malloc((size_t)m * sizeof *cur);
    if (!cur)
        goto done;
    for (int i = 0; i < m; i++)
        cur[i] = lo + i;
    for (int k = m - 1; k >= 0 && m > 1; k--) {
        int *trial = malloc((size_t)m * sizeof *trial);
        if (!trial)
            goto done;
        int t = 0;
        for (int i = 0; i < m; i++)
            if (i != k)
                trial[t++] = cur[i];
        v = piece_fails(&r, trial, t);
        if (v < 0) {
            free(trial);
            goto done;
        }
        if (v) {
            free(cur);
            cur = trial;
            m = t;
        } else {
            free(trial);
        }
    }
    kiln_network *sub = extract(&r, cur, m);
    if (!sub)
        goto done;
    st = kiln_onnx_write_file(sub, out);
    kiln_network_destroy(sub);
    if (st != KILN_OK) {
        cli_kiln_error(out, st);
        goto done;
    }
    cli_info("Reduced %d nodes to %d after %d checks; still failing:", n, m, r.checks);
    for (int i = 0; i < m; i++)
        cli_info("  node %d: '%s' (%s)", cur[i], kiln_network_node_name(net, cur[i]),
                 kiln_network_node_op_type(net, cur[i]));
    cli_info("Wrote %s", out);
    rc = 0;
done:
    free(cur);
    remove_tmpdir(tmp_files, 2);
    npy_list_free(&golden);
    kiln_network_destroy(net);
    cmp_words_free(r.check, r.n_check);
    cmp_opts_free(&o);
    return rc;
}

/* ---------------- precision ---------------- */

typedef struct prec_ctx {
    const cmp_opts *o;
    const kiln_network *net;
    const npy_list *inputs, *ref;
    const char **layers;      /* candidates, in node order */
    int n_layers;
    int builds;
} prec_ctx;

/* 1 when the build with `fp32` layers (flags) kept in FP32 passes, 0 when
 * it fails, -1 on an error. */
static int passes_with(prec_ctx *c, const bool *fp32) {
    cmp_opts o = *c->o;
    int n_extra = 0;
    for (int i = 0; i < c->n_layers; i++)
        n_extra += fp32[i];
    cmp_lprec *lp = calloc((size_t)(o.n_lprec + n_extra + 1), sizeof *lp);
    if (!lp)
        return -1;
    int k = 0;
    for (int i = 0; i < c->n_layers; i++)
        if (fp32[i]) {
            lp[k].name = (char *)c->layers[i];
            lp[k++].dtype = KILN_DTYPE_FLOAT;
        }
    for (int i = 0; i < o.n_lprec; i++)
        lp[k++] = c->o->lprec[i]; /* the user's own constraints win */
    o.lprec = lp;
    o.n_lprec = k;
    npy_list got;
    bool ran = cmp_run_kiln(&o, c->net, false, c->inputs, &got);
    free(lp);
    c->builds++;
    if (!ran)
        return -1;
    bool pass = true;
    for (int i = 0; i < got.n && pass; i++) {
        const npy_array *r = npy_list_find(c->ref, got.items[i].name);
        pass = r && cmp_tensor(c->o, got.items[i].name, &got.items[i], r, true);
    }
    npy_list_free(&got);
    cli_vlog("build %d: %d layer(s) in FP32 -> %s", c->builds, n_extra, pass ? "passes" : "fails");
    return pass ? 1 : 0;
}

static int cmd_precision(int argc, char **argv) {
    cmp_opts o;
    cmp_opts_init(&o);
    int rc = 2;
    for (int i = 0; i < argc; i++) {
        const char *name, *value;
        if (strcmp(argv[i], "--help") == 0) {
            cli_debug_usage(stdout);
            cmp_opts_free(&o);
            return 0;
        }
        if (!cli_split_flag(argv[i], &name, &value)) {
            if (o.model) {
                cli_error("unexpected argument '%s'", argv[i]);
                goto out;
            }
            o.model = argv[i];
            continue;
        }
        int r = cmp_flag(&o, name, value);
        if (r < 0)
            goto out;
        if (r == 0) {
            cli_error("unknown flag '%s' for debug precision", name);
            goto out;
        }
    }
    if (!o.model) {
        cli_error("debug precision needs a model: kiln debug precision MODEL.onnx --fp16 ...");
        goto out;
    }
    if (!(o.b.flags & (KILN_BUILDER_FLAG_FP16 | KILN_BUILDER_FLAG_BF16))) {
        cli_error("debug precision needs --fp16 or --bf16 (the precision to narrow down)");
        goto out;
    }
    /* --fp16 / --bf16 allow a type and the builder keeps the faster one per
     * layer; narrowing down what the type does to accuracy needs it on every
     * eligible layer but those kept in FP32, as the 0.1 flags forced it */
    o.b.flags &= ~KILN_BUILDER_FLAG_TIMED_PRECISION;
    cli_info("debug precision: every eligible layer runs in %s unless kept in FP32",
             (o.b.flags & KILN_BUILDER_FLAG_FP16) ? "FP16" : "BF16");
    cli_install_logger(cli_verbose);
    cmp_set_silent(true);
    rc = 3;
    kiln_network *net = NULL;
    npy_list inputs, ref;
    memset(&inputs, 0, sizeof inputs);
    memset(&ref, 0, sizeof ref);
    bool *set = NULL, *saved = NULL;
    prec_ctx c;
    memset(&c, 0, sizeof c);
    kiln_status st = kiln_onnx_parse_file(o.model, &net);
    if (st != KILN_OK) {
        cli_kiln_error(o.model, st);
        goto done;
    }
    if (!cmp_prepare_inputs(&o, net, &inputs))
        goto done;
    const char *used = NULL;
    if (!cmp_run_reference(&o, net, &inputs, NULL, 0, &ref, &used))
        goto done;
    c.o = &o;
    c.net = net;
    c.inputs = &inputs;
    c.ref = &ref;
    int nn = kiln_network_num_nodes(net);
    c.layers = calloc((size_t)nn + 1, sizeof *c.layers);
    set = calloc((size_t)nn + 1, sizeof *set);
    saved = calloc((size_t)nn + 1, sizeof *saved);
    if (!c.layers || !set || !saved)
        goto done;
    for (int i = 0; i < nn; i++) {
        const char *nm = kiln_network_node_name(net, i);
        if (nm && *nm)
            c.layers[c.n_layers++] = nm;
    }
    int v = passes_with(&c, set);
    if (v < 0)
        goto done;
    if (v) {
        cli_info("The model passes with every eligible layer in reduced precision (vs %s); no "
                 "layer needs FP32.", used);
        rc = 0;
        goto done;
    }
    for (int i = 0; i < c.n_layers; i++)
        set[i] = true;
    if ((v = passes_with(&c, set)) < 0)
        goto done;
    if (!v) {
        cli_error("the model fails even with every layer in FP32: not a precision problem "
                  "(check the tolerances with kiln compare)");
        rc = 1;
        goto done;
    }
    /* drop FP32 layers in halves, quarters, ... then one by one; a drop is
     * kept when the build still passes */
    for (int chunk = c.n_layers / 2 > 0 ? c.n_layers / 2 : 1;; chunk /= 2) {
        /* from the end: in a fused layer, the first member is the one kept */
        for (int start = (c.n_layers - 1) / chunk * chunk; start >= 0; start -= chunk) {
            bool any = false;
            int end = start + chunk < c.n_layers ? start + chunk : c.n_layers;
            for (int i = start; i < end; i++) {
                saved[i - start] = set[i];
                any |= set[i];
                set[i] = false;
            }
            if (!any)
                continue;
            if ((v = passes_with(&c, set)) < 0)
                goto done;
            if (!v)
                for (int i = start; i < end; i++)
                    set[i] = saved[i - start];
        }
        if (chunk == 1)
            break;
    }
    int kept = 0;
    size_t cap = 64;
    for (int i = 0; i < c.n_layers; i++)
        if (set[i]) {
            kept++;
            cap += strlen(c.layers[i]) + 8;
        }
    char *spec = malloc(cap);
    if (!spec)
        goto done;
    size_t len = (size_t)snprintf(spec, cap, "--layerPrecisions=");
    for (int i = 0, k = 0; i < c.n_layers; i++)
        if (set[i]) {
            bool quote = strchr(c.layers[i], ',') || strchr(c.layers[i], ' ');
            len += (size_t)snprintf(spec + len, cap - len, "%s%s%s%s:fp32", k++ ? "," : "",
                                    quote ? "'" : "", c.layers[i], quote ? "'" : "");
        }
    cli_info("%d of %d layer(s) must stay in FP32 for the model to pass (vs %s, %d builds):",
             kept, c.n_layers, used, c.builds);
    for (int i = 0; i < c.n_layers; i++)
        if (set[i])
            cli_info("  %s", c.layers[i]);
    printf("%s\n", spec);
    free(spec);
    rc = 0;
done:
    free(set);
    free(saved);
    free(c.layers);
    npy_list_free(&inputs);
    npy_list_free(&ref);
    kiln_network_destroy(net);
out:
    cmp_opts_free(&o);
    return rc;
}

/* ---------------- rewrite ---------------- */

static int cmd_rewrite(int argc, char **argv) {
    const char *model = NULL, *out = NULL;
    for (int i = 0; i < argc; i++) {
        if ((strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0) && i + 1 < argc)
            out = argv[++i];
        else if (strncmp(argv[i], "--output=", 9) == 0)
            out = argv[i] + 9;
        else if (argv[i][0] != '-' && !model)
            model = argv[i];
        else {
            cli_error("unexpected argument '%s' (kiln debug rewrite MODEL -o OUT)", argv[i]);
            return 2;
        }
    }
    if (!model || !out) {
        cli_error("usage: kiln debug rewrite MODEL.onnx -o OUT.onnx");
        return 2;
    }
    cli_install_logger(false);
    kiln_network *net = NULL;
    kiln_status st = kiln_onnx_parse_file(model, &net);
    if (st != KILN_OK) {
        cli_kiln_error(model, st);
        return 3;
    }
    st = kiln_onnx_write_file(net, out);
    kiln_network_destroy(net);
    if (st != KILN_OK) {
        cli_kiln_error(out, st);
        return 3;
    }
    cli_info("Wrote %s", out);
    return 0;
}

int cli_cmd_debug(int argc, char **argv) {
    if (argc < 1 || strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0) {
        cli_debug_usage(argc < 1 ? stderr : stdout);
        return argc < 1 ? 2 : 0;
    }
    if (strcmp(argv[0], "reduce") == 0)
        return cmd_reduce(argc - 1, argv + 1);
    if (strcmp(argv[0], "precision") == 0)
        return cmd_precision(argc - 1, argv + 1);
    if (strcmp(argv[0], "rewrite") == 0)
        return cmd_rewrite(argc - 1, argv + 1);
    cli_error("unknown debug tool '%s' (reduce, precision, rewrite)", argv[0]);
    return 2;
}
