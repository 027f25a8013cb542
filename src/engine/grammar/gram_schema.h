/* gram_schema.h — JSON Schema to grammar.
 *
 * Compiles a JSON Schema (drafts 4 to 2020-12, the subset docs/grammar.md lists) to the
 * EBNF text gram_from_ebnf takes: objects (properties in declared order, required,
 * additionalProperties, patternProperties), arrays (items, prefixItems, tuple items,
 * additionalItems, minItems/maxItems), strings (enum, const, pattern, minLength/maxLength,
 * format date, time, date-time, uuid, email, uri, ipv4, hostname), integers with bounds,
 * numbers with bounds, multipleOf and not in the forms docs/grammar.md lists, property
 * dependencies, booleans, null, type unions, anyOf/oneOf/allOf, local
 * $ref/$defs/definitions with recursion. A validation keyword it cannot enforce (if,
 * uniqueItems, other forms of not, ...) is an error naming the keyword and where it is — never a
 * silent acceptance. Unknown keywords are annotations, and so is an unlisted format.
 * Pure; any thread.
 */
#ifndef CINFER_ENGINE_GRAMMAR_GRAM_SCHEMA_H
#define CINFER_ENGINE_GRAMMAR_GRAM_SCHEMA_H

#include <jansson.h>

#include "engine/grammar/gram.h"
#include "util/sbuf.h"

enum {
    GRAM_SCHEMA_COMPACT = 1, /* no whitespace between tokens (default: up to 20 of [ \t\n]) */
};

/* Appends the grammar for schema to out (its start rule is `root`). On an unsupported
 * keyword returns CERR_UNSUPPORTED with e->msg "unsupported JSON Schema keyword 'K' at
 * #/path" and, when keyword is non-NULL, K copied into keyword (64 bytes). Other errors:
 * CERR_INVALID (a bad schema: a $ref that does not resolve, a false schema). */
int gram_schema_to_ebnf(const json_t *schema, int flags, struct sbuf *out, char *keyword,
                        struct cerr *e);
/* gram_schema_to_ebnf, then gram_from_ebnf. */
int gram_from_schema(struct gram **out, const json_t *schema, int flags, char *keyword,
                     struct cerr *e);

#endif
