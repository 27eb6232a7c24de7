/*
 * signature.h - compressed tool signatures: `name(p: type, q?: type, ...)`.
 *
 * Rules (after ROUTING.md §1.1, written from its description):
 * - `?` after a parameter name marks it optional (not listed in "required").
 * - Field order: (1) required identifiers in this order: owner, repo, path, name, branch, ref,
 *   title, issue_number, pull_number, sha; (2) optional identifiers, same order; (3) payload
 *   fields message, content, body, description (required or not), in that order; (4) the other
 *   required fields; (5) the other optional fields; (4) and (5) in schema order.
 * - Types: string, int (integer), number, bool (boolean), null, any (no type); an enum is a
 *   union of its literals ("a"|"b"|3, JSON-quoted); const is its literal; an array is T[] with
 *   T its item type (a union or literal item type in parentheses: ("a"|"b")[]; no items: any[]);
 *   a nested object is just `object`; a type list or anyOf/oneOf is a union A|B.
 * - No descriptions.
 */
#ifndef NX_ROUTE_SIGNATURE_H
#define NX_ROUTE_SIGNATURE_H

#include "route/registry.h"

/* The signature of t as a new NUL-terminated string (free with nx_free); NULL on OOM. */
char *rt_signature(const struct rt_tool *t);

/* Signature of a bare name + input schema (normalised types; schema may be NULL). */
char *rt_signature_of(const char *name, json_t *schema);

#endif
