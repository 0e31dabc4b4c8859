/* plugins_cli.h - the plugin side of the kiln command line: the exec flags
 * that load plugin libraries, and the plugins, doctor and manifest
 * subcommands. */
#ifndef KILN_PLUGINS_CLI_H
#define KILN_PLUGINS_CLI_H

#include <stdio.h>

/* Take --staticPlugins, --dynamicPlugins, --setPluginsToSerialize,
 * --allowEmbeddedPlugins, --allowEmbeddedPluginSha256 and --pluginNamespace out of argv
 * (*argc shrinks) and act on them: load the libraries (in the namespace), mark
 * those to embed. Returns 0; 2 after printing an error for a bad flag; 1 when
 * a library does not load. */
int cli_plugin_take_flags(int *argc, char **argv);
/* --pluginNamespace=NS (also taken by cli_plugin_take_flags): 1 handled, 0
 * not this flag, -1 bad value (printed). */
int cli_plugin_namespace_flag(const char *name, const char *value);
void cli_plugin_set_namespace(const char *ns);
/* The namespace given, or NULL. */
const char *cli_plugin_namespace(void);
/* The plugin flags cli_plugin_take_flags took (as given), e.g. to pass them
 * on to another kiln process. */
int cli_plugin_taken_flags(char *const **args);
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
