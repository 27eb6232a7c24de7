/* serve_cmd.h - `nexus serve`: flags to srv_params, then run until SIGINT/SIGTERM. */
#ifndef NX_CLI_SERVE_CMD_H
#define NX_CLI_SERVE_CMD_H
int serve_main(int argc, char **argv);
#endif
