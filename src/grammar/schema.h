/*
 * schema.h - a JSON Schema subset compiled to GBNF (see schema.c for the keyword list).
 */
#ifndef NX_SCHEMA_H
#define NX_SCHEMA_H

#include "core/nx_base.h"

/* GBNF text (owned by the caller, nx_free) for the schema in json[0..len); it uses the
 * internal %jstr element, so parse it with gbnf_parse(..., internal = true). Errors: FORMAT
 * (not JSON), UNSUPPORTED (a keyword or value outside the subset, named with its path),
 * NOMEM. */
nx_status schema_to_gbnf(const char *json, size_t len, const struct nx_json_schema_params *p,
                         char **gbnf_out, struct nx_err *err);

#endif
