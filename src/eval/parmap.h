/*
 * parmap.h - run independent evaluation items in parallel worker processes.
 *
 * The engine's contexts share one process-wide thread pool whose jobs never overlap, so
 * evaluation threads in one process serialise on it (and convoy on its lock: slower than one
 * thread). eval_parmap forks n_procs workers after the caller has loaded the model (pages are
 * shared copy-on-write); worker w runs fn on items w, w + n_procs, ... in order and sends each
 * item's fixed-size record back through a pipe; the parent stores record i at
 * out + i * rec_bytes. Each item's record depends only on the item, so the results are the
 * same for any n_procs. n_procs <= 1 runs every item in the calling process (no fork).
 * Call it with no context alive (no engine thread pool running).
 */
#ifndef NX_EVAL_PARMAP_H
#define NX_EVAL_PARMAP_H

#include <stddef.h>

/* fn: 0 on success, else the run stops and eval_parmap returns -1. done(i, done_arg) (may be
   NULL) is called in the parent as item i's record arrives (for progress). */
int eval_parmap(int n_items, int n_procs, size_t rec_bytes, int (*fn)(int item, void *rec, void *arg),
                void *arg, void *out, void (*done)(int item, void *done_arg), void *done_arg);

#endif
