/* gram_schema_int.h — the JSON Schema compiler's state, shared by gram_schema.c (schemas,
 * objects, arrays, combinators) and gram_schema_scalar.c (strings, integers, numbers).
 * Not for use outside src/engine/grammar. */
#ifndef CINFER_ENGINE_GRAMMAR_GRAM_SCHEMA_INT_H
#define CINFER_ENGINE_GRAMMAR_GRAM_SCHEMA_INT_H

#include <jansson.h>

#include "engine/grammar/gram_int.h"
#include "util/sbuf.h"

struct memo {
    const json_t *node;
    int id;
};

struct sc {
    const json_t *root;
    struct sbuf *o;
    struct memo *memo;
    int n_memo, cap_memo;
    int n_rules;
    int compact;
    json_t *keep; /* merged schemas, alive until the end (memo keys) */
    char *kw;
    struct cerr *e;
    int depth;
    const json_t *excl; /* `not: {enum/const}` values for the typed schema being generated */
};

/* A 400 naming the keyword (CERR_UNSUPPORTED), a broken schema (CERR_INVALID). */
int gsc_unsupported(struct sc *c, const char *kw, const char *path);
int gsc_bad_schema(struct sc *c, const char *path, const char *what);
/* A non-negative integer keyword of s, dflt when absent, -1 when not such a number. */
long gsc_count_of(const json_t *s, const char *k, long dflt);
/* The EBNF of a string / integer / number schema s, appended to b; rules it needs go to
 * c->o. c->excl: values a `not: {enum}` cuts out (strings and integers). */
int gsc_gen_string(struct sc *c, const json_t *s, struct sbuf *b, const char *path);
int gsc_gen_integer(struct sc *c, const json_t *s, struct sbuf *b, const char *path);
int gsc_gen_number(struct sc *c, const json_t *s, struct sbuf *b, const char *path);

/* Member-presence constraints as a union of plain objects (gram_schema_split.c): `not` over
 * required names and property dependencies that do not hold anyway, on a closed object.
 * 0 with *out the anyOf schema to compile in s's place (kept in c->keep), 0 with *out NULL
 * when s has no such form (the caller refuses the keyword), or an error. */
int gsc_split_object(struct sc *c, const json_t *s, const char *path, json_t **out);

#endif
