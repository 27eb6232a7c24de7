/*
 * task_eval.h - `nexus task-eval`: exact-match accuracy of token-id retrieval tasks (as written
 * by scripts/train/evaluate.py --write-tasks) under KV-eviction policies, paired against the
 * dense cache on the same instances.
 */
#ifndef NX_TASK_EVAL_H
#define NX_TASK_EVAL_H

/* `nexus task-eval ...` (argv[0] = "task-eval"). Returns the process exit code. */
int task_eval_main(int argc, char **argv);

#endif
