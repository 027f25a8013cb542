/* tok.c — tokenizer lifecycle, the shared builders the loaders use, and tok_encode().
 *
 * Encode = repair UTF-8 -> split on non-normalized added tokens -> normalize each text
 * piece -> split on normalized added tokens -> pre-tokenize -> BPE each word ->
 * post-processor ids. Every call owns its scratch buffers, so concurrent calls on one
 * struct tok are safe.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_int.h"
#include "util/err.h"
#include "util/log.h"

struct tok *tok_new(int n_vocab)
{
    if (n_vocab < 0 || n_vocab > (1 << 26))
        return NULL;
    struct tok *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    arena_init(&t->ar, 1 << 20);
    size_t n = (size_t)n_vocab + 1;
    t->n_vocab = n_vocab;
    t->piece = calloc(n, sizeof *t->piece);
    t->piece_len = calloc(n, sizeof *t->piece_len);
    t->mtext = calloc(n, sizeof *t->mtext);
    t->mtext_len = calloc(n, sizeof *t->mtext_len);
    t->attr = calloc(n, 1);
    if (!t->piece || !t->piece_len || !t->mtext || !t->mtext_len || !t->attr) {
        tok_free(t);
        return NULL;
    }
    for (int b = 0; b < 256; b++)
        t->byte_id[b] = -1;
    t->unk_id = t->bos = t->eos = t->eot = t->pad = -1;
    return t;
}

void tok_free(struct tok *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->n_norm; i++)
        if (t->norm[i].re)
            pcre2_code_free(t->norm[i].re);
    for (int i = 0; i < t->n_pre; i++)
        if (t->pre[i].re)
            pcre2_code_free(t->pre[i].re);
    free(t->norm);
    free(t->pre);
    free(t->dec);
    free(t->added);
    free(t->added_idx);
    free(t->eog);
    free(t->piece);
    free(t->piece_len);
    free(t->mtext);
    free(t->mtext_len);
    free(t->attr);
    tok_map_free(&t->vocab);
    tok_map_free(&t->pieces);
    tok_pairmap_free(&t->merges);
    arena_free(&t->ar);
    free(t);
}

char *tok_strdup(struct tok *t, const char *s, size_t n)
{
    return arena_strndup(&t->ar, s ? s : "", s ? n : 0);
}

int tok_set_piece(struct tok *t, int32_t id, const char *s, size_t len, int attr, struct cerr *e)
{
    if (id < 0 || id >= t->n_vocab)
        return cerr_set(e, CERR_FORMAT, "token id %d outside the vocabulary (%d)", (int)id,
                        t->n_vocab);
    if (len > (1u << 20))
        return cerr_set(e, CERR_FORMAT, "token %d is %zu bytes long", (int)id, len);
    char *c = tok_strdup(t, s, len);
    if (!c)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    t->piece[id] = c;
    t->piece_len[id] = (uint32_t)len;
    t->attr[id] = (uint8_t)(t->attr[id] | attr);
    return 0;
}

int tok_add_added(struct tok *t, const struct tok_added *a, struct cerr *e)
{
    struct tok_added *v = realloc(t->added, sizeof *v * (size_t)(t->n_added + 1));
    if (!v)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    t->added = v;
    v[t->n_added] = *a;
    v[t->n_added].s = tok_strdup(t, a->s, a->len);
    if (!v[t->n_added].s)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    t->n_added++;
    return 0;
}

void tok_add_eog(struct tok *t, int32_t id)
{
    if (id < 0 || id >= t->n_vocab)
        return;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return;
    int32_t *v = realloc(t->eog, sizeof *v * (size_t)(t->n_eog + 1));
    if (!v)
        return;
    t->eog = v;
    v[t->n_eog++] = id;
}

static void *push_op(void **arr, int *n, size_t elem)
{
    void *v = realloc(*arr, elem * (size_t)(*n + 1));
    if (!v)
        return NULL;
    *arr = v;
    char *p = (char *)v + elem * (size_t)(*n);
    memset(p, 0, elem);
    (*n)++;
    return p;
}

struct tok_norm *tok_push_norm(struct tok *t)
{
    return push_op((void **)&t->norm, &t->n_norm, sizeof *t->norm);
}
struct tok_pre *tok_push_pre(struct tok *t)
{
    return push_op((void **)&t->pre, &t->n_pre, sizeof *t->pre);
}
struct tok_dec *tok_push_dec(struct tok *t)
{
    return push_op((void **)&t->dec, &t->n_dec, sizeof *t->dec);
}

pcre2_code *tok_regex(const char *pat, size_t len, struct cerr *e)
{
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, len, PCRE2_UTF | PCRE2_UCP, &err, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        cerr_set(e, CERR_FORMAT, "cannot compile regex at offset %zu: %s", (size_t)off,
                 (const char *)msg);
        return NULL;
    }
    if (pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) != 0)
        log_debug("tokenizer: PCRE2 JIT unavailable, using the interpreter");
    return re;
}

int tok_finish(struct tok *t, struct cerr *e)
{
    if (tok_map_init(&t->vocab, (uint32_t)t->n_vocab) ||
        tok_map_init(&t->pieces, (uint32_t)t->n_vocab + (uint32_t)t->n_added))
        return cerr_set(e, CERR_NOMEM, "out of memory");
    int cp2b[512];
    for (int i = 0; i < 512; i++)
        cp2b[i] = i < 324 ? tok_cp_to_byte((uint32_t)i) : -1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const char *p = t->piece[id];
        if (!p)
            continue;
        uint32_t pl = t->piece_len[id];
        t->mtext[id] = p;
        t->mtext_len[id] = pl;
        if (t->byte_level && (t->attr[id] & TOKA_NORMAL)) {
            char *raw = arena_alloc(&t->ar, pl + 1);
            if (!raw)
                return cerr_set(e, CERR_NOMEM, "out of memory");
            size_t o = 0;
            int ok = 1;
            for (size_t k = 0; k < pl;) {
                int l = tok_utf8_len((const uint8_t *)p + k, pl - k);
                uint32_t cp = l ? tok_utf8_cp((const uint8_t *)p + k, l) : 0xFFFFFF;
                int b = cp < 512 ? cp2b[cp] : -1;
                if (b < 0) {
                    ok = 0;
                    break;
                }
                raw[o++] = (char)b;
                k += (size_t)l;
            }
            if (ok) {
                raw[o] = 0;
                t->mtext[id] = raw;
                t->mtext_len[id] = (uint32_t)o;
            }
        }
    }
    /* added-token content first so tok_find prefers it */
    for (int i = 0; i < t->n_added; i++)
        if (tok_map_put(&t->pieces, t->added[i].s, t->added[i].len, t->added[i].id))
            return cerr_set(e, CERR_NOMEM, "out of memory");
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (!t->piece[id])
            continue;
        if (tok_map_put(&t->pieces, t->piece[id], t->piece_len[id], id))
            return cerr_set(e, CERR_NOMEM, "out of memory");
        if ((t->attr[id] & TOKA_NORMAL) &&
            tok_map_put(&t->vocab, t->mtext[id], t->mtext_len[id], id))
            return cerr_set(e, CERR_NOMEM, "out of memory");
    }
    for (int b = 0; b < 256; b++) {
        if (t->byte_level) {
            char c = (char)b;
            t->byte_id[b] = tok_map_get(&t->vocab, &c, 1);
        } else if (t->byte_fallback) {
            char name[8];
            static const char hex[] = "0123456789ABCDEF";
            memcpy(name, "<0x", 3);
            name[3] = hex[b >> 4];
            name[4] = hex[b & 15];
            name[5] = '>';
            t->byte_id[b] = tok_map_get(&t->vocab, name, 6);
            if (t->byte_id[b] >= 0)
                t->attr[t->byte_id[b]] |= TOKA_BYTE;
        }
    }
    for (int c = 0; c < 128; c++) {
        char ch = (char)c;
        t->ascii_id[c] = tok_map_get(&t->vocab, &ch, 1);
    }
    return tok_added_index(t, e);
}

struct scored {
    float s;
    int32_t id;
};
static int cmp_scored(const void *a, const void *b)
{
    const struct scored *x = a, *y = b;
    if (x->s != y->s)
        return x->s > y->s ? -1 : 1;
    return x->id - y->id;
}

/* One candidate merge for the transformers order. */
struct cand_merge {
    float s;
    int32_t id, l, r;
    uint32_t ll, rl; /* lengths in characters */
};
static int cmp_cand(const void *a, const void *b)
{
    const struct cand_merge *x = a, *y = b;
    if (x->s != y->s)
        return x->s > y->s ? -1 : 1;
    if (x->ll != y->ll)
        return x->ll > y->ll ? -1 : 1;
    if (x->rl != y->rl)
        return x->rl > y->rl ? -1 : 1;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    if (x->l != y->l)
        return x->l < y->l ? -1 : 1;
    return x->r < y->r ? -1 : (x->r > y->r);
}

static uint32_t n_chars(const char *p, uint32_t n)
{
    uint32_t c = 0;
    for (uint32_t i = 0; i < n; i++)
        c += ((uint8_t)p[i] & 0xC0) != 0x80;
    return c;
}

static int merges_hf(struct tok *t, const float *score, struct cerr *e)
{
    struct cand_merge *v = NULL;
    size_t n = 0, cap = 0;
    int rc = tok_pairmap_init(&t->merges, (uint32_t)t->n_vocab * 2);
    for (int32_t id = 0; id < t->n_vocab && !rc; id++) {
        const char *p = t->mtext[id];
        if (!p || !(t->attr[id] & TOKA_NORMAL))
            continue;
        uint32_t pl = t->mtext_len[id];
        for (uint32_t k = 1; k < pl; k++) {
            if (((uint8_t)p[k] & 0xC0) == 0x80)
                continue;
            int32_t l = tok_map_get(&t->vocab, p, k), r = tok_map_get(&t->vocab, p + k, pl - k);
            if (l < 0 || r < 0)
                continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 4096;
                struct cand_merge *nv = realloc(v, cap * sizeof *nv);
                if (!nv) {
                    free(v);
                    return cerr_set(e, CERR_NOMEM, "out of memory");
                }
                v = nv;
            }
            v[n++] = (struct cand_merge){score[id], id, l, r, n_chars(p, k),
                                         n_chars(p + k, pl - k)};
        }
    }
    if (n)
        qsort(v, n, sizeof *v, cmp_cand);
    for (size_t i = 0; i < n && !rc; i++)
        rc = tok_pairmap_put(&t->merges, v[i].l, v[i].r, (int32_t)i, v[i].id);
    free(v);
    return rc ? cerr_set(e, CERR_NOMEM, "out of memory") : 0;
}

int tok_merges_from_scores(struct tok *t, const float *score, int hf_order, struct cerr *e)
{
    if (hf_order)
        return merges_hf(t, score, e);
    struct scored *v = malloc(sizeof *v * (size_t)(t->n_vocab + 1));
    int32_t *rank = malloc(sizeof *rank * (size_t)(t->n_vocab + 1));
    if (!v || !rank) {
        free(v);
        free(rank);
        return cerr_set(e, CERR_NOMEM, "out of memory");
    }
    int n = 0;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->piece[id])
            v[n++] = (struct scored){score[id], id};
    qsort(v, (size_t)n, sizeof *v, cmp_scored);
    int32_t r = -1;
    for (int i = 0; i < n; i++) {
        if (i == 0 || v[i].s != v[i - 1].s)
            r++;
        rank[v[i].id] = r;
    }
    free(v);
    int rc = tok_pairmap_init(&t->merges, (uint32_t)t->n_vocab * 2);
    for (int32_t id = 0; id < t->n_vocab && !rc; id++) {
        const uint8_t a = t->attr[id];
        if (!t->piece[id] || !(a & TOKA_NORMAL) ||
            (a & (TOKA_CONTROL | TOKA_BYTE | TOKA_UNKNOWN | TOKA_UNUSED | TOKA_USER)))
            continue;
        const char *p = t->mtext[id];
        uint32_t pl = t->mtext_len[id];
        for (uint32_t k = 1; k < pl && !rc; k++) {
            if (((uint8_t)p[k] & 0xC0) == 0x80)
                continue;
            int32_t l = tok_map_get(&t->vocab, p, k), rr = tok_map_get(&t->vocab, p + k, pl - k);
            if (l >= 0 && rr >= 0)
                rc = tok_pairmap_put(&t->merges, l, rr, rank[id], id);
        }
    }
    free(rank);
    return rc ? cerr_set(e, CERR_NOMEM, "out of memory") : 0;
}

void tok_maybe_spm_split(struct tok *t)
{
    /* A cut before a U+2581 run is exact unless some piece holds "X" + U+2581 with X the
     * character before the cut: such characters are collected and never cut after. */
    t->n_spm_nocut = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const uint8_t *p = (const uint8_t *)t->mtext[id];
        if (!p || !(t->attr[id] & TOKA_NORMAL) || (t->attr[id] & (TOKA_USER | TOKA_CONTROL)))
            continue;
        uint32_t pl = t->mtext_len[id];
        for (uint32_t k = 1; k + 3 <= pl; k++) {
            if (!(p[k] == 0xE2 && p[k + 1] == 0x96 && p[k + 2] == 0x81))
                continue;
            uint32_t s = k - 1;
            while (s > 0 && (p[s] & 0xC0) == 0x80)
                s--;
            int l = tok_utf8_len(p + s, k - s);
            uint32_t cp = l ? tok_utf8_cp(p + s, l) : 0xFFFFFFFFu;
            if (cp == 0x2581)
                continue;
            int seen = 0;
            for (int i = 0; i < t->n_spm_nocut; i++)
                seen |= t->spm_nocut[i] == cp;
            if (seen)
                continue;
            if (cp == 0xFFFFFFFFu || t->n_spm_nocut == 32)
                return; /* too irregular: no cutting at all */
            t->spm_nocut[t->n_spm_nocut++] = cp;
        }
    }
    struct tok_pre *op = tok_push_pre(t);
    if (op)
        op->type = TP_SPM;
}

void tok_guess_eog(struct tok *t)
{
    static const char *names[] = {"<|im_end|>",     "<|eot_id|>",    "<|end_of_text|>",
                                  "<end_of_turn>",  "<|endoftext|>", "<|end|>",
                                  "<|eom_id|>",     "<|return|>",    "<|call|>",
                                  "<EOT>",          "</s>",          "<|END_OF_TURN_TOKEN|>",
                                  "<｜end▁of▁sentence｜>", "<turn|>"};
    if (t->eos >= 0)
        tok_add_eog(t, t->eos);
    if (t->eot >= 0)
        tok_add_eog(t, t->eot);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int32_t id = tok_map_get(&t->pieces, names[i], (uint32_t)strlen(names[i]));
        if (id >= 0 && (t->attr[id] & TOKA_CONTROL))
            tok_add_eog(t, id);
    }
}

/* ---------------------------------------------------------------- encode */

void tok_scratch_free(struct tok_scratch *sc)
{
    free(sc->a.p);
    free(sc->b.p);
    free(sc->s1.v);
    free(sc->s2.v);
    if (sc->md)
        pcre2_match_data_free(sc->md);
    free(sc->sym);
    free(sc->heap);
    free(sc->ids);
}

struct enc_ctx {
    const struct tok *t;
    struct tok_scratch *sc;
    struct tok_buf norm, tmp;
    struct tok_spans words;
    const char *text; /* the buffer the current callback offsets refer to */
    size_t base_orig;
    int flags;
    struct cerr *e;
};

static int encode_text(struct enc_ctx *c, const char *s, size_t n, size_t orig)
{
    struct tok_scratch *sc = c->sc;
    sc->a.n = 0;
    if (tok_buf_put(&sc->a, s, n))
        return cerr_set(c->e, CERR_NOMEM, "out of memory");
    int rc = tok_pretokenize(c->t, sc, &sc->a, orig, &c->words, c->e);
    if (rc)
        return rc;
    for (size_t i = 0; i < c->words.n; i++) {
        const char *w = sc->a.p + c->words.v[i].off;
        size_t wl = c->words.v[i].len;
        rc = c->t->wordpiece ? tok_wordpiece_word(c->t, sc, w, wl, c->e)
                             : tok_bpe_word(c->t, sc, w, wl, c->e);
        if (rc)
            return rc;
    }
    return 0;
}

static int on_norm_seg(void *ctx, int32_t id, size_t off, size_t len)
{
    struct enc_ctx *c = ctx;
    if (id >= 0)
        return tok_push_id(c->sc, id) ? cerr_set(c->e, CERR_NOMEM, "out of memory") : 0;
    return encode_text(c, c->norm.p + off, len, c->base_orig + off);
}

static int on_raw_seg(void *ctx, int32_t id, size_t off, size_t len)
{
    struct enc_ctx *c = ctx;
    if (id >= 0)
        return tok_push_id(c->sc, id) ? cerr_set(c->e, CERR_NOMEM, "out of memory") : 0;
    int rc = tok_normalize(c->t, c->text + off, len, off, &c->norm, &c->tmp, c->e);
    if (rc)
        return rc;
    if (c->t->has_norm_added) {
        c->base_orig = off;
        return tok_added_split(c->t, c->norm.p, c->norm.n, 1, c->flags & TOK_PARSE_SPECIAL,
                               on_norm_seg, c);
    }
    return encode_text(c, c->norm.p, c->norm.n, off);
}

int tok_encode(const struct tok *t, const char *text, size_t len, int flags, int32_t **ids,
               int *n, struct cerr *e)
{
    *ids = NULL;
    *n = 0;
    if (!t || (!text && len))
        return cerr_set(e, CERR_INVALID, "tok_encode: no tokenizer or text");
    if (len > (size_t)1 << 31)
        return cerr_set(e, CERR_LIMIT, "text of %zu bytes is too long to tokenize", len);
    size_t fl = 0;
    int oom = 0;
    char *fixed = tok_utf8_repair(text ? text : "", len, &fl, &oom);
    if (oom)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    if (fixed) {
        text = fixed;
        len = fl;
    }
    struct tok_scratch sc = {0};
    struct enc_ctx c = {.t = t, .sc = &sc, .text = text ? text : "", .flags = flags, .e = e};
    int rc = 0;
    sc.md = pcre2_match_data_create(8, NULL);
    if (!sc.md)
        rc = cerr_set(e, CERR_NOMEM, "out of memory");
    if (!rc && (flags & TOK_ADD_SPECIAL))
        for (int i = 0; i < t->n_post_pre && !rc; i++)
            if (tok_push_id(&sc, t->post_pre[i]))
                rc = cerr_set(e, CERR_NOMEM, "out of memory");
    if (!rc && len)
        rc = tok_added_split(t, c.text, len, 0, flags & TOK_PARSE_SPECIAL, on_raw_seg, &c);
    if (!rc && (flags & TOK_ADD_SPECIAL))
        for (int i = 0; i < t->n_post_suf && !rc; i++)
            if (tok_push_id(&sc, t->post_suf[i]))
                rc = cerr_set(e, CERR_NOMEM, "out of memory");
    if (!rc) {
        if (sc.n_ids > (size_t)INT32_MAX)
            rc = cerr_set(e, CERR_LIMIT, "too many tokens");
        else if (!sc.ids && !(sc.ids = malloc(sizeof(int32_t))))
            rc = cerr_set(e, CERR_NOMEM, "out of memory");
    }
    if (!rc) {
        *ids = sc.ids;
        *n = (int)sc.n_ids;
        sc.ids = NULL;
    }
    free(c.norm.p);
    free(c.tmp.p);
    free(c.words.v);
    tok_scratch_free(&sc);
    free(fixed);
    return rc;
}

int tok_decode(const struct tok *t, const int32_t *ids, int n, int flags, char **text,
               size_t *len, struct cerr *e)
{
    *text = NULL;
    if (len)
        *len = 0;
    if (!t || (n > 0 && !ids) || n < 0)
        return cerr_set(e, CERR_INVALID, "tok_decode: bad arguments");
    struct tok_buf out = {0};
    int rc = tok_decode_ids(t, ids, n, flags, &out, e);
    if (rc) {
        free(out.p);
        return rc;
    }
    *text = out.p;
    if (len)
        *len = out.n;
    return 0;
}

/* ---------------------------------------------------------------- accessors */

int tok_vocab_size(const struct tok *t) { return t ? t->n_vocab : 0; }

const char *tok_piece(const struct tok *t, int32_t id)
{
    if (!t || id < 0 || id >= t->n_vocab)
        return NULL;
    return t->piece[id];
}

int32_t tok_bos(const struct tok *t) { return t ? t->bos : -1; }
int32_t tok_eos(const struct tok *t) { return t ? t->eos : -1; }
int32_t tok_eot(const struct tok *t) { return t ? t->eot : -1; }
int32_t tok_pad(const struct tok *t) { return t ? t->pad : -1; }

int tok_is_eog(const struct tok *t, int32_t id)
{
    if (!t || id < 0)
        return 0;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return 1;
    return 0;
}

int tok_is_special(const struct tok *t, int32_t id)
{
    return t && id >= 0 && id < t->n_vocab && (t->attr[id] & TOKA_CONTROL);
}

int32_t tok_find(const struct tok *t, const char *piece)
{
    if (!t || !piece)
        return -1;
    return tok_map_get(&t->pieces, piece, (uint32_t)strlen(piece));
}

int tok_adds_bos(const struct tok *t)
{
    for (int i = 0; t && i < t->n_post_pre; i++)
        if (t->post_pre[i] == t->bos)
            return 1;
    return 0;
}

int tok_adds_eos(const struct tok *t)
{
    for (int i = 0; t && i < t->n_post_suf; i++)
        if (t->post_suf[i] == t->eos)
            return 1;
    return 0;
}
