/* route.h - the tool-routing subcommands of the nexus CLI (tools/cli/route.c). Each takes the
 * full argv (argv[1] is the subcommand), prints results to stdout and messages to stderr, and
 * returns the process exit status (0 ok, 1 error, 2 usage); none of them exits. */
#ifndef NX_CLI_ROUTE_H
#define NX_CLI_ROUTE_H

/* nexus route --tools FILE|--mcp CONFIG [--embedder bm25|dense|hybrid] ... "query" */
int route_main(int argc, char **argv);
/* nexus signatures --tools FILE... -m VOCAB.gguf [--json OUT] */
int signatures_main(int argc, char **argv);
/* nexus eval-routing [--bfcl DIR | --tools FILE... --queries Q.jsonl] ... */
int eval_routing_main(int argc, char **argv);
/* nexus bench-slb [--dim 384] [--sizes 10,50,...] [--json OUT] */
int bench_slb_main(int argc, char **argv);

#endif
