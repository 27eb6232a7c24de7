/*
 * json.h - jansson helpers that keep the library's allocation contract. jansson allocates
 * through nx_malloc / nx_free (set up in alloc.c), but its encoder can drop a failed allocation
 * and return a truncated text, and its parser can drop a member whose allocation failed or
 * report the failure as a syntax error. These wrappers watch nx_alloc_failures() across the
 * call: when an allocation failed they return NULL and say so (*oom), whatever jansson made of
 * it, so "out of memory" is never mistaken for bad input or a damaged value.
 */
#ifndef NX_CORE_JSON_H
#define NX_CORE_JSON_H

#include <jansson.h>
#include <stdbool.h>

/* json_dumps(j, flags) as a string to nx_free; NULL when j is NULL or memory ran out. */
char *nx_json_dumps(const json_t *j, size_t flags);

/* json_loadb / json_loads / json_load_file; NULL with *oom = true (je unspecified) when an
 * allocation failed, NULL with *oom = false and je filled on bad input. */
json_t *nx_json_loadb(const char *buf, size_t len, size_t flags, json_error_t *je, bool *oom);
json_t *nx_json_loads(const char *text, size_t flags, json_error_t *je, bool *oom);
json_t *nx_json_load_file(const char *path, size_t flags, json_error_t *je, bool *oom);

/* A JSON number for a finite x, null otherwise (JSON has no NaN or infinity). */
json_t *nx_json_real_or_null(double x);

#endif
