/* agent_cmd.h - `nexus agent` and `nexus eval-toolpath` (argv[0] = the command): flags to
 * src/agent/agent.h's and src/eval/toolpath.h's parameters, one library call, a summary.
 * Return the process exit code. */
#ifndef NX_AGENT_CMD_H
#define NX_AGENT_CMD_H
int agent_main(int argc, char **argv);
int eval_toolpath_main(int argc, char **argv);
#endif
