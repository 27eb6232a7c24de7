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

/* The same values written in another syntax, for the tool-call families whose arguments are not
 * JSON (server/constrain.c): GEMMA4 {key:value,..} with bare keys, strings <|"|>raw<|"|> (no
 * '<', no control character), true / false / null; PYTHON literals: strings 'raw' (no quote,
 * backslash, '<' (which would start the call's closing marker) or control character), True / False / None, {'key':value}. Numbers and arrays are
 * as in JSON; enum / const values and property names that cannot be written so are refused
 * (UNSUPPORTED). JSON_NO_LT: JSON whose strings hold no '<' (escapes only \" \\ \/ \b \f \n \r
 * \t), for JSON values inside XML elements, which then never contain a closing tag. The text
 * uses no %jstr in these dialects. */
enum schema_dialect { SCHEMA_JSON = 0, SCHEMA_GEMMA4, SCHEMA_PYTHON, SCHEMA_JSON_NO_LT };
nx_status schema_to_gbnf_dialect(const char *json, size_t len, const struct nx_json_schema_params *p,
                                 enum schema_dialect dialect, char **gbnf_out, struct nx_err *err);

#endif
