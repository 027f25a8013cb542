/* load_gguf.c — the tokenizer.ggml.* keys of a GGUF file -> struct tok.
 *
 * "gpt2" vocabularies become byte-level BPE with the file's merges and a pre-tokenizer
 * regex chosen from tokenizer.ggml.pre (llama-bpe, qwen2, tekken, gpt-4o families; else
 * GPT-2's); "llama" vocabularies become SentencePiece BPE with byte fallback (merges from
 * scores; Gemma files from token order, its space-run tokens respelled with U+2581).
 * These are the pipelines transformers builds for a GGUF (AutoTokenizer gguf_file=...),
 * which is the reference the tests compare with. Control tokens become special added
 * tokens, user-defined ones plain added tokens.
 */
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "tokenizer/tok_int.h"
#include "util/err.h"

int tok_spm_pipeline(struct tok *t, int dummy, int extra_ws, int first_only, struct cerr *e);

static const char RE_LLAMA3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_TEKKEN[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_GPT4O[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static const struct {
    const char *pre;
    const char *re;
} g_pre[] = {
    {"llama3", RE_LLAMA3},    {"llama-v3", RE_LLAMA3},    {"llama-bpe", RE_LLAMA3},
    {"falcon3", RE_LLAMA3},   {"falcon-h1", RE_LLAMA3},   {"pixtral", RE_LLAMA3},
    {"midm-2.0", RE_LLAMA3},  {"lfm2", RE_LLAMA3},        {"dbrx", RE_LLAMA3},
    {"smaug-bpe", RE_LLAMA3}, {"tekken", RE_TEKKEN},      {"qwen2", RE_QWEN2},
    {"deepseek-r1-qwen", RE_QWEN2}, {"megrez", RE_QWEN2}, {"gpt-4o", RE_GPT4O},
    {"llama4", RE_GPT4O},     {"minimax-m2", RE_GPT4O},
};

static int str_is(struct gguf_str s, const char *c) { return gguf_str_eq(s, c); }

static int64_t get_id(const struct gguf *g, const char *key, int n)
{
    int64_t v;
    if (gguf_get_int(g, key, &v, NULL) != 0 || v < 0 || v >= n)
        return -1;
    return v;
}

static int get_flag(const struct gguf *g, const char *key, int def)
{
    int b;
    return gguf_get_bool(g, key, &b, NULL) == 0 ? b : def;
}

/* Python's str.isspace() for the characters a vocabulary piece may hold. */
static int py_space(uint32_t c)
{
    return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Gemma: a piece made only of whitespace that contains a space is respelled as U+2581
 * repeated once per character (what transformers does). Returns chars, or 0 if not. */
static size_t gemma_respell(const char *s, size_t n)
{
    int has_space = 0;
    size_t chars = 0;
    for (size_t i = 0; i < n;) {
        int l = tok_utf8_len((const uint8_t *)s + i, n - i);
        if (!l)
            return 0;
        uint32_t c = tok_utf8_cp((const uint8_t *)s + i, l);
        if (!py_space(c))
            return 0;
        has_space |= c == ' ';
        chars++;
        i += (size_t)l;
    }
    return has_space ? chars : 0;
}

static int in_byte_alphabet(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        int l = tok_utf8_len((const uint8_t *)s + i, n - i);
        if (!l || tok_cp_to_byte(tok_utf8_cp((const uint8_t *)s + i, l)) < 0)
            return 0;
        i += (size_t)l;
    }
    return 1;
}

/* transformers' tokenizer classes register their default special tokens first, so these
 * stay special (left as text when specials are not parsed) even when the file marks them
 * user-defined (Phi-3's </s>). */
static int builder_special(const char *p, size_t pl, int bpe, int gemma)
{
    static const char *llama[] = {"<s>", "</s>", "<unk>"};
    static const char *gem[] = {"<bos>", "<eos>", "<unk>", "<pad>", "<mask>"};
    static const char *gpt2[] = {"<|endoftext|>"};
    const char **v = bpe ? gpt2 : gemma ? gem : llama;
    size_t n = bpe ? 1 : gemma ? 5 : 3;
    for (size_t i = 0; i < n; i++)
        if (strlen(v[i]) == pl && memcmp(v[i], p, pl) == 0)
            return 1;
    return 0;
}

/* What the loader knows about the file while building. */
struct gctx {
    const struct gguf *g;
    struct tok *t;
    struct gguf_str model, pre, arch;
    int spm, bpe, wpm, gemma, n;
    const struct gguf_kv *toks, *scores, *types, *merges;
    float *score;
    char *buf; /* respelling scratch */
    size_t bufcap;
};

static int grow_buf(struct gctx *c, size_t need, struct cerr *e)
{
    if (need <= c->bufcap)
        return 0;
    char *nb = realloc(c->buf, need + 64);
    if (!nb)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    c->buf = nb;
    c->bufcap = need + 64;
    return 0;
}

/* Token i's spelling as the reference sees it: Gemma whitespace runs as U+2581 runs
 * (*respelled set), BERT phantom-space pieces back to WordPiece ("\u2581x" -> "x",
 * "x" -> "##x"). */
static int spell(struct gctx *c, int i, const char **p, size_t *pl, int *respelled,
                 struct cerr *e)
{
    struct gguf_str s = gguf_arr_str(c->toks, (uint64_t)i);
    *p = s.ptr;
    *pl = (size_t)s.len;
    *respelled = 0;
    if (c->wpm) {
        if (grow_buf(c, *pl + 3, e))
            return CERR_NOMEM;
        if (*pl >= 3 && memcmp(*p, "\xE2\x96\x81", 3) == 0) {
            memcpy(c->buf, *p + 3, *pl - 3);
            *pl -= 3;
        } else if (*pl >= 2 && (*p)[0] == '[' && (*p)[*pl - 1] == ']') {
            memcpy(c->buf, *p, *pl);
        } else {
            memcpy(c->buf, "##", 2);
            memcpy(c->buf + 2, *p, *pl);
            *pl += 2;
        }
        *p = c->buf;
        return 0;
    }
    size_t rs = c->gemma ? gemma_respell(*p, *pl) : 0;
    if (rs) {
        if (grow_buf(c, rs * 3, e))
            return CERR_NOMEM;
        for (size_t k = 0; k < rs; k++)
            memcpy(c->buf + 3 * k, "\xE2\x96\x81", 3);
        *p = c->buf;
        *pl = rs * 3;
        *respelled = 1;
    }
    return 0;
}

static int read_tokens(struct gctx *c, struct cerr *e)
{
    struct tok *t = c->t;
    for (int i = 0; i < c->n; i++) {
        int type = c->types ? (int)gguf_arr_num(c->types, (uint64_t)i) : 1;
        int attr = TOKA_NORMAL;
        switch (type) {
        case 2: attr |= TOKA_UNKNOWN; break;
        case 3: attr |= TOKA_CONTROL; break;
        case 4: attr |= TOKA_USER; break;
        case 5: attr |= TOKA_UNUSED; break;
        case 6: attr |= TOKA_BYTE; break;
        default: break;
        }
        c->score[i] = c->gemma ? (float)-i
                    : c->scores ? (float)gguf_arr_num(c->scores, (uint64_t)i) : 0.0f;
        const char *p;
        size_t pl;
        int respelled;
        int rc = spell(c, i, &p, &pl, &respelled, e);
        if (!rc)
            rc = tok_set_piece(t, i, p, pl, attr, e);
        if (rc)
            return rc;
        /* transformers adds control tokens as special (byte-level: only when spelled in
         * the byte alphabet) and user-defined tokens that kept their spelling */
        int add = 0, special = type == 3 || builder_special(p, pl, c->bpe, c->gemma);
        if (type == 3)
            add = !c->bpe || in_byte_alphabet(p, pl);
        else if (type == 4)
            add = !respelled && (!c->bpe || in_byte_alphabet(p, pl));
        if (add && pl) {
            struct tok_added a = {.s = p, .len = (uint32_t)pl, .id = i, .special = (uint8_t)special};
            rc = tok_add_added(t, &a, e);
            if (rc)
                return rc;
            if (special)
                t->attr[i] |= TOKA_CONTROL;
        }
    }
    return 0;
}

/* Byte-level BPE: one Split (or ByteLevel) regex chosen by tokenizer.ggml.pre. */
static int pipeline_bpe(struct gctx *c, struct cerr *e)
{
    const char *re = RE_GPT2;
    int split = 0;
    for (size_t k = 0; k < sizeof g_pre / sizeof g_pre[0]; k++)
        if (str_is(c->pre, g_pre[k].pre)) {
            re = g_pre[k].re;
            split = 1;
        }
    struct tok_pre *op = tok_push_pre(c->t);
    if (!op)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    op->type = split ? TP_SPLIT : TP_BYTELEVEL;
    op->behavior = TSB_ISOLATED;
    op->use_regex = 1;
    op->re = tok_regex(re, strlen(re), e);
    if (!op->re)
        return CERR_FORMAT;
    struct tok_dec *d = tok_push_dec(c->t);
    if (!d)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    d->type = TD_BYTELEVEL;
    c->t->has_decoder = 1;
    return 0;
}

/* Uncased BERT (the GGUF does not say): BertNormalizer + BertPreTokenizer + WordPiece. */
static int pipeline_wpm(struct gctx *c, struct cerr *e)
{
    static const char PUNCT[] = "[\\p{P}!-/:-@\\[-`{-~]";
    struct tok *t = c->t;
    struct tok_norm *nz = tok_push_norm(t);
    if (!nz)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    nz->type = TN_BERT;
    nz->left = nz->right = nz->first_only = 1;
    nz->alen = 1;
    struct tok_pre *ws = tok_push_pre(t);
    if (!ws)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    ws->type = TP_WSSPLIT;
    ws->behavior = TSB_REMOVED;
    if (!(ws->re = tok_regex("\\s", 2, e)))
        return CERR_FORMAT;
    struct tok_pre *pu = tok_push_pre(t);
    if (!pu)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    pu->type = TP_PUNCT;
    pu->behavior = TSB_ISOLATED;
    if (!(pu->re = tok_regex(PUNCT, sizeof PUNCT - 1, e)))
        return CERR_FORMAT;
    struct tok_dec *d = tok_push_dec(t);
    if (!d)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    d->type = TD_WORDPIECE;
    d->a = "##";
    d->alen = 2;
    d->start = 1;
    t->has_decoder = 1;
    t->wordpiece = 1;
    t->wp_max_chars = 100;
    return 0;
}

static int read_merges(struct gctx *c, struct cerr *e)
{
    struct tok *t = c->t;
    int rc = tok_pairmap_init(&t->merges, (uint32_t)c->merges->arr_n + 16);
    char *cat = NULL;
    size_t cap = 0;
    for (uint64_t i = 0; i < c->merges->arr_n && !rc; i++) {
        struct gguf_str m = gguf_arr_str(c->merges, i);
        const char *sp = memchr(m.ptr, ' ', (size_t)m.len);
        if (!sp)
            continue;
        size_t al = (size_t)(sp - m.ptr), bl = (size_t)m.len - al - 1;
        if (al + bl + 1 > cap) {
            cap = (al + bl + 1) * 2;
            char *nc = realloc(cat, cap);
            if (!nc) {
                rc = cerr_set(e, CERR_NOMEM, "out of memory");
                break;
            }
            cat = nc;
        }
        memcpy(cat, m.ptr, al);
        memcpy(cat + al, sp + 1, bl);
        int32_t ia = tok_map_get(&t->pieces, m.ptr, (uint32_t)al);
        int32_t ib = tok_map_get(&t->pieces, sp + 1, (uint32_t)bl);
        int32_t ic = tok_map_get(&t->pieces, cat, (uint32_t)(al + bl));
        if (ia >= 0 && ib >= 0 && ic >= 0 && tok_pairmap_put(&t->merges, ia, ib, (int32_t)i, ic))
            rc = cerr_set(e, CERR_NOMEM, "out of memory");
    }
    free(cat);
    return rc;
}

/* BOS/EOS/EOT/PAD/UNK ids, the post-processor and end-of-generation ids. */
static void set_specials(struct gctx *c)
{
    struct tok *t = c->t;
    const struct gguf *g = c->g;
    int n = c->n;
    t->bos = (int32_t)get_id(g, "tokenizer.ggml.bos_token_id", n);
    t->eos = (int32_t)get_id(g, "tokenizer.ggml.eos_token_id", n);
    t->pad = (int32_t)get_id(g, "tokenizer.ggml.padding_token_id", n);
    t->eot = (int32_t)get_id(g, "tokenizer.ggml.eot_token_id", n);
    if (c->gemma || c->wpm)
        t->unk_id = (int32_t)get_id(g, "tokenizer.ggml.unknown_token_id", n);
    if (c->wpm) {
        int32_t cls = (int32_t)get_id(g, "tokenizer.ggml.cls_token_id", n);
        int32_t sep = (int32_t)get_id(g, "tokenizer.ggml.seperator_token_id", n);
        if (cls >= 0)
            t->post_pre[t->n_post_pre++] = cls;
        if (sep >= 0)
            t->post_suf[t->n_post_suf++] = sep;
    } else {
        /* transformers: SentencePiece files add BOS unless they say otherwise; gemma4's
         * flag is ignored because its chat template writes <bos> itself */
        int gemma4 = str_is(c->model, "gemma4");
        int add_bos = !gemma4 && get_flag(g, "tokenizer.ggml.add_bos_token", c->spm);
        int add_eos = get_flag(g, "tokenizer.ggml.add_eos_token", 0);
        if (add_bos && t->bos >= 0)
            t->post_pre[t->n_post_pre++] = t->bos;
        if (add_eos && t->eos >= 0)
            t->post_suf[t->n_post_suf++] = t->eos;
    }
    tok_guess_eog(t);
    int32_t eom = (int32_t)get_id(g, "tokenizer.ggml.eom_token_id", n);
    if (eom >= 0)
        tok_add_eog(t, eom);
}

/* Reads the keys and checks the arrays; fills c. */
static int read_header(struct gctx *c, struct cerr *e)
{
    const struct gguf *g = c->g;
    if (gguf_get_str(g, "tokenizer.ggml.model", &c->model, e) != 0)
        return cerr_set(e, CERR_FORMAT, "%s: no tokenizer.ggml.model key (no vocabulary)", g->path);
    gguf_get_str(g, "tokenizer.ggml.pre", &c->pre, NULL);
    gguf_get_str(g, "general.architecture", &c->arch, NULL);
    c->spm = str_is(c->model, "llama") || str_is(c->model, "gemma4");
    c->bpe = str_is(c->model, "gpt2");
    c->wpm = str_is(c->model, "bert");
    if (!c->spm && !c->bpe && !c->wpm)
        return cerr_set(e, CERR_UNSUPPORTED, "%s: tokenizer.ggml.model '%.*s' is not supported",
                        g->path, (int)c->model.len, c->model.ptr);
    if (gguf_get_arr(g, "tokenizer.ggml.tokens", &c->toks, e) != 0 ||
        c->toks->arr_type != GGUF_STRING)
        return cerr_set(e, CERR_FORMAT, "%s: tokenizer.ggml.tokens is missing or not strings",
                        g->path);
    if (c->toks->arr_n == 0 || c->toks->arr_n > (1u << 24))
        return cerr_set(e, CERR_FORMAT, "%s: bad vocabulary size %llu", g->path,
                        (unsigned long long)c->toks->arr_n);
    c->n = (int)c->toks->arr_n;
    if (gguf_get_arr(g, "tokenizer.ggml.scores", &c->scores, NULL) != 0 ||
        c->scores->arr_n != c->toks->arr_n)
        c->scores = NULL;
    if (gguf_get_arr(g, "tokenizer.ggml.token_type", &c->types, NULL) != 0 ||
        c->types->arr_n != c->toks->arr_n)
        c->types = NULL;
    if (gguf_get_arr(g, "tokenizer.ggml.merges", &c->merges, NULL) != 0 ||
        c->merges->arr_type != GGUF_STRING)
        c->merges = NULL;
    if (c->bpe && !c->merges)
        return cerr_set(e, CERR_FORMAT, "%s: gpt2 vocabulary without tokenizer.ggml.merges",
                        g->path);
    c->gemma = c->spm && (str_is(c->arch, "gemma") || str_is(c->arch, "gemma2") ||
                          str_is(c->arch, "gemma3") || str_is(c->model, "gemma4"));
    return 0;
}

int tok_load_gguf(struct tok **out, const struct gguf *g, struct cerr *e)
{
    *out = NULL;
    struct gctx c;
    memset(&c, 0, sizeof c);
    c.g = g;
    int rc = read_header(&c, e);
    if (rc)
        return rc;
    c.t = tok_new(c.n);
    c.score = malloc(sizeof(float) * (size_t)c.n);
    if (!c.t || !c.score)
        rc = cerr_set(e, CERR_NOMEM, "out of memory");
    if (!rc) {
        c.t->byte_level = c.bpe;
        rc = read_tokens(&c, e);
    }
    if (!rc) {
        if (c.bpe)
            rc = pipeline_bpe(&c, e);
        else if (c.wpm)
            rc = pipeline_wpm(&c, e);
        else {
            int dummy = get_flag(g, "tokenizer.ggml.add_space_prefix", c.gemma ? 0 : 1);
            int extra = get_flag(g, "tokenizer.ggml.remove_extra_whitespaces", 0);
            rc = tok_spm_pipeline(c.t, dummy, extra, 0, e);
            c.t->byte_fallback = 1;
            c.t->fuse_unk = 1;
        }
    }
    if (!rc)
        rc = tok_finish(c.t, e);
    if (!rc && c.spm) {
        rc = tok_merges_from_scores(c.t, c.score, 1, e);
        tok_maybe_spm_split(c.t);
    }
    if (!rc && c.bpe)
        rc = read_merges(&c, e);
    if (!rc)
        set_specials(&c);
    free(c.score);
    free(c.buf);
    if (rc) {
        tok_free(c.t);
        return rc;
    }
    *out = c.t;
    return 0;
}
