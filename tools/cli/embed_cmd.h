/* embed_cmd.h - `nexus embed` and `nexus rerank` (BERT-family encoder GGUFs). */
#ifndef NX_EMBED_CMD_H
#define NX_EMBED_CMD_H

/* argv[0] = "embed" / "rerank". Return the process exit code. */
int embed_main(int argc, char **argv);
int rerank_main(int argc, char **argv);

#endif
