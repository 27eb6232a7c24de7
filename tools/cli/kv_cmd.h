/* kv_cmd.h - `nexus kv compile|info` (KV blocks) and `nexus splice-eval`. */
#ifndef NX_KV_CMD_H
#define NX_KV_CMD_H

/* argv[0] = "kv" / "splice-eval". Return the process exit code. */
int kv_main(int argc, char **argv);
int splice_eval_main(int argc, char **argv);

#endif
