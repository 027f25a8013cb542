/* gram.h — constrained decoding: grammars, a per-row matcher and its token masks.
 *
 * One grammar form for everything a request may constrain with: a GBNF-style EBNF text
 * (docs/grammar.md), a regular expression, a list of choices or a JSON Schema (each
 * front end compiles to EBNF text, then to the byte-level form here). A compiled struct
 * gram is immutable and refcounted: the HTTP thread compiles it, the engine thread runs a
 * struct gram_matcher over it, one per request row. The matcher keeps the set of parse
 * stacks after the accepted tokens and computes, per step, the bitset of vocabulary ids
 * whose bytes the grammar can take next (struct gram_vocab: the tokenizer's byte strings,
 * sorted, built once per engine). End-of-generation ids are allowed only where the grammar
 * is complete.
 * Threads: gram_* objects are used by one thread at a time, except gram_ref/gram_unref and
 * a gram_vocab, which matchers on several threads may share (its table cache is locked).
 */
#ifndef CINFER_ENGINE_GRAMMAR_GRAM_H
#define CINFER_ENGINE_GRAMMAR_GRAM_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

struct gram;

/* Compiles EBNF text (rules `name ::= ...`; the start rule is `root`). Errors (CERR_FORMAT
 * for syntax, CERR_INVALID for an undefined rule or left recursion, CERR_LIMIT for a grammar
 * too large) carry the line and column. Returns 0 and *out (refcount 1). */
int gram_from_ebnf(struct gram **out, const char *src, size_t len, struct cerr *e);
/* A regular expression matched whole (^ and $ at the ends are accepted and implied):
 * literals, ., classes with ranges and \d \w \s, groups, alternation, * + ? {m,n}.
 * Backreferences and lookaround are CERR_UNSUPPORTED. */
int gram_from_regex(struct gram **out, const char *re, size_t len, struct cerr *e);
/* Exactly one of the n strings. */
int gram_from_choice(struct gram **out, const char *const *choices, int n, struct cerr *e);

struct gram *gram_ref(struct gram *g);
/* Drops a reference; frees at zero; NULL is a no-op. */
void gram_unref(struct gram *g);
/* 64-bit hash of the source text the grammar was compiled from (cache key). */
uint64_t gram_hash(const struct gram *g);
int gram_n_rules(const struct gram *g);

/* Whole-string check (tests): 1 when the grammar accepts s[0..n) exactly, else 0. */
int gram_accepts(const struct gram *g, const char *s, size_t n);

/* ---- the vocabulary ---------------------------------------------------------------- */
struct gram_vocab;
struct gram_matcher;
/* bytes[i], len[i]: the bytes id i adds to the text (len < 0: a special token that the
 * grammar never takes). eog: the end-of-generation ids. Copies everything. */
int gram_vocab_new(struct gram_vocab **out, int n_vocab, const char *const *bytes,
                   const int *len, const int32_t *eog, int n_eog, struct cerr *e);
void gram_vocab_free(struct gram_vocab *v);
int gram_vocab_size(const struct gram_vocab *v);
/* The bytes of id (*len < 0: none — special, end or out of range); borrowed. */
const char *gram_vocab_token(const struct gram_vocab *v, int32_t id, int *len);
/* The vocabulary the matcher runs over. */
const struct gram_vocab *gram_matcher_vocab(const struct gram_matcher *m);

/* ---- the matcher ------------------------------------------------------------------- */
struct gram_matcher;
/* A matcher at the start of g (takes a reference) over v (borrowed; must outlive it). */
int gram_matcher_new(struct gram_matcher **out, struct gram *g, const struct gram_vocab *v,
                     struct cerr *e);
void gram_matcher_free(struct gram_matcher *m);
/* Fills mask (ceil(n_vocab / 32) words, bit i = id i allowed). Returns the number of
 * allowed ids (0 only when the matcher is dead), CERR_NOMEM, or CERR_LIMIT when the call
 * passed the matcher's work bound (an ambiguous grammar whose parse stacks grow with the
 * text, e.g. `root ::= . root*`): the matcher is then spent, and every later mask and
 * accept call returns CERR_LIMIT too. */
int gram_matcher_mask(struct gram_matcher *m, uint32_t *mask);
/* Advances over token id. Returns 0, or CERR_INVALID when the grammar does not take it
 * (the matcher is then unchanged), or CERR_LIMIT (spent, as above). An end-of-generation id
 * is taken where complete. */
int gram_matcher_accept(struct gram_matcher *m, int32_t id);
/* Advances over raw bytes (tests, jump-forward). 0 or CERR_INVALID (unchanged). */
int gram_matcher_accept_bytes(struct gram_matcher *m, const char *s, size_t n);
/* 1 when the text so far is a complete sentence of the grammar. */
int gram_matcher_complete(const struct gram_matcher *m);
/* 1 when nothing but the end can follow (complete and no stack can take a byte). */
int gram_matcher_done(const struct gram_matcher *m);
/* Statistics for the bench: masks computed, masks served from the cache. */
void gram_matcher_stats(const struct gram_matcher *m, long *masks, long *cache_hits);
/* Levers of the mask computation (tests force each path; < 0 keeps the value): the trie
 * nodes a direct walk may visit before token tables are used (0: tables at once), and the
 * uncertain ids a table may leave before a deeper one is built. Same masks either way. */
void gram_matcher_tune(struct gram_matcher *m, long walk_budget, long unc_limit);
/* The work bound of one mask or accept call (stacks expanded plus duplicate checks; past it
 * the call fails with CERR_LIMIT and the matcher is spent). Default ~0.05-0.2 s of work;
 * the fuzz target lowers it (> 0) so that an ambiguous grammar stops within its time limit. */
void gram_matcher_work_limit(struct gram_matcher *m, long work_max);
/* The mask by stepping every id's bytes alone (tests: the reference for the fast paths).
 * Same contract as gram_matcher_mask. */
int gram_matcher_mask_naive(struct gram_matcher *m, uint32_t *mask);

#endif
