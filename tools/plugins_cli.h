/* plugins_cli.h - the plugin side of the kiln command line: the exec flags
 * that load plugin libraries, and the plugins, doctor and manifest
 * subcommands. */
#ifndef KILN_PLUGINS_CLI_H
#define KILN_PLUGINS_CLI_H

#include <stdio.h>

/* Take --staticPlugins, --dynamicPlugins, --setPluginsToSerialize,
 * --allowEmbeddedPlugins and --allowEmbeddedPluginSha256 out of argv (*argc shrinks) and act on them: load
 * the libraries, mark those to embed. Returns 0, or 2 after printing an
 * error. */
int cli_plugin_take_flags(int *argc, char **argv);
void cli_plugin_exec_usage(FILE *f);

/* Load each library of a comma-separated list; prints errors. Returns false
 * at the first failure. */
int cli_plugin_load_list(const char *list, int embed);
/* Put each SHA-256 of a comma-separated list on the allow-list of embedded
 * libraries (--allowEmbeddedPluginSha256); prints errors. Returns false on a
 * malformed or empty list. */
int cli_plugin_allow_sha_list(const char *list);

int cli_cmd_plugins(int argc, char **argv);
void cli_plugins_usage(FILE *f);
int cli_cmd_doctor(int argc, char **argv);
void cli_doctor_usage(FILE *f);
int cli_cmd_manifest(int argc, char **argv);
void cli_manifest_usage(FILE *f);

#endif
