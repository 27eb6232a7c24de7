/* mkmodel_cmd.h - `nexus mkmodel` (argv[0] = "mkmodel"): flags to src/model/mkmodel.h's
 * parameters, then one mkmodel_write and a summary line. Returns the process exit code. */
#ifndef NX_MKMODEL_CMD_H
#define NX_MKMODEL_CMD_H
int mkmodel_main(int argc, char **argv);
#endif
