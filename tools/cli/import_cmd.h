/* import_cmd.h - `nexus import` (the writer itself is model/nxw_import.h). */
#ifndef NX_IMPORT_CMD_H
#define NX_IMPORT_CMD_H
/* `nexus import ...` (argv[0] = "import"). Returns the process exit code. */
int import_main(int argc, char **argv);
#endif
