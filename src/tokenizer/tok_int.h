/* tok_int.h — internals of the tokenizer module (only src/tokenizer/ includes this).
 *
 * struct tok is built by one of the loaders (load_json.c, load_spm.c, load_gguf.c) and is
 * read-only afterwards. The pipeline mirrors Hugging Face `tokenizers`: added-token split,
 * normalizer ops, pre-tokenizer ops, the BPE model, post-processor ids, decoder ops. All
 * memory hangs off t->ar (load lifetime) except the hash tables and compiled regexes,
 * which tok_free() releases.
 */
#ifndef CINFER_TOKENIZER_TOK_INT_H
#define CINFER_TOKENIZER_TOK_INT_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tok.h"
#include "util/arena.h"

/* ---- token attributes ---- */
enum {
    TOKA_NORMAL = 1 << 0,
    TOKA_UNKNOWN = 1 << 1,
    TOKA_CONTROL = 1 << 2, /* special: skipped by TOK_SKIP_SPECIAL */
    TOKA_USER = 1 << 3,    /* user-defined / added, always matched in text */
    TOKA_UNUSED = 1 << 4,
    TOKA_BYTE = 1 << 5, /* byte-fallback piece <0xXX> */
    TOKA_ADDED = 1 << 6, /* listed among added tokens */
};

/* ---- hash tables ---- */
struct tok_map_slot {
    const char *key; /* NULL = empty */
    uint32_t len;
    uint32_t hash;
    int32_t val;
};
/* string -> int32, open addressing; keys are borrowed (must outlive the map) */
struct tok_map {
    struct tok_map_slot *slots;
    uint32_t mask, n;
};
int tok_map_init(struct tok_map *m, uint32_t expect);
void tok_map_free(struct tok_map *m);
/* Inserts key if absent (keeps the first value). 0, or CERR_NOMEM. */
int tok_map_put(struct tok_map *m, const char *key, uint32_t len, int32_t val);
/* -1 when absent. */
int32_t tok_map_get(const struct tok_map *m, const char *key, uint32_t len);
uint32_t tok_hash(const char *s, size_t n);

struct tok_pair_slot {
    uint64_t key; /* (left << 32 | right); UINT64_MAX = empty */
    int32_t rank;
    int32_t id;
};
/* (left id, right id) -> (merge rank, merged id) */
struct tok_pairmap {
    struct tok_pair_slot *slots;
    uint64_t mask;
    uint32_t n;
};
int tok_pairmap_init(struct tok_pairmap *m, uint32_t expect);
void tok_pairmap_free(struct tok_pairmap *m);
/* Keeps the lowest rank for a pair. 0 or CERR_NOMEM. */
int tok_pairmap_put(struct tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t id);
static inline const struct tok_pair_slot *tok_pairmap_get(const struct tok_pairmap *m, int32_t a,
                                                          int32_t b)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    for (uint64_t i = h & m->mask;; i = (i + 1) & m->mask) {
        const struct tok_pair_slot *s = &m->slots[i];
        if (s->key == key)
            return s;
        if (s->key == UINT64_MAX)
            return NULL;
    }
}

/* ---- pipeline ops ---- */
enum tok_norm_type {
    TN_NFC, TN_NFD, TN_NFKC, TN_NFKD, TN_LOWER, TN_REPLACE, TN_PREPEND, TN_STRIP,
    TN_SPM_WS, /* SentencePiece remove_extra_whitespaces */
    TN_BERT,   /* BertNormalizer: left=clean_text right=chinese first_only=strip alen=lower */
};
struct tok_norm {
    int type;
    const char *a; size_t alen; /* Replace pattern (literal) / Prepend string */
    const char *b; size_t blen; /* Replace content */
    pcre2_code *re;             /* Replace with a Regex pattern */
    int left, right;            /* Strip */
    int first_only;             /* Prepend: only to text at offset 0 (SentencePiece) */
};

enum tok_pre_type {
    TP_SPLIT, TP_BYTELEVEL, TP_METASPACE, TP_DIGITS, TP_WHITESPACE, TP_WSSPLIT, TP_PUNCT,
    TP_SPM, /* internal: split before each run of U+2581 (exact when no piece spans it) */
};
enum { TSB_REMOVED, TSB_ISOLATED, TSB_MERGED_PREV, TSB_MERGED_NEXT, TSB_CONTIGUOUS };
enum { TPS_ALWAYS, TPS_FIRST, TPS_NEVER };
struct tok_pre {
    int type;
    pcre2_code *re;       /* Split regex (or the ByteLevel/Whitespace regex) */
    const char *lit; size_t litlen; /* Split with a String pattern */
    int behavior, invert;
    int add_prefix_space, use_regex, individual_digits, prepend_scheme, split;
    char repl[8]; size_t repl_len; /* Metaspace replacement, UTF-8 */
};

enum tok_dec_type {
    TD_BYTELEVEL, TD_METASPACE, TD_BYTEFALLBACK, TD_FUSE, TD_STRIP, TD_REPLACE,
    TD_WORDPIECE, /* a = prefix, start = cleanup */
};
struct tok_dec {
    int type;
    const char *a; size_t alen; /* Replace pattern / Strip content (one char) */
    const char *b; size_t blen; /* Replace content */
    int start, stop;            /* Strip */
    char repl[8]; size_t repl_len; int prepend; /* Metaspace */
};

struct tok_added {
    const char *s;
    uint32_t len;
    int32_t id;
    uint8_t special, lstrip, rstrip, normalized, single_word;
};

struct tok {
    struct arena ar;
    int n_vocab;              /* ids are 0..n_vocab-1 (holes have piece NULL) */
    const char **piece;       /* raw string as in the file */
    uint32_t *piece_len;
    const char **mtext;       /* model-space bytes (byte-level pieces decoded to bytes) */
    uint32_t *mtext_len;
    uint8_t *attr;
    struct tok_map vocab;     /* model-space bytes -> id, model vocabulary only */
    struct tok_map pieces;    /* raw piece -> id, everything (tok_find) */
    struct tok_pairmap merges;
    int32_t byte_id[256];     /* byte-level: byte -> id; fallback: <0xXX> -> id; -1 none */
    int32_t ascii_id[128];    /* non-byte-level: vocab id of the one-char piece, or -1 */
    int byte_level, byte_fallback, ignore_merges, fuse_unk, spm_dummy_first_only;
    int32_t unk_id;
    int wordpiece, wp_max_chars; /* WordPiece model instead of BPE */
    uint32_t spm_nocut[32];   /* TP_SPM: chars some piece has right before U+2581 */
    int n_spm_nocut;

    struct tok_added *added;
    int n_added;
    int has_norm_added;       /* some added token has normalized == true */
    int32_t added_start[257]; /* added_idx[added_start[b] .. added_start[b+1]): first byte b */
    int32_t *added_idx;       /* indices into added, longest first within a first byte */

    struct tok_norm *norm;
    int n_norm;
    struct tok_pre *pre;
    int n_pre;
    struct tok_dec *dec;
    int n_dec, has_decoder;
    int cleanup; /* transformers' clean_up_tokenization_spaces on decode */

    int32_t post_pre[4], post_suf[4];
    int n_post_pre, n_post_suf;

    int32_t bos, eos, eot, pad;
    int32_t *eog;
    int n_eog;
};

/* ---- builders (tok.c) ---- */
/* Allocates an empty tok with n_vocab slots. */
struct tok *tok_new(int n_vocab);
/* Sets id's piece (copied), its model-space text and attribute. */
int tok_set_piece(struct tok *t, int32_t id, const char *s, size_t len, int attr, struct cerr *e);
/* Fills mtext/vocab/pieces maps from pieces after all are set; byte_level decodes pieces. */
int tok_finish(struct tok *t, struct cerr *e);
int tok_add_added(struct tok *t, const struct tok_added *a, struct cerr *e);
void tok_add_eog(struct tok *t, int32_t id);
char *tok_strdup(struct tok *t, const char *s, size_t n);
/* Compiles a pattern with UTF+UCP (+JIT). NULL with e set on failure. */
pcre2_code *tok_regex(const char *pat, size_t len, struct cerr *e);
/* Appends ops; return pointer to the new zeroed op or NULL (no memory). */
struct tok_norm *tok_push_norm(struct tok *t);
struct tok_pre *tok_push_pre(struct tok *t);
struct tok_dec *tok_push_dec(struct tok *t);
/* Builds BPE merges for SentencePiece-style vocabularies from piece scores (higher merges
 * first). hf_order=0: SentencePiece order (equal scores tie by position at run time);
 * hf_order=1: the order transformers' generate_merges() gives (score, then longer left,
 * then longer right), used for GGUF vocabularies whose reference is transformers. */
int tok_merges_from_scores(struct tok *t, const float *score, int hf_order, struct cerr *e);
/* Marks the well-known end-of-generation pieces. */
void tok_guess_eog(struct tok *t);
/* Enables the TP_SPM split optimisation when no piece has U+2581 after another char. */
void tok_maybe_spm_split(struct tok *t);

/* GPT-2 byte <-> unicode mapping (bytelevel.c). */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp); /* -1 when cp is not a mapped byte */

/* ---- UTF-8 helpers (utf8.c) ---- */
/* Length of the valid UTF-8 sequence at s (1..4), or 0 when invalid/truncated. */
int tok_utf8_len(const uint8_t *s, size_t n);
/* Decodes one valid sequence (as checked by tok_utf8_len). */
uint32_t tok_utf8_cp(const uint8_t *s, int len);
int tok_utf8_put(uint32_t cp, char *out);
/* Repairs invalid UTF-8 like Python's decode(errors="replace"). Returns NULL when s is
 * already valid (no copy), else a malloc'd copy in *out_len (or sets *oom). */
char *tok_utf8_repair(const char *s, size_t n, size_t *out_len, int *oom);

/* ---- growable byte buffer ---- */
struct tok_buf {
    char *p;
    size_t n, cap;
};
int tok_buf_reserve(struct tok_buf *b, size_t extra);
int tok_buf_put(struct tok_buf *b, const void *s, size_t n);

/* ---- pipeline stages ---- */
/* A span of text being tokenized: bytes [off, off+len) of a buffer, original offset. */
struct tok_span {
    size_t off, len;
    size_t orig; /* offset in the original text (for "first" prepend schemes) */
};
struct tok_spans {
    struct tok_span *v;
    size_t n, cap;
};
int tok_spans_push(struct tok_spans *s, size_t off, size_t len, size_t orig);

/* Per-call scratch (encode is reentrant: each call owns one). */
struct tok_scratch {
    struct tok_buf a, b;      /* normalized / pre-tokenized text */
    struct tok_spans s1, s2;  /* pre-tokenizer splits */
    pcre2_match_data *md;
    void *sym; size_t sym_cap; /* bpe.c symbols */
    void *heap; size_t heap_cap;
    int32_t *ids; size_t n_ids, cap_ids;
};
void tok_scratch_free(struct tok_scratch *sc);
int tok_push_id(struct tok_scratch *sc, int32_t id);

/* normalize.c: normalizes in[0..n) into out (reset first). 0 or CERR_*. */
int tok_normalize(const struct tok *t, const char *in, size_t n, size_t orig, struct tok_buf *out,
                  struct tok_buf *tmp, struct cerr *e);
/* pretok.c: splits buf (may rewrite it) into spans; each span is one model word. */
int tok_pretokenize(const struct tok *t, struct tok_scratch *sc, struct tok_buf *buf,
                    size_t orig, struct tok_spans *out, struct cerr *e);
/* bpe.c: encodes one word (model-space bytes) appending ids to sc->ids. */
int tok_bpe_word(const struct tok *t, struct tok_scratch *sc, const char *w, size_t n,
                 struct cerr *e);
/* added.c: splits s[0..n) on added tokens with normalized == want_norm. cb gets each text
 * piece (id -1) and each matched token, in order; a non-zero return from cb stops. */
typedef int (*tok_seg_cb)(void *ctx, int32_t id, size_t off, size_t len);
int tok_added_split(const struct tok *t, const char *s, size_t n, int want_norm,
                    int parse_special, tok_seg_cb cb, void *ctx);
int tok_added_index(struct tok *t, struct cerr *e);
/* wordpiece.c */
int tok_norm_bert(const struct tok_norm *op, const char *in, size_t n, struct tok_buf *out,
                  struct tok_buf *tmp);
int tok_wordpiece_word(const struct tok *t, struct tok_scratch *sc, const char *w, size_t n,
                       struct cerr *e);
/* decoder.c: full decode of a token list per the decoder chain. */
int tok_decode_ids(const struct tok *t, const int32_t *ids, int n, int flags,
                   struct tok_buf *out, struct cerr *e);

#endif
