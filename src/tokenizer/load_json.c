/* load_json.c — builds a struct tok from a Hugging Face tokenizer.json (+ the optional
 * tokenizer_config.json for BOS/EOS/PAD names and add_bos/add_eos).
 *
 * Supported: model BPE (byte-level or not, byte_fallback, ignore_merges, fuse_unk, unk);
 * normalizers NFC/NFD/NFKC/NFKD, Lowercase, Replace, Prepend, Strip, Sequence; pre-
 * tokenizers Split, ByteLevel, Metaspace, Digits, Whitespace, WhitespaceSplit, Punctuation,
 * Sequence; decoders ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence;
 * post-processors TemplateProcessing, ByteLevel, Roberta/Bert, Sequence. Anything else is
 * a clear CERR_UNSUPPORTED naming the component.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_int.h"
#include "util/err.h"

static const char GPT2_RE[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static const char *jstr(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int jbool(json_t *o, const char *k, int def)
{
    json_t *v = json_object_get(o, k);
    return json_is_boolean(v) ? json_is_true(v) : def;
}

/* pattern {"String": s} or {"Regex": r}; sets *lit or *re. */
static int get_pattern(struct tok *t, json_t *pat, const char **lit, size_t *litlen,
                       pcre2_code **re, struct cerr *e)
{
    json_t *s = json_object_get(pat, "String"), *r = json_object_get(pat, "Regex");
    if (json_is_string(s)) {
        *lit = tok_strdup(t, json_string_value(s), json_string_length(s));
        *litlen = json_string_length(s);
        return *lit ? 0 : cerr_set(e, CERR_NOMEM, "out of memory");
    }
    if (json_is_string(r)) {
        *re = tok_regex(json_string_value(r), json_string_length(r), e);
        return *re ? 0 : CERR_FORMAT;
    }
    return cerr_set(e, CERR_FORMAT, "pattern must be {\"String\"} or {\"Regex\"}");
}

static int parse_norm(struct tok *t, json_t *n, struct cerr *e)
{
    if (json_is_null(n) || !n)
        return 0;
    const char *ty = jstr(n, "type");
    if (!ty)
        return cerr_set(e, CERR_FORMAT, "normalizer without a type");
    if (!strcmp(ty, "Sequence")) {
        json_t *arr = json_object_get(n, "normalizers");
        size_t i;
        json_t *x;
        json_array_foreach(arr, i, x)
        {
            int rc = parse_norm(t, x, e);
            if (rc)
                return rc;
        }
        return 0;
    }
    if (!strcmp(ty, "Precompiled")) {
        const char *cm = jstr(n, "precompiled_charsmap");
        if (!cm || !*cm)
            return 0;
        return cerr_set(e, CERR_UNSUPPORTED, "normalizer Precompiled (a charsmap) is not supported");
    }
    struct tok_norm *op = tok_push_norm(t);
    if (!op)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    if (!strcmp(ty, "BertNormalizer")) {
        op->type = TN_BERT;
        op->left = jbool(n, "clean_text", 1);
        op->right = jbool(n, "handle_chinese_chars", 1);
        op->alen = (size_t)jbool(n, "lowercase", 1);
        json_t *sa = json_object_get(n, "strip_accents");
        op->first_only = json_is_boolean(sa) ? json_is_true(sa) : (int)op->alen;
        return 0;
    }
    if (!strcmp(ty, "NFC"))
        op->type = TN_NFC;
    else if (!strcmp(ty, "NFD"))
        op->type = TN_NFD;
    else if (!strcmp(ty, "NFKC"))
        op->type = TN_NFKC;
    else if (!strcmp(ty, "NFKD"))
        op->type = TN_NFKD;
    else if (!strcmp(ty, "Lowercase"))
        op->type = TN_LOWER;
    else if (!strcmp(ty, "Replace")) {
        op->type = TN_REPLACE;
        const char *c = jstr(n, "content");
        op->b = tok_strdup(t, c ? c : "", c ? strlen(c) : 0);
        op->blen = c ? strlen(c) : 0;
        return get_pattern(t, json_object_get(n, "pattern"), &op->a, &op->alen, &op->re, e);
    } else if (!strcmp(ty, "Prepend")) {
        op->type = TN_PREPEND;
        const char *p = jstr(n, "prepend");
        op->a = tok_strdup(t, p ? p : "", p ? strlen(p) : 0);
        op->alen = p ? strlen(p) : 0;
    } else if (!strcmp(ty, "Strip")) {
        op->type = TN_STRIP;
        op->left = jbool(n, "strip_left", 1);
        op->right = jbool(n, "strip_right", 1);
    } else
        return cerr_set(e, CERR_UNSUPPORTED, "normalizer %s is not supported", ty);
    return 0;
}

static int behavior_of(const char *b)
{
    if (!b || !strcmp(b, "Isolated"))
        return TSB_ISOLATED;
    if (!strcmp(b, "Removed"))
        return TSB_REMOVED;
    if (!strcmp(b, "MergedWithPrevious"))
        return TSB_MERGED_PREV;
    if (!strcmp(b, "MergedWithNext"))
        return TSB_MERGED_NEXT;
    if (!strcmp(b, "Contiguous"))
        return TSB_CONTIGUOUS;
    return -1;
}

static int set_repl(char *dst, size_t *len, const char *r)
{
    const char *s = r ? r : "\xE2\x96\x81";
    size_t l = strlen(s);
    if (l == 0 || l > 4)
        return -1;
    memcpy(dst, s, l);
    dst[l] = 0;
    *len = l;
    return 0;
}

static int prepend_scheme(json_t *n)
{
    const char *ps = jstr(n, "prepend_scheme");
    if (ps)
        return !strcmp(ps, "first") ? TPS_FIRST : !strcmp(ps, "never") ? TPS_NEVER : TPS_ALWAYS;
    return jbool(n, "add_prefix_space", 1) ? TPS_ALWAYS : TPS_NEVER;
}

static int parse_pre(struct tok *t, json_t *n, struct cerr *e)
{
    if (json_is_null(n) || !n)
        return 0;
    const char *ty = jstr(n, "type");
    if (!ty)
        return cerr_set(e, CERR_FORMAT, "pre_tokenizer without a type");
    if (!strcmp(ty, "Sequence")) {
        json_t *arr = json_object_get(n, "pretokenizers"), *x;
        size_t i;
        json_array_foreach(arr, i, x)
        {
            int rc = parse_pre(t, x, e);
            if (rc)
                return rc;
        }
        return 0;
    }
    if (!strcmp(ty, "BertPreTokenizer")) {
        json_t *seq = json_pack("[{s:s},{s:s,s:s}]", "type", "WhitespaceSplit", "type",
                                "Punctuation", "behavior", "Isolated");
        json_t *x;
        size_t i;
        int rc = seq ? 0 : cerr_set(e, CERR_NOMEM, "out of memory");
        json_array_foreach(seq, i, x)
        {
            if (!rc)
                rc = parse_pre(t, x, e);
        }
        json_decref(seq);
        return rc;
    }
    struct tok_pre *op = tok_push_pre(t);
    if (!op)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    if (!strcmp(ty, "Split")) {
        op->type = TP_SPLIT;
        op->behavior = behavior_of(jstr(n, "behavior"));
        if (op->behavior < 0)
            return cerr_set(e, CERR_UNSUPPORTED, "Split behavior %s", jstr(n, "behavior"));
        op->invert = jbool(n, "invert", 0);
        return get_pattern(t, json_object_get(n, "pattern"), &op->lit, &op->litlen, &op->re, e);
    }
    if (!strcmp(ty, "ByteLevel")) {
        op->type = TP_BYTELEVEL;
        op->add_prefix_space = jbool(n, "add_prefix_space", 1);
        op->use_regex = jbool(n, "use_regex", 1);
        t->byte_level = 1;
        if (op->use_regex) {
            op->re = tok_regex(GPT2_RE, sizeof GPT2_RE - 1, e);
            if (!op->re)
                return CERR_FORMAT;
        }
        return 0;
    }
    if (!strcmp(ty, "Metaspace")) {
        op->type = TP_METASPACE;
        if (set_repl(op->repl, &op->repl_len, jstr(n, "replacement")))
            return cerr_set(e, CERR_FORMAT, "Metaspace replacement must be one character");
        op->prepend_scheme = prepend_scheme(n);
        op->split = jbool(n, "split", 1);
        op->lit = op->repl;
        op->litlen = op->repl_len;
        return 0;
    }
    const char *re = NULL;
    if (!strcmp(ty, "Digits")) {
        op->type = TP_DIGITS;
        op->behavior = jbool(n, "individual_digits", 0) ? TSB_ISOLATED : TSB_CONTIGUOUS;
        re = "\\p{N}";
    } else if (!strcmp(ty, "Whitespace")) {
        op->type = TP_WHITESPACE;
        op->behavior = TSB_REMOVED;
        op->invert = 1;
        re = "\\w+|[^\\w\\s]+";
    } else if (!strcmp(ty, "WhitespaceSplit")) {
        op->type = TP_WSSPLIT;
        op->behavior = TSB_REMOVED;
        re = "\\s";
    } else if (!strcmp(ty, "Punctuation")) {
        op->type = TP_PUNCT;
        op->behavior = behavior_of(jstr(n, "behavior"));
        if (op->behavior < 0)
            return cerr_set(e, CERR_UNSUPPORTED, "Punctuation behavior %s", jstr(n, "behavior"));
        re = "[\\p{P}!-/:-@\\[-`{-~]";
    } else
        return cerr_set(e, CERR_UNSUPPORTED, "pre_tokenizer %s is not supported", ty);
    op->re = tok_regex(re, strlen(re), e);
    return op->re ? 0 : CERR_FORMAT;
}

static int parse_dec(struct tok *t, json_t *n, struct cerr *e)
{
    if (json_is_null(n) || !n)
        return 0;
    const char *ty = jstr(n, "type");
    if (!ty)
        return cerr_set(e, CERR_FORMAT, "decoder without a type");
    t->has_decoder = 1;
    if (!strcmp(ty, "Sequence")) {
        json_t *arr = json_object_get(n, "decoders"), *x;
        size_t i;
        json_array_foreach(arr, i, x)
        {
            int rc = parse_dec(t, x, e);
            if (rc)
                return rc;
        }
        return 0;
    }
    struct tok_dec *op = tok_push_dec(t);
    if (!op)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    if (!strcmp(ty, "ByteLevel"))
        op->type = TD_BYTELEVEL;
    else if (!strcmp(ty, "ByteFallback"))
        op->type = TD_BYTEFALLBACK;
    else if (!strcmp(ty, "Fuse"))
        op->type = TD_FUSE;
    else if (!strcmp(ty, "Strip")) {
        op->type = TD_STRIP;
        const char *c = jstr(n, "content");
        op->a = tok_strdup(t, c ? c : " ", c ? strlen(c) : 1);
        op->alen = c ? strlen(c) : 1;
        json_t *st = json_object_get(n, "start"), *sp = json_object_get(n, "stop");
        op->start = json_is_integer(st) ? (int)json_integer_value(st) : 0;
        op->stop = json_is_integer(sp) ? (int)json_integer_value(sp) : 0;
    } else if (!strcmp(ty, "Replace")) {
        op->type = TD_REPLACE;
        const char *c = jstr(n, "content");
        op->b = tok_strdup(t, c ? c : "", c ? strlen(c) : 0);
        op->blen = c ? strlen(c) : 0;
        pcre2_code *re = NULL;
        int rc = get_pattern(t, json_object_get(n, "pattern"), &op->a, &op->alen, &re, e);
        if (re) {
            pcre2_code_free(re);
            return cerr_set(e, CERR_UNSUPPORTED, "decoder Replace with a Regex pattern");
        }
        return rc;
    } else if (!strcmp(ty, "WordPiece")) {
        op->type = TD_WORDPIECE;
        const char *px = jstr(n, "prefix");
        op->a = tok_strdup(t, px ? px : "##", px ? strlen(px) : 2);
        op->alen = px ? strlen(px) : 2;
        op->start = jbool(n, "cleanup", 1);
    } else if (!strcmp(ty, "Metaspace")) {
        op->type = TD_METASPACE;
        if (set_repl(op->repl, &op->repl_len, jstr(n, "replacement")))
            return cerr_set(e, CERR_FORMAT, "Metaspace replacement must be one character");
        op->prepend = prepend_scheme(n) != TPS_NEVER;
    } else
        return cerr_set(e, CERR_UNSUPPORTED, "decoder %s is not supported", ty);
    return 0;
}

static int push_post(struct tok *t, int32_t id, int suffix, struct cerr *e)
{
    int32_t *arr = suffix ? t->post_suf : t->post_pre;
    int *n = suffix ? &t->n_post_suf : &t->n_post_pre;
    if (*n >= 4)
        return cerr_set(e, CERR_UNSUPPORTED, "post-processor adds too many tokens");
    if (id < 0 || id >= t->n_vocab)
        return cerr_set(e, CERR_FORMAT, "post-processor token id %d out of range", (int)id);
    arr[(*n)++] = id;
    return 0;
}

static int parse_post(struct tok *t, json_t *n, struct cerr *e)
{
    if (json_is_null(n) || !n)
        return 0;
    const char *ty = jstr(n, "type");
    if (!ty)
        return cerr_set(e, CERR_FORMAT, "post_processor without a type");
    if (!strcmp(ty, "ByteLevel"))
        return 0;
    if (!strcmp(ty, "Sequence")) {
        json_t *arr = json_object_get(n, "processors"), *x;
        size_t i;
        json_array_foreach(arr, i, x)
        {
            int rc = parse_post(t, x, e);
            if (rc)
                return rc;
        }
        return 0;
    }
    if (!strcmp(ty, "RobertaProcessing") || !strcmp(ty, "BertProcessing")) {
        json_t *cls = json_object_get(n, "cls"), *sep = json_object_get(n, "sep");
        int rc = push_post(t, (int32_t)json_integer_value(json_array_get(cls, 1)), 0, e);
        return rc ? rc : push_post(t, (int32_t)json_integer_value(json_array_get(sep, 1)), 1, e);
    }
    if (strcmp(ty, "TemplateProcessing"))
        return cerr_set(e, CERR_UNSUPPORTED, "post_processor %s is not supported", ty);
    json_t *single = json_object_get(n, "single"), *sp = json_object_get(n, "special_tokens"), *x;
    size_t i;
    int after = 0;
    json_array_foreach(single, i, x)
    {
        json_t *st = json_object_get(x, "SpecialToken");
        if (json_object_get(x, "Sequence")) {
            after = 1;
            continue;
        }
        const char *name = jstr(st, "id");
        json_t *ids = json_object_get(json_object_get(sp, name ? name : ""), "ids"), *y;
        if (!name || !json_is_array(ids))
            return cerr_set(e, CERR_FORMAT, "TemplateProcessing names unknown token %s",
                            name ? name : "?");
        size_t k;
        json_array_foreach(ids, k, y)
        {
            int rc = push_post(t, (int32_t)json_integer_value(y), after, e);
            if (rc)
                return rc;
        }
    }
    return 0;
}

/* A config token entry: "name" or {"content": "name"}; returns its id or -1. */
static int32_t config_token(struct tok *t, json_t *cfg, const char *key)
{
    json_t *v = json_object_get(cfg, key);
    const char *s = json_is_string(v) ? json_string_value(v) : jstr(v, "content");
    return s ? tok_find(t, s) : -1;
}

static int parse_model(struct tok *t, json_t *model, json_t *added, struct cerr *e)
{
    const char *ty = jstr(model, "type");
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (ty && !strcmp(ty, "WordPiece") && json_is_object(vocab)) {
        const char *px = jstr(model, "continuing_subword_prefix");
        if (px && strcmp(px, "##"))
            return cerr_set(e, CERR_UNSUPPORTED, "WordPiece prefix '%s' (only ##)", px);
        json_t *mx = json_object_get(model, "max_input_chars_per_word");
        t->wordpiece = 1;
        t->wp_max_chars = json_is_integer(mx) ? (int)json_integer_value(mx) : 100;
        return 0;
    }
    if ((ty && strcmp(ty, "BPE")) || !json_is_object(vocab) || !json_is_array(merges))
        return cerr_set(e, CERR_UNSUPPORTED, "model type %s is not supported (BPE, WordPiece)",
                        ty ? ty : "(none)");
    const char *csp = jstr(model, "continuing_subword_prefix"), *eow = jstr(model, "end_of_word_suffix");
    if ((csp && *csp) || (eow && *eow))
        return cerr_set(e, CERR_UNSUPPORTED, "BPE with subword prefix/suffix is not supported");
    (void)added;
    t->byte_fallback = jbool(model, "byte_fallback", 0);
    t->ignore_merges = jbool(model, "ignore_merges", 0);
    t->fuse_unk = jbool(model, "fuse_unk", 0);
    return 0;
}

static int build(struct tok **out, json_t *root, json_t *cfg, struct cerr *e)
{
    json_t *model = json_object_get(root, "model"), *added = json_object_get(root, "added_tokens");
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (!json_is_object(model))
        return cerr_set(e, CERR_FORMAT, "tokenizer.json has no \"model\"");
    if (!json_is_object(vocab))
        return cerr_set(e, CERR_UNSUPPORTED, "model type %s is not supported (BPE, WordPiece)",
                        jstr(model, "type") ? jstr(model, "type") : "(none)");
    long long maxid = -1;
    const char *k;
    json_t *v;
    json_object_foreach(vocab, k, v)
    {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= (1 << 26))
            return cerr_set(e, CERR_FORMAT, "vocab entry \"%.40s\" has a bad id", k);
        if (json_integer_value(v) > maxid)
            maxid = json_integer_value(v);
    }
    size_t i;
    json_array_foreach(added, i, v)
    {
        json_t *id = json_object_get(v, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= (1 << 26) || !jstr(v, "content"))
            return cerr_set(e, CERR_FORMAT, "added_tokens[%zu] has a bad id or content", i);
        if (json_integer_value(id) > maxid)
            maxid = json_integer_value(id);
    }
    struct tok *t = tok_new((int)(maxid + 1));
    if (!t)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    int rc = parse_model(t, model, added, e);
    json_object_foreach(vocab, k, v)
    {
        if (rc)
            break;
        rc = tok_set_piece(t, (int32_t)json_integer_value(v), k, strlen(k), TOKA_NORMAL, e);
    }
    json_array_foreach(added, i, v)
    {
        if (rc)
            break;
        const char *c = jstr(v, "content");
        struct tok_added a = {.s = c, .len = (uint32_t)strlen(c),
                              .id = (int32_t)json_integer_value(json_object_get(v, "id")),
                              .special = (uint8_t)jbool(v, "special", 0),
                              .lstrip = (uint8_t)jbool(v, "lstrip", 0),
                              .rstrip = (uint8_t)jbool(v, "rstrip", 0),
                              .normalized = (uint8_t)jbool(v, "normalized", !jbool(v, "special", 0)),
                              .single_word = (uint8_t)jbool(v, "single_word", 0)};
        int attr = TOKA_ADDED | (a.special ? TOKA_CONTROL : TOKA_USER);
        uint8_t keep = t->attr[a.id] & TOKA_NORMAL;
        rc = tok_set_piece(t, a.id, c, a.len, attr, e);
        t->attr[a.id] = (uint8_t)(attr | keep);
        if (!rc)
            rc = tok_add_added(t, &a, e);
    }
    if (!rc) rc = parse_norm(t, json_object_get(root, "normalizer"), e);
    if (!rc) rc = parse_pre(t, json_object_get(root, "pre_tokenizer"), e);
    if (!rc) rc = parse_dec(t, json_object_get(root, "decoder"), e);
    const char *unk = jstr(model, "unk_token");
    if (!rc) rc = tok_finish(t, e);
    if (!rc && unk)
        t->unk_id = tok_map_get(&t->vocab, unk, (uint32_t)strlen(unk));
    if (!rc && unk && t->unk_id < 0)
        t->unk_id = tok_find(t, unk);
    /* merges: "a b" strings or ["a", "b"] pairs, in rank order */
    if (!rc)
        rc = tok_pairmap_init(&t->merges, (uint32_t)json_array_size(merges) + 16);
    char *cat = NULL;
    size_t catcap = 0;
    json_array_foreach(merges, i, v)
    {
        if (rc)
            break;
        const char *a = NULL, *b = NULL;
        size_t al = 0, bl = 0;
        if (json_is_string(v)) {
            a = json_string_value(v);
            const char *sp = strchr(a, ' ');
            if (!sp) {
                rc = cerr_set(e, CERR_FORMAT, "merge %zu \"%.40s\" has no space", i, a);
                break;
            }
            al = (size_t)(sp - a);
            b = sp + 1;
            bl = strlen(b);
        } else if (json_is_array(v) && json_array_size(v) == 2 &&
                   json_is_string(json_array_get(v, 0)) && json_is_string(json_array_get(v, 1))) {
            a = json_string_value(json_array_get(v, 0));
            b = json_string_value(json_array_get(v, 1));
            al = strlen(a);
            bl = strlen(b);
        } else {
            rc = cerr_set(e, CERR_FORMAT, "merge %zu is malformed", i);
            break;
        }
        if (al + bl + 1 > catcap) {
            catcap = (al + bl + 1) * 2;
            char *nc = realloc(cat, catcap);
            if (!nc) {
                rc = cerr_set(e, CERR_NOMEM, "out of memory");
                break;
            }
            cat = nc;
        }
        memcpy(cat, a, al);
        memcpy(cat + al, b, bl);
        int32_t ia = tok_map_get(&t->pieces, a, (uint32_t)al);
        int32_t ib = tok_map_get(&t->pieces, b, (uint32_t)bl);
        int32_t ic = tok_map_get(&t->pieces, cat, (uint32_t)(al + bl));
        if (ia < 0 || ib < 0 || ic < 0)
            continue; /* upstream rejects such files; a merge that cannot apply is inert */
        rc = tok_pairmap_put(&t->merges, ia, ib, (int32_t)i, ic);
        if (rc)
            rc = cerr_set(e, CERR_NOMEM, "out of memory");
    }
    free(cat);
    if (!rc) rc = parse_post(t, json_object_get(root, "post_processor"), e);
    if (!rc) {
        t->bos = config_token(t, cfg, "bos_token");
        t->eos = config_token(t, cfg, "eos_token");
        t->pad = config_token(t, cfg, "pad_token");
        static const char *eot_names[] = {"<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<|end|>"};
        for (size_t q = 0; q < 4 && t->eot < 0; q++) {
            int32_t id = tok_find(t, eot_names[q]);
            if (id >= 0 && (t->attr[id] & TOKA_CONTROL))
                t->eot = id;
        }
        /* transformers' Llama-style tokenizers honour add_bos_token/add_eos_token */
        json_t *ab = json_object_get(cfg, "add_bos_token"), *ae = json_object_get(cfg, "add_eos_token");
        if (json_is_true(ab) && t->bos >= 0 && !tok_adds_bos(t))
            rc = push_post(t, t->bos, 0, e);
        if (!rc && json_is_true(ae) && t->eos >= 0 && !tok_adds_eos(t))
            rc = push_post(t, t->eos, 1, e);
        t->cleanup = json_is_true(json_object_get(cfg, "clean_up_tokenization_spaces"));
        tok_guess_eog(t);
    }
    if (rc) {
        tok_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

int tok_load_json_mem(struct tok **out, const char *js, size_t len, const char *config,
                      size_t config_len, struct cerr *e)
{
    *out = NULL;
    json_error_t je;
    json_t *root = json_loadb(js, len, 0, &je);
    if (!root)
        return cerr_set(e, CERR_FORMAT, "tokenizer.json: %s (line %d)", je.text, je.line);
    json_t *cfg = NULL;
    if (config && config_len) {
        cfg = json_loadb(config, config_len, JSON_DECODE_INT_AS_REAL, &je);
        if (!cfg) {
            json_decref(root);
            return cerr_set(e, CERR_FORMAT, "tokenizer_config.json: %s (line %d)", je.text,
                            je.line);
        }
    }
    int rc = json_is_object(root) ? build(out, root, cfg, e)
                                  : cerr_set(e, CERR_FORMAT, "tokenizer.json is not an object");
    json_decref(root);
    json_decref(cfg);
    return rc;
}
