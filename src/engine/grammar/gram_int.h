/* gram_int.h — the byte-level grammar form shared inside src/engine/grammar.
 *
 * A grammar is a list of rules; a rule is a list of alternatives; an alternative is a run
 * of symbols in syms[] ended by GS_END. A symbol is a terminal (one byte out of a 256-bit
 * class) or a reference to a rule. Character classes over code points are compiled to
 * UTF-8 byte sequences at build time, so the matcher only ever sees bytes. Repetitions are
 * right-recursive rules (the matcher's tail calls keep stacks flat).
 */
#ifndef CINFER_ENGINE_GRAMMAR_GRAM_INT_H
#define CINFER_ENGINE_GRAMMAR_GRAM_INT_H

#include <stdint.h>

#include "engine/grammar/gram.h"

enum { GS_END = 0, GS_TERM = 1, GS_RULE = 2 };

struct gsym {
    uint32_t kind : 2;
    uint32_t arg : 30; /* TERM: class index; RULE: rule id */
};

struct gcls {
    uint64_t w[4];
};

static inline int gcls_has(const struct gcls *c, unsigned b) { return (c->w[b >> 6] >> (b & 63)) & 1; }
static inline void gcls_set(struct gcls *c, unsigned b) { c->w[b >> 6] |= 1ull << (b & 63); }

#define GRAM_MAX_RULES 200000
#define GRAM_MAX_SYMS 4000000

struct gram {
    int refs; /* atomic */
    uint64_t hash;
    int n_rules, root;
    uint32_t *alt0, *nalt; /* (n_rules): first index into alts, count */
    uint32_t *alts;        /* offsets into syms */
    int n_alts;
    struct gsym *syms;
    int n_syms;
    struct gcls *cls;
    int n_cls;
};

/* ---- builder (gram_build.c) ---- */
struct gseq {
    struct gsym *v;
    int n, cap;
};

struct gb_rule {
    char *name; /* NULL for generated rules */
    int defined;
    int line, col; /* first reference, for "undefined rule" errors */
    int *alts;     /* indexes into gb.seqs */
    int n_alts, cap_alts;
};

struct gb {
    struct gb_rule *rules;
    int n_rules, cap_rules;
    struct gseq *seqs;
    int n_seqs, cap_seqs;
    struct gcls *cls;
    int n_cls, cap_cls;
    int byte_cls[256]; /* class index of the single byte b, or -1 */
    long n_syms;
    int oom;
};

void gb_init(struct gb *b);
void gb_deinit(struct gb *b);
/* Rule id for name (created undefined on first use), or a fresh anonymous rule (NULL). */
int gb_rule(struct gb *b, const char *name, size_t n);
int gb_push(struct gseq *s, int kind, int arg);
/* Adds seq as an alternative of rule (the builder takes s's storage). 0 or CERR_NOMEM. */
int gb_add_alt(struct gb *b, int rule, struct gseq *s);
int gb_cls(struct gb *b, const struct gcls *c);
/* Appends the bytes of s[0..n) as terminals. */
int gb_push_bytes(struct gb *b, struct gseq *s, const char *p, size_t n);
/* Appends the code-point ranges (lo[i]..hi[i], sorted, disjoint) as one symbol: a single
 * terminal when all are ASCII, else a rule over their UTF-8 byte sequences. */
int gb_push_ranges(struct gb *b, struct gseq *s, const uint32_t *lo, const uint32_t *hi, int n);
/* Wraps s (moved) into a rule and applies {mn, mx} (mx < 0: unbounded); the result symbol is
 * appended to dst. */
int gb_push_repeat(struct gb *b, struct gseq *dst, struct gseq *item, int mn, int mx,
                   struct cerr *e);
/* Checks (every rule defined, no left recursion), flattens into a gram. root = rule id. */
int gb_finish(struct gb *b, int root, uint64_t hash, struct gram **out, struct cerr *e);

uint64_t gram_hash_bytes(const char *p, size_t n);

/* ---- regex to EBNF text (gram_regex.c): used by gram_from_regex and the JSON Schema
 * compiler. json: inside a JSON string (classes exclude '"', '\\' and controls; literal
 * '"' and '\\' are written escaped). Appends one EBNF expression to out. */
struct sbuf;
int gram_regex_to_ebnf(const char *re, size_t len, int json, struct sbuf *out, struct cerr *e);

/* The EBNF of JSON string content (no quotes) that matches regex re whole with lo..hi
 * characters (hi < 0: no upper bound): rules appended to rules (numbered from *next_rule,
 * which advances), the start symbol to expr (gram_lenpat.c). CERR_UNSUPPORTED when the
 * pattern needs escapes or the product is too large; CERR_INVALID when nothing fits. */
int gram_regex_len_ebnf(const char *re, long lo, long hi, struct sbuf *rules, struct sbuf *expr,
                        int *next_rule, struct cerr *e);

/* Appends to b the EBNF of the decimal integers in [lo, hi] (has_lo / has_hi: whether each
 * bound is given; a missing one is open), no leading zeros, "-" for negatives
 * (gram_range.c). */
struct sbuf;
#define GRAM_BIG 100000000000000000LL /* 1e17: integer bounds beyond are treated as absent */
void gram_int_range(struct sbuf *b, int has_lo, long long lo, int has_hi, long long hi);
/* Appends to b the EBNF of the plain decimal numbers (no exponent) from lo to hi (has_*: the
 * bound is given; *_excl: exclusive), bounds of any fraction, exact on the decimal text
 * (gram_decrange.c). CERR_UNSUPPORTED: a bound beyond 1e17 or with more than 24 fraction
 * digits; CERR_INVALID: nothing fits. */
int gram_dec_range(struct sbuf *b, int has_lo, double lo, int lo_excl, int has_hi, double hi,
                   int hi_excl);
/* Appends an EBNF string literal of the bytes s[0..n) (escaped as \xHH where needed). */
void gram_lit(struct sbuf *b, const char *s, size_t n);

#endif
