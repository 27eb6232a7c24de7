/* grammar_cmd.h - `nexus bench-grammar`, and loading --json-schema / --grammar-file for run. */
#ifndef NX_GRAMMAR_CMD_H
#define NX_GRAMMAR_CMD_H

#include "nexus.h"

/* argv[0] = "bench-grammar". Returns the process exit code. */
int bench_grammar_main(int argc, char **argv);
/* Compile the JSON schema file or else the GBNF file (NULL both: NULL); exits on error. */
nx_grammar *grammar_cmd_load(const char *schema_file, const char *gbnf_file);

#endif
