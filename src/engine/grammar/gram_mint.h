/* gram_mint.h — the matcher's and the vocabulary's insides, shared by gram_vocab.c (the
 * vocabulary, its token trie, the shared cache of token tables), gram_match.c (parse stacks,
 * stack sets, byte steps) and gram_mask.c (token masks). Not for use outside
 * src/engine/grammar.
 *
 * The token trie: every distinct prefix of the vocabulary's byte strings is a node, stored
 * in preorder (a node's subtree is the index range [i, end[i])); the ids are sorted by bytes
 * (order[]), so the ids under node i are order[t0[i] .. t0[end[i]]) and those whose bytes
 * end at i come first (here[i] of them).
 *
 * Token tables (the adaptive part of the masks): for the top k frames of a parse stack, with
 * what lies below them unknown, each token is accepted (its bytes are taken without leaving
 * the k frames, or leaving them exactly at its end — any continuation then takes it),
 * rejected (refused before the frames could end), or uncertain (it needs bytes from below the
 * frames: decided per step against the real stacks). Uncertain tokens are whole subtrees of
 * the trie (where the walk died after a frame end), kept as their roots. A table depends only
 * on the grammar below those frames — keyed by a 128-bit hash of that sub-grammar, so equal
 * sub-grammars of different grammars (a JSON string's body, a number) share one table,
 * cached in the vocabulary for every matcher over it.
 */
#ifndef CINFER_ENGINE_GRAMMAR_GRAM_MINT_H
#define CINFER_ENGINE_GRAMMAR_GRAM_MINT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/grammar/gram_int.h"

struct gtab {
    uint64_t k1, k2;
    uint32_t n_acc;   /* accepted ids */
    int dense;        /* acc: a bitset of n_vocab bits, else n_acc ids */
    uint32_t *acc;
    uint32_t n_unc;   /* uncertain subtrees: trie node roots, increasing */
    uint32_t *unc;
    uint32_t unc_tok; /* ids under them */
    size_t bytes;
    struct gtab *next_owned; /* a matcher's own tables (not in the shared cache) */
};

struct gram_vocab {
    int n_vocab, n_tok, max_len;
    char *data;     /* all bytes */
    size_t *off;    /* (n_vocab) */
    int *len;       /* (n_vocab); < 0 special */
    int32_t *order; /* (n_tok) ids with bytes, sorted by bytes */
    uint8_t *eog;   /* (n_vocab) */
    /* the trie, preorder */
    uint32_t n_node;
    uint8_t *nb;    /* byte of the node's edge */
    uint16_t *dep;  /* depth, 1.. */
    uint32_t *end;  /* subtree end */
    uint32_t *t0;   /* (n_node + 1) first index into order[] under the node */
    uint32_t *here; /* ids whose bytes end at the node */
    /* token tables shared by every matcher over this vocabulary */
    pthread_mutex_t mu;
    struct gtab **tabs; /* open addressing by k1 */
    size_t n_tabs, cap_tabs, tab_bytes;
};

/* The shared table with key (k1, k2), or NULL. */
struct gtab *gram_vocab_tab_get(struct gram_vocab *v, uint64_t k1, uint64_t k2);
/* Offers t to the shared cache: returns the table to use (t, or an equal one already there,
 * in which case t is freed), or NULL when the cache is full (the caller keeps t). */
struct gtab *gram_vocab_tab_put(struct gram_vocab *v, struct gtab *t);
void gram_tab_free(struct gtab *t);

/* ---- matcher ---- */

struct gnode {
    uint32_t pos, parent;
};

struct gset {
    uint32_t off, len; /* into m->pool */
    uint32_t h;
    uint32_t sent;     /* holds the sentinel (a frame end, in table walks) */
    int32_t *trans;    /* (256) next set id, -1 unknown; NULL until the first */
};

#define NCACHE 16
/* The most work (gram_matcher.work: stacks expanded plus duplicate checks) one mask or
 * accept call may take, ~0.05-0.2 s: test_grammar's schemas and real vocabularies peak at
 * ~0.5 M; `root ::= . root*` (stacks grow with the text) passes it after ~100 bytes */
#define GM_WORK_MAX 256000000L
/* Token tables classify ids of up to HORIZON bytes (longer ones are uncertain), so they
 * depend on the grammar only as far as HORIZON bytes ahead: counted repetitions (a
 * maxLength string) share one table while more than HORIZON remain. */
#define HORIZON 32
#define SENT_NODE 1u /* the sentinel node: below the frames a table looks at */
#define SENT_POS 0xFFFFFFFFu

struct mcache {
    uint32_t set;
    uint32_t *mask;
    int count;
    long used;
};

struct keymemo { /* chain keys by frame positions */
    uint32_t pos[6], k; /* k = 0: empty slot; bit 8: exact */
    uint64_t a, b;
    int cut;
};

struct memo {
    uint32_t key; /* node id + 1; 0 empty */
    struct gtab *t;
};

struct gram_matcher {
    struct gram *g;
    struct gram_vocab *v;
    struct gnode *nd;
    uint32_t n_nd, cap_nd;
    uint32_t *nd_tab, nd_tab_cap; /* open addressing: node id + 1, 0 = empty */
    struct gset *sets;
    uint32_t n_sets, cap_sets;
    uint32_t *set_tab, set_tab_cap;
    uint32_t *pool;
    size_t n_pool, cap_pool;
    uint32_t cur; /* the current state's set */
    uint32_t *tmp;
    size_t n_tmp, cap_tmp;
    uint32_t *at;  /* (max_len + 3) set id per depth of a trie walk */
    uint8_t *ctx;  /* (max_len + 3) table walks: a frame end was passed */
    int bad;
    uint32_t gen;  /* bumped when the tables are rebuilt (cache entries die) */
    struct mcache cache[NCACHE];
    uint32_t cache_gen;
    long masks, hits, tick, tabs_built, tab_masks;
    /* token tables: per stack node, and those this matcher owns */
    struct memo *memo;
    uint32_t memo_cap, memo_n, memo_gen;
    struct gtab *owned;
    uint32_t *rmap; /* while hashing: (rule, budget) key + 1 per slot, its number in rnum */
    uint32_t *rnum, rmap_cap;
    uint32_t *rq;    /* the (rule, budget) keys met, in order */
    uint32_t n_rq, cap_rq;
    struct keymemo *km;
    uint32_t km_cap, km_n;
    uint8_t *minlen; /* (n_rules) fewest bytes a rule reads, saturated at HORIZON + 1 */
    uint32_t *roots;
    size_t n_roots, cap_roots;
    uint32_t *accbuf; /* (words) scratch bitset */
    long walk_budget; /* trie nodes a direct walk may visit before tables are used */
    long unc_limit;   /* uncertain ids a table may leave before a deeper one is tried */
    int tabs_ok;      /* -1 unknown; 0: a rule without alternatives (tables assume none) */
    /* The work bound (GM_WORK_MAX): stack expansions and duplicate checks since the mask or
     * accept call began; over it the call fails with CERR_LIMIT and so does every later
     * one (an ambiguous grammar's stacks grow with the text: `root ::= . root*`) */
    long work, work_max;
    int over;
};

uint32_t gm_step_slow(struct gram_matcher *m, uint32_t sid, unsigned b);
/* The set after byte b from set sid (0 = nothing takes it; set 0 is the empty set). */
static inline uint32_t gm_step(struct gram_matcher *m, uint32_t sid, unsigned b)
{
    const struct gset *s = &m->sets[sid];
    if (s->trans && s->trans[b] >= 0)
        return (uint32_t)s->trans[b];
    return gm_step_slow(m, sid, b);
}
uint32_t gm_node(struct gram_matcher *m, uint32_t pos, uint32_t parent);
void gm_tmp_add(struct gram_matcher *m, size_t start, uint32_t id);
uint32_t gm_intern_set(struct gram_matcher *m, size_t start);
int gm_over_caps(const struct gram_matcher *m);
int gm_rebuild(struct gram_matcher *m);

#endif
