/*
 * argcheck.h - an independent check of tool arguments against the tool's input schema (not the
 * grammar that generated them): the text is one JSON object; every required property is present;
 * no property outside "properties" unless additionalProperties is true or a schema; each
 * present property with a "type" (a name or a list; "integer" accepts integral numbers,
 * "number" any number) has a value of that type; a property with "enum" has one of its values
 * (json_equal). Nested objects and arrays are checked by type only. Schemas are normalised
 * JSON Schema (rt_registry types). This header is its specification.
 */
#ifndef NX_AGENT_ARGCHECK_H
#define NX_AGENT_ARGCHECK_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

/* True when arguments (NUL-ended JSON text) pass; otherwise why (may be NULL) gets a message. */
bool ag_args_check(const json_t *schema, const char *arguments, char *why, size_t whylen);

#endif
