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

int tok_load_gguf(struct tok **out, const struct gguf *g, struct cerr *e)
{
    *out = NULL;
    struct gguf_str model = {0}, pre = {0}, arch = {0};
    if (gguf_get_str(g, "tokenizer.ggml.model", &model, e) != 0)
        return cerr_set(e, CERR_FORMAT, "%s: no tokenizer.ggml.model key (no vocabulary)", g->path);
    gguf_get_str(g, "tokenizer.ggml.pre", &pre, NULL);
    gguf_get_str(g, "general.architecture", &arch, NULL);
    int spm = str_is(model, "llama") || str_is(model, "gemma4");
    int bpe = str_is(model, "gpt2");
    int wpm = str_is(model, "bert");
    if (!spm && !bpe && !wpm)
        return cerr_set(e, CERR_UNSUPPORTED, "%s: tokenizer.ggml.model '%.*s' is not supported",
                        g->path, (int)model.len, model.ptr);
    const struct gguf_kv *toks = NULL, *scores = NULL, *types = NULL, *merges = NULL;
    if (gguf_get_arr(g, "tokenizer.ggml.tokens", &toks, e) != 0 || toks->arr_type != GGUF_STRING)
        return cerr_set(e, CERR_FORMAT, "%s: tokenizer.ggml.tokens is missing or not strings",
                        g->path);
    if (toks->arr_n == 0 || toks->arr_n > (1u << 24))
        return cerr_set(e, CERR_FORMAT, "%s: bad vocabulary size %llu", g->path,
                        (unsigned long long)toks->arr_n);
    int n = (int)toks->arr_n;
    if (gguf_get_arr(g, "tokenizer.ggml.scores", &scores, NULL) != 0 || scores->arr_n != toks->arr_n)
        scores = NULL;
    if (gguf_get_arr(g, "tokenizer.ggml.token_type", &types, NULL) != 0 ||
        types->arr_n != toks->arr_n)
        types = NULL;
    if (gguf_get_arr(g, "tokenizer.ggml.merges", &merges, NULL) != 0 ||
        merges->arr_type != GGUF_STRING)
        merges = NULL;
    if (bpe && !merges)
        return cerr_set(e, CERR_FORMAT, "%s: gpt2 vocabulary without tokenizer.ggml.merges",
                        g->path);
    int gemma = spm && (str_is(arch, "gemma") || str_is(arch, "gemma2") || str_is(arch, "gemma3") ||
                        str_is(model, "gemma4"));

    struct tok *t = tok_new(n);
    float *score = malloc(sizeof(float) * (size_t)n);
    char *buf = NULL;
    size_t bufcap = 0;
    int rc = (!t || !score) ? cerr_set(e, CERR_NOMEM, "out of memory") : 0;
    if (!rc)
        t->byte_level = bpe;
    for (int i = 0; i < n && !rc; i++) {
        struct gguf_str s = gguf_arr_str(toks, (uint64_t)i);
        int type = types ? (int)gguf_arr_num(types, (uint64_t)i) : 1;
        int attr = TOKA_NORMAL;
        switch (type) {
        case 2: attr |= TOKA_UNKNOWN; break;
        case 3: attr |= TOKA_CONTROL; break;
        case 4: attr |= TOKA_USER; break;
        case 5: attr |= TOKA_UNUSED; break;
        case 6: attr |= TOKA_BYTE; break;
        default: break;
        }
        score[i] = gemma ? (float)-i : scores ? (float)gguf_arr_num(scores, (uint64_t)i) : 0.0f;
        const char *p = s.ptr;
        size_t pl = (size_t)s.len;
        size_t rs = gemma ? gemma_respell(p, pl) : 0;
        if (wpm) { /* phantom-space spelling back to WordPiece's: "\u2581x" -> "x", "x" -> "##x" */
            if (pl + 3 > bufcap) {
                bufcap = pl + 64;
                char *nb = realloc(buf, bufcap);
                if (!nb) {
                    rc = cerr_set(e, CERR_NOMEM, "out of memory");
                    break;
                }
                buf = nb;
            }
            if (pl >= 3 && memcmp(p, "\xE2\x96\x81", 3) == 0) {
                memcpy(buf, p + 3, pl - 3);
                pl -= 3;
            } else if (pl >= 2 && p[0] == '[' && p[pl - 1] == ']') {
                memcpy(buf, p, pl);
            } else {
                memcpy(buf, "##", 2);
                memcpy(buf + 2, p, pl);
                pl += 2;
            }
            p = buf;
        }
        if (rs) {
            if (rs * 3 > bufcap) {
                bufcap = rs * 3 + 64;
                char *nb = realloc(buf, bufcap);
                if (!nb) {
                    rc = cerr_set(e, CERR_NOMEM, "out of memory");
                    break;
                }
                buf = nb;
            }
            for (size_t k = 0; k < rs; k++)
                memcpy(buf + 3 * k, "\xE2\x96\x81", 3);
            p = buf;
            pl = rs * 3;
        }
        rc = tok_set_piece(t, i, p, pl, attr, e);
        if (rc)
            break;
        /* transformers adds control tokens as special (byte-level: only when spelled in
         * the byte alphabet) and user-defined tokens that kept their spelling */
        int add = 0, special = type == 3 || builder_special(p, pl, bpe, gemma);
        if (type == 3)
            add = !bpe || in_byte_alphabet(p, pl);
        else if (type == 4)
            add = !rs && (!bpe || in_byte_alphabet(p, pl));
        if (add && pl) {
            struct tok_added a = {.s = p, .len = (uint32_t)pl, .id = i, .special = (uint8_t)special};
            rc = tok_add_added(t, &a, e);
            if (special)
                t->attr[i] |= TOKA_CONTROL;
        }
    }
    free(buf);
    if (!rc && bpe) {
        const char *re = RE_GPT2;
        int split = 0;
        for (size_t k = 0; k < sizeof g_pre / sizeof g_pre[0]; k++)
            if (str_is(pre, g_pre[k].pre)) {
                re = g_pre[k].re;
                split = 1;
            }
        struct tok_pre *op = tok_push_pre(t);
        if (!op)
            rc = cerr_set(e, CERR_NOMEM, "out of memory");
        else {
            op->type = split ? TP_SPLIT : TP_BYTELEVEL;
            op->behavior = TSB_ISOLATED;
            op->use_regex = 1;
            op->re = tok_regex(re, strlen(re), e);
            if (!op->re)
                rc = CERR_FORMAT;
        }
        struct tok_dec *d = rc ? NULL : tok_push_dec(t);
        if (!rc && !d)
            rc = cerr_set(e, CERR_NOMEM, "out of memory");
        if (d) {
            d->type = TD_BYTELEVEL;
            t->has_decoder = 1;
        }
    } else if (!rc && wpm) {
        /* uncased BERT (the GGUF does not say): BertNormalizer + BertPreTokenizer */
        struct tok_norm *nz = tok_push_norm(t);
        struct tok_pre *ws = tok_push_pre(t), *pu = ws ? tok_push_pre(t) : NULL;
        if (pu)
            ws = pu - 1; /* the second push may have moved the array */
        struct tok_dec *d = tok_push_dec(t);
        if (!nz || !ws || !pu || !d)
            rc = cerr_set(e, CERR_NOMEM, "out of memory");
        else {
            nz->type = TN_BERT;
            nz->left = nz->right = nz->first_only = 1;
            nz->alen = 1;
            ws->type = TP_WSSPLIT;
            ws->behavior = TSB_REMOVED;
            ws->re = tok_regex("\\s", 2, e);
            pu->type = TP_PUNCT;
            pu->behavior = TSB_ISOLATED;
            { static const char PUNCT[] = "[\\p{P}!-/:-@\\[-`{-~]"; pu->re = tok_regex(PUNCT, sizeof PUNCT - 1, e); }
            if (!ws->re || !pu->re)
                rc = CERR_FORMAT;
            d->type = TD_WORDPIECE;
            d->a = "##";
            d->alen = 2;
            d->start = 1;
            t->has_decoder = 1;
            t->wordpiece = 1;
            t->wp_max_chars = 100;
        }
    } else if (!rc) {
        int dummy = get_flag(g, "tokenizer.ggml.add_space_prefix", gemma ? 0 : 1);
        int extra = get_flag(g, "tokenizer.ggml.remove_extra_whitespaces", 0);
        rc = tok_spm_pipeline(t, dummy, extra, 0, e);
        t->byte_fallback = 1;
        t->fuse_unk = 1;
    }
    if (!rc)
        rc = tok_finish(t, e);
    if (!rc && spm)
        rc = tok_merges_from_scores(t, score, 1, e);
    if (!rc && bpe) {
        rc = tok_pairmap_init(&t->merges, (uint32_t)merges->arr_n + 16);
        char *cat = NULL;
        size_t cap = 0;
        for (uint64_t i = 0; i < merges->arr_n && !rc; i++) {
            struct gguf_str m = gguf_arr_str(merges, i);
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
    }
    if (!rc) {
        if (spm)
            tok_maybe_spm_split(t);
        t->bos = (int32_t)get_id(g, "tokenizer.ggml.bos_token_id", n);
        t->eos = (int32_t)get_id(g, "tokenizer.ggml.eos_token_id", n);
        t->pad = (int32_t)get_id(g, "tokenizer.ggml.padding_token_id", n);
        t->eot = (int32_t)get_id(g, "tokenizer.ggml.eot_token_id", n);
        int32_t unk = (int32_t)get_id(g, "tokenizer.ggml.unknown_token_id", n);
        if ((spm && gemma) || wpm)
            t->unk_id = unk;
        if (wpm) {
            int32_t cls = (int32_t)get_id(g, "tokenizer.ggml.cls_token_id", n);
            int32_t sep = (int32_t)get_id(g, "tokenizer.ggml.seperator_token_id", n);
            if (cls >= 0)
                t->post_pre[t->n_post_pre++] = cls;
            if (sep >= 0)
                t->post_suf[t->n_post_suf++] = sep;
        }
        int32_t eom = (int32_t)get_id(g, "tokenizer.ggml.eom_token_id", n);
        int add_bos = !wpm && get_flag(g, "tokenizer.ggml.add_bos_token", spm && !str_is(model, "gemma4"));
        if (str_is(model, "gemma4"))
            add_bos = 0;
        int add_eos = !wpm && get_flag(g, "tokenizer.ggml.add_eos_token", 0);
        if (add_bos && t->bos >= 0)
            t->post_pre[t->n_post_pre++] = t->bos;
        if (add_eos && t->eos >= 0)
            t->post_suf[t->n_post_suf++] = t->eos;
        tok_guess_eog(t);
        if (eom >= 0)
            tok_add_eog(t, eom);
    }
    free(score);
    if (rc) {
        tok_free(t);
        return rc;
    }
    *out = t;
    return 0;
}
