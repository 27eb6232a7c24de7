/*
 * registry.h - the tool registry of the router: tools from JSON files (MCP tools/list, OpenAI
 * function and BFCL shapes) and from MCP servers, in one deterministic order.
 *
 * DESIGN
 * - Accepted shapes (detected per file, per element):
 *     MCP tools/list        {"tools": [{name, description, inputSchema}, ...]} (any other keys of
 *                           the object, e.g. our ../shared/data/mcp captures, are ignored)
 *     bare array            [tool, ...] of any element shape below
 *     OpenAI function       {"type": "function", "function": {name, description, parameters}}
 *     plain function        {name, description, parameters} (BFCL, OpenAI without the wrapper)
 *     BFCL JSON Lines       one {"id", "question", "function": [...]} object per line
 *   A file that is not one JSON value is read as JSON Lines; errors name file:line.
 * - Types are normalised to JSON Schema: BFCL's dict -> object, float/double -> number,
 *   int/long -> integer, tuple/list -> array, str/char -> string, bool -> boolean, any -> no
 *   type (the property accepts anything); JSON Schema names pass through. Any other type name
 *   is an error naming the tool and the parameter.
 * - Order: rt_registry_sort() sorts by name (bytewise strcmp) so prompts, KV caches and
 *   rankings do not depend on load order.
 * - Duplicate names (policy rt_dup):
 *     RT_DUP_ERROR (files, servers): an identical definition (same description and schema) is
 *       merged silently; a different definition from the same source is an error naming both
 *       places; a different definition from another source disambiguates both by prefixing the
 *       source tag: "<source>.<name>" (call_name keeps the name the server knows).
 *     RT_DUP_KEEP_FIRST (BFCL pools, where the same name recurs with reworded descriptions):
 *       the first definition wins, later ones are dropped. Lines of a BFCL question file
 *       ({"question", "function": [...]}) are always added this way, whatever the policy.
 *     RT_DUP_KEEP_ALL (evaluation stores): every definition is kept as given, names may repeat
 *       (rt_registry_find is then meaningless).
 * - Ownership: the registry owns every string and schema in it; rt_registry_free releases them.
 *   Not thread-safe while being built; read-only use from several threads is fine.
 */
#ifndef NX_ROUTE_REGISTRY_H
#define NX_ROUTE_REGISTRY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "nexus.h"

struct rt_tool {
    char *name;        /* registry key (unique after sorting); may carry a "<source>." prefix */
    char *call_name;   /* the name the tool's owner knows (equals name unless disambiguated) */
    char *description; /* "" when absent */
    char *source;      /* server name or file tag the tool came from */
    json_t *schema;    /* input schema, normalised to JSON Schema types (owned reference) */
    char *raw_json;    /* the tool object exactly as given, compact JSON (for size comparisons) */
};

enum rt_dup { RT_DUP_ERROR = 0, RT_DUP_KEEP_FIRST = 1, RT_DUP_KEEP_ALL = 2 };

typedef struct rt_registry {
    struct rt_tool *tools;
    int n;
    int cap;
    enum rt_dup dup; /* duplicate policy for later additions (RT_DUP_ERROR by default) */
} rt_registry;

/* An empty registry (all zero); free with rt_registry_free. */
void rt_registry_init(rt_registry *r);
void rt_registry_free(rt_registry *r);

/*
 * Adds one tool. params: the input schema as given (may be NULL: no parameters; borrowed, a
 * normalised copy is kept). raw: the tool object as given (borrowed; NULL: built from the
 * fields). source: tag for disambiguation and messages (copied). Returns 0, 1 when the tool was
 * merged or dropped as a duplicate, or a negative nx_status with a message in err (the registry
 * is unchanged): NX_STATUS_FORMAT (a bad name, schema or definition, a clash), NX_STATUS_NOMEM.
 */
int rt_registry_add(rt_registry *r, const char *name, const char *description, json_t *params,
                    json_t *raw, const char *source, char *err, size_t errlen);

/* Adds every tool of a parsed JSON document (any shape above). where: text for messages (file
 * name, "file:line"); source: tag. Returns the number of tools added or a negative nx_status
 * (FORMAT, NOMEM) with a message. */
int rt_registry_add_json(rt_registry *r, json_t *root, const char *where, const char *source,
                         char *err, size_t errlen);

/* Loads a file (JSON or JSON Lines) and adds its tools with the file's base name (without
 * extension) as source tag. Returns the number added or a negative nx_status with a message
 * naming file[:line] (IO: unreadable; FORMAT: not JSON, bad tools; NOMEM);
 * on failure the tools added from this file are removed again (a "<source>." prefix given to an
 * earlier tool by a clash with this file stays). */
int rt_registry_load_file(rt_registry *r, const char *path, char *err, size_t errlen);

/* Sorts by name. Call after the last addition; lookups by name need it. */
void rt_registry_sort(rt_registry *r);

/* Index of the tool named name (sorted registry), or -1. */
int rt_registry_find(const rt_registry *r, const char *name);

/* Maps a type name as found in a schema to the JSON Schema name: "object", "number", ...;
 * "" for BFCL's "any" (no constraint); NULL when unknown. */
const char *rt_map_type(const char *t);

#endif
