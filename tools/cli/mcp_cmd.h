/* mcp_cmd.h - `nexus mcp list|call` (argv[0] is "mcp"); returns the exit status. */
#ifndef NX_MCP_CMD_H
#define NX_MCP_CMD_H
int mcp_cmd_main(int argc, char **argv);
#endif
