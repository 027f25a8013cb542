/* spec_int.h — internals of the speculation module shared by spec.c, spec_suffix.c and
 * spec_draft.c. Not for use outside src/engine/spec.
 */
#ifndef CINFER_ENGINE_SPEC_SPEC_INT_H
#define CINFER_ENGINE_SPEC_SPEC_INT_H

#include "engine/spec/spec.h"

#define SPEC_PROBE 16 /* steps without a draft before a row probes with one token */
#define SPEC_CORPUS_MAX_TOKENS (1 << 18) /* suffix: finished-output tokens kept */
#define SPEC_CORPUS_MAX_SEGS 256

struct spec_draft; /* spec_draft.c */

struct spec {
    struct spec_config c;
    int n_vocab;
    double g_acc[SPEC_BUCKETS], g_rej[SPEC_BUCKETS]; /* every request's, decayed */
    long drafted, accepted, rounds, draft_calls;
    /* measured step times: decayed sums for the least-squares line t = a + b n */
    double tw, tn, tt, tnn, tnt;
    float beta; /* the measured slope (0 = not yet) */
    /* suffix corpus: recent finished outputs, oldest first (a ring of segments) */
    int32_t *seg[SPEC_CORPUS_MAX_SEGS];
    int seg_len[SPEC_CORPUS_MAX_SEGS];
    int seg_head, n_seg;
    long corpus_tokens;
    struct spec_draft *dm; /* two-model */
};

struct spec_req {
    double acc[SPEC_BUCKETS], rej[SPEC_BUCKETS];
    int bucket; /* of the last proposal */
    int idle;   /* decode steps since the row last drafted */
    /* two-model: the draft model's sequence; positions [0, dpast) hold the request's
     * tokens[0, dpast) */
    struct kv_seq dseq;
    int dpast;
    int dfed;  /* draft tokens of the last proposal fed to the draft model (at dpast ..) */
    int dlive; /* dseq holds blocks of the draft pool */
};

/* spec_suffix.c */
int spec_suffix_propose(struct spec *s, const int32_t *t, int n, int max, int32_t *out,
                        int *match_len);
void spec_corpus_add(struct spec *s, const int32_t *t, int n);
void spec_corpus_free(struct spec *s);

/* spec_draft.c */
int spec_draft_new(struct spec *s, struct cerr *e);
void spec_draft_free(struct spec *s);
int spec_draft_propose(struct spec *s, struct spec_req *q, const int32_t *t, int n, int max,
                       int32_t *out);
void spec_draft_rollback(struct spec *s, struct spec_req *q, int n_valid);
void spec_draft_release(struct spec *s, struct spec_req *q);

#endif
