/* load_spm.c — SentencePiece tokenizer.model (a ModelProto protobuf) -> struct tok.
 *
 * Reads only what encoding needs: pieces (string, score, type), trainer_spec model_type,
 * unk/bos/eos/pad ids and normalizer_spec (add_dummy_prefix, remove_extra_whitespaces,
 * escape_whitespaces, charsmap presence). BPE models only (Llama 2, Mistral, TinyLlama);
 * unigram models are refused clearly. The protobuf reader bounds-checks every varint and
 * length, so a corrupt file is an error, never an out-of-bounds read.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_int.h"
#include "util/err.h"
#include "util/log.h"

struct pb {
    const uint8_t *p, *end;
};

static int pb_varint(struct pb *b, uint64_t *v)
{
    uint64_t r = 0;
    for (int s = 0; s < 64; s += 7) {
        if (b->p >= b->end)
            return -1;
        uint8_t c = *b->p++;
        r |= (uint64_t)(c & 0x7F) << s;
        if (!(c & 0x80)) {
            *v = r;
            return 0;
        }
    }
    return -1;
}

/* Reads one field header and its payload. For wire type 2, *sub is the payload. */
static int pb_field(struct pb *b, uint32_t *field, int *wt, uint64_t *val, struct pb *sub)
{
    uint64_t key;
    if (pb_varint(b, &key))
        return -1;
    *field = (uint32_t)(key >> 3);
    *wt = (int)(key & 7);
    switch (*wt) {
    case 0:
        return pb_varint(b, val);
    case 1:
        if (b->end - b->p < 8)
            return -1;
        memcpy(val, b->p, 8);
        b->p += 8;
        return 0;
    case 5: {
        if (b->end - b->p < 4)
            return -1;
        uint32_t x;
        memcpy(&x, b->p, 4);
        *val = x;
        b->p += 4;
        return 0;
    }
    case 2: {
        uint64_t n;
        if (pb_varint(b, &n) || n > (uint64_t)(b->end - b->p))
            return -1;
        sub->p = b->p;
        sub->end = b->p + n;
        b->p += n;
        return 0;
    }
    default:
        return -1;
    }
}

struct spm_piece {
    const char *s;
    size_t len;
    float score;
    int type; /* 1 normal 2 unknown 3 control 4 user 5 unused 6 byte */
};

struct spm_model {
    struct spm_piece *v;
    size_t n, cap;
    int model_type; /* 1 unigram 2 bpe */
    int64_t unk, bos, eos, pad;
    int dummy, extra_ws, escape_ws, has_charsmap;
    char norm_name[32];
};

static int parse_piece(struct pb sub, struct spm_piece *pc)
{
    pc->s = "";
    pc->len = 0;
    pc->score = 0;
    pc->type = 1;
    while (sub.p < sub.end) {
        uint32_t f;
        int wt;
        uint64_t v = 0;
        struct pb s2 = {0};
        if (pb_field(&sub, &f, &wt, &v, &s2))
            return -1;
        if (f == 1 && wt == 2) {
            pc->s = (const char *)s2.p;
            pc->len = (size_t)(s2.end - s2.p);
        } else if (f == 2 && wt == 5) {
            uint32_t x = (uint32_t)v;
            memcpy(&pc->score, &x, 4);
        } else if (f == 3 && wt == 0)
            pc->type = (int)v;
    }
    return 0;
}

static int parse_model(const uint8_t *data, size_t len, struct spm_model *m)
{
    struct pb b = {data, data + len};
    m->model_type = 1;
    m->unk = 0;
    m->bos = 1;
    m->eos = 2;
    m->pad = -1;
    m->dummy = m->extra_ws = m->escape_ws = 1;
    while (b.p < b.end) {
        uint32_t f;
        int wt;
        uint64_t v = 0;
        struct pb sub = {0};
        if (pb_field(&b, &f, &wt, &v, &sub))
            return -1;
        if (f == 1 && wt == 2) {
            if (m->n == m->cap) {
                m->cap = m->cap ? m->cap * 2 : 1024;
                struct spm_piece *nv = realloc(m->v, m->cap * sizeof *nv);
                if (!nv)
                    return -2;
                m->v = nv;
            }
            if (parse_piece(sub, &m->v[m->n++]))
                return -1;
        } else if (f == 2 && wt == 2) { /* TrainerSpec */
            while (sub.p < sub.end) {
                uint32_t g;
                int w2;
                uint64_t x = 0;
                struct pb s3;
                if (pb_field(&sub, &g, &w2, &x, &s3))
                    return -1;
                if (w2 != 0)
                    continue;
                if (g == 3) m->model_type = (int)x;
                else if (g == 40) m->unk = (int64_t)(int32_t)x;
                else if (g == 41) m->bos = (int64_t)(int32_t)x;
                else if (g == 42) m->eos = (int64_t)(int32_t)x;
                else if (g == 43) m->pad = (int64_t)(int32_t)x;
            }
        } else if (f == 3 && wt == 2) { /* NormalizerSpec */
            while (sub.p < sub.end) {
                uint32_t g;
                int w2;
                uint64_t x = 0;
                struct pb s3 = {0};
                if (pb_field(&sub, &g, &w2, &x, &s3))
                    return -1;
                if (g == 1 && w2 == 2) {
                    size_t l = (size_t)(s3.end - s3.p);
                    if (l >= sizeof m->norm_name)
                        l = sizeof m->norm_name - 1;
                    memcpy(m->norm_name, s3.p, l);
                    m->norm_name[l] = 0;
                } else if (g == 2 && w2 == 2)
                    m->has_charsmap = s3.end > s3.p;
                else if (g == 3 && w2 == 0)
                    m->dummy = x != 0;
                else if (g == 4 && w2 == 0)
                    m->extra_ws = x != 0;
                else if (g == 5 && w2 == 0)
                    m->escape_ws = x != 0;
            }
        }
    }
    return 0;
}

/* Shared by the GGUF loader: the SentencePiece normalizer + decoder ops. */
int tok_spm_pipeline(struct tok *t, int dummy, int extra_ws, int first_only, struct cerr *e);
int tok_spm_pipeline(struct tok *t, int dummy, int extra_ws, int first_only, struct cerr *e)
{
    static const char META[] = "\xE2\x96\x81";
    struct tok_norm *n;
    if (extra_ws) {
        if (!(n = tok_push_norm(t)))
            return cerr_set(e, CERR_NOMEM, "out of memory");
        n->type = TN_SPM_WS;
    }
    if (dummy) {
        if (!(n = tok_push_norm(t)))
            return cerr_set(e, CERR_NOMEM, "out of memory");
        n->type = TN_PREPEND;
        n->a = META;
        n->alen = 3;
        n->first_only = first_only;
    }
    if (!(n = tok_push_norm(t)))
        return cerr_set(e, CERR_NOMEM, "out of memory");
    n->type = TN_REPLACE;
    n->a = " ";
    n->alen = 1;
    n->b = META;
    n->blen = 3;
    struct tok_dec *d;
    if (!(d = tok_push_dec(t)))
        return cerr_set(e, CERR_NOMEM, "out of memory");
    d->type = TD_REPLACE;
    d->a = META;
    d->alen = 3;
    d->b = " ";
    d->blen = 1;
    if (!(d = tok_push_dec(t)))
        return cerr_set(e, CERR_NOMEM, "out of memory");
    d->type = TD_BYTEFALLBACK;
    if (!(d = tok_push_dec(t)))
        return cerr_set(e, CERR_NOMEM, "out of memory");
    d->type = TD_FUSE;
    if (dummy) {
        if (!(d = tok_push_dec(t)))
            return cerr_set(e, CERR_NOMEM, "out of memory");
        d->type = TD_STRIP;
        d->a = " ";
        d->alen = 1;
        d->start = 1;
    }
    t->has_decoder = 1;
    return 0;
}

int tok_load_spm_mem(struct tok **out, const uint8_t *data, size_t len, struct cerr *e)
{
    *out = NULL;
    struct spm_model m;
    memset(&m, 0, sizeof m);
    int prc = parse_model(data, len, &m);
    if (prc) {
        free(m.v);
        return prc == -2 ? cerr_set(e, CERR_NOMEM, "out of memory")
                         : cerr_set(e, CERR_FORMAT, "not a valid SentencePiece model protobuf");
    }
    if (m.n == 0) {
        free(m.v);
        return cerr_set(e, CERR_FORMAT, "SentencePiece model has no pieces");
    }
    if (m.model_type != 2) {
        free(m.v);
        return cerr_set(e, CERR_UNSUPPORTED,
                        "SentencePiece model type %d is not supported (only BPE = 2)",
                        m.model_type);
    }
    if (m.has_charsmap && strcmp(m.norm_name, "identity") != 0)
        log_warn("tokenizer: SentencePiece normalizer '%s' (charsmap) is approximated by NFKC",
                 m.norm_name);
    struct tok *t = tok_new((int)m.n);
    float *score = malloc(sizeof(float) * m.n);
    int rc = (!t || !score) ? cerr_set(e, CERR_NOMEM, "out of memory") : 0;
    for (size_t i = 0; i < m.n && !rc; i++) {
        const struct spm_piece *p = &m.v[i];
        int attr = TOKA_NORMAL;
        switch (p->type) {
        case 2: attr |= TOKA_UNKNOWN; break;
        case 3: attr |= TOKA_CONTROL; break;
        case 4: attr |= TOKA_USER; break;
        case 5: attr |= TOKA_UNUSED; break;
        case 6: attr |= TOKA_BYTE; t->byte_fallback = 1; break;
        default: break;
        }
        score[i] = p->score;
        rc = tok_set_piece(t, (int32_t)i, p->s, p->len, attr, e);
        if (!rc && (p->type == 3 || p->type == 4) && p->len) {
            struct tok_added a = {.s = p->s, .len = (uint32_t)p->len, .id = (int32_t)i,
                                  .special = p->type == 3, .normalized = 0};
            rc = tok_add_added(t, &a, e);
        }
    }
    if (!rc && m.has_charsmap && strcmp(m.norm_name, "identity") != 0) {
        struct tok_norm *n = tok_push_norm(t);
        if (!n)
            rc = cerr_set(e, CERR_NOMEM, "out of memory");
        else
            n->type = TN_NFKC;
    }
    if (!rc)
        rc = tok_spm_pipeline(t, m.dummy, m.extra_ws, 1, e);
    if (!rc)
        rc = tok_finish(t, e);
    if (!rc)
        rc = tok_merges_from_scores(t, score, 0, e);
    if (!rc) {
        tok_maybe_spm_split(t);
        t->fuse_unk = 1;
        if (m.unk >= 0 && m.unk < (int64_t)m.n)
            t->unk_id = (int32_t)m.unk;
        if (m.bos >= 0 && m.bos < (int64_t)m.n)
            t->bos = (int32_t)m.bos;
        if (m.eos >= 0 && m.eos < (int64_t)m.n)
            t->eos = (int32_t)m.eos;
        if (m.pad >= 0 && m.pad < (int64_t)m.n)
            t->pad = (int32_t)m.pad;
        if (t->bos >= 0)
            t->post_pre[t->n_post_pre++] = t->bos;
        tok_guess_eog(t);
    }
    free(score);
    free(m.v);
    if (rc) {
        tok_free(t);
        return rc;
    }
    *out = t;
    return 0;
}
