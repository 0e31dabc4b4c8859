/* kiln.c - the kiln command line: dispatches to the subcommands (exec,
 * inspect) and answers --version and help. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "plugins_cli.h"
#include "compare.h"

static void usage(FILE *f) {
    fprintf(f,
            "kiln %s - ONNX inference optimizer and runtime\n"
            "\n"
            "Usage: kiln COMMAND [flags]\n"
            "\n"
            "Commands:\n"
            "  exec      build an ONNX model into a plan (or load one), run it and report\n"
            "            the performance (trtexec's flags)\n"
            "  inspect   show a plan's or model's I/O, layers after fusion, tactics,\n"
            "            precisions and memory plan\n"
            "  compare   run a model through kiln and a reference (ONNX Runtime) and\n"
            "            compare the outputs against tolerances (Polygraphy's run)\n"
            "  debug     narrow an accuracy problem down: reduce (smallest failing\n"
            "            subgraph), precision (fewest FP32 layers), rewrite\n"
            "  plugins   list registered plugin creators (kiln plugins list --load=lib.so)\n"
            "  doctor    diagnose a plan's deployment: versions, target, plugin libraries,\n"
            "            manifest hashes, loading and a smoke run\n"
            "  manifest  write a plan's deployment manifest (plan and library SHA-256s)\n"
            "  help      this text; `kiln help COMMAND` for a command's flags\n"
            "\n"
            "  --version print the version\n"
            "\n"
            "Examples:\n"
            "  kiln exec --onnx=model.onnx --saveEngine=model.plan --shapes=input:1x3x224x224\n"
            "  kiln exec --loadEngine=model.plan --iterations=100 --exportProfile=prof.json\n"
            "  kiln inspect model.plan\n"
            "\n"
            "docs/cli.md describes every flag.\n",
            kiln_version_string());
}

int main(int argc, char **argv) {
    cli_omp_wait_policy(argv); /* first: it may execute the program again */
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("kiln %s\n", kiln_version_string());
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        if (argc > 2 && strcmp(argv[2], "exec") == 0) {
            cli_exec_usage(stdout);
            cli_plugin_exec_usage(stdout);
        } else if (argc > 2 && strcmp(argv[2], "plugins") == 0)
            cli_plugins_usage(stdout);
        else if (argc > 2 && strcmp(argv[2], "doctor") == 0)
            cli_doctor_usage(stdout);
        else if (argc > 2 && strcmp(argv[2], "manifest") == 0)
            cli_manifest_usage(stdout);
        else if (argc > 2 && strcmp(argv[2], "inspect") == 0)
            cli_inspect_usage(stdout);
        else if (argc > 2 && strcmp(argv[2], "compare") == 0)
            cli_compare_usage(stdout);
        else if (argc > 2 && strcmp(argv[2], "debug") == 0)
            cli_debug_usage(stdout);
        else if (argc > 2) {
            cli_error("no command named '%s' (commands: exec, inspect)", argv[2]);
            return 2;
        } else
            usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "exec") == 0) {
        int n = argc - 2; /* the plugin flags are handled before exec sees the rest */
        int rc = cli_plugin_take_flags(&n, argv + 2);
        return rc ? rc : cli_cmd_exec(n, argv + 2);
    }
    if (strcmp(cmd, "plugins") == 0)
        return cli_cmd_plugins(argc - 2, argv + 2);
    if (strcmp(cmd, "doctor") == 0)
        return cli_cmd_doctor(argc - 2, argv + 2);
    if (strcmp(cmd, "manifest") == 0)
        return cli_cmd_manifest(argc - 2, argv + 2);
    if (strcmp(cmd, "inspect") == 0) { /* a plan with plugins needs their libraries */
        int n = argc - 2;
        int rc = cli_plugin_take_flags(&n, argv + 2);
        return rc ? rc : cli_cmd_inspect(n, argv + 2);
    }
    if (strcmp(cmd, "compare") == 0) { /* a model with plugins needs their libraries */
        int n = argc - 2;
        int rc = cli_plugin_take_flags(&n, argv + 2);
        return rc ? (rc == 1 ? 3 : rc) : cli_cmd_compare(n, argv + 2); /* compare: 3 = failure */
    }
    if (strcmp(cmd, "debug") == 0) {
        int n = argc - 2;
        int rc = cli_plugin_take_flags(&n, argv + 2);
        return rc ? rc : cli_cmd_debug(n, argv + 2);
    }
    cli_error("unknown command '%s' (commands: exec, inspect, help; see kiln help)", cmd);
    return 2;
}
