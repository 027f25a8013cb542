/* spec_int.h — internals of the speculation module shared by spec.c, spec_suffix.c and
 * spec_draft.c. Not for use outside src/engine/spec.
 */
#ifndef CINFER_ENGINE_SPEC_SPEC_INT_H
#define CINFER_ENGINE_SPEC_SPEC_INT_H

#include "engine/spec/spec.h"

#define SPEC_PROBE 16 /* steps without a draft before a row probes with one token */
#define SPEC_PROBE_BACKOFF 2 /* the interval doubles after each probe nothing of which was
                              * kept, up to 2^this times SPEC_PROBE */
#define SPEC_CORPUS_MAX_TOKENS (1 << 18) /* suffix: finished-output tokens kept */
#define SPEC_CORPUS_MAX_SEGS 256
#define SPEC_STEP_SIZES 64 /* step sizes (tokens) whose times are kept */
#define SPEC_Q_TOP 32      /* two-model, sampled: q is the draft's softmax over its top 32 ids */
#define SPEC_DRAFT_ROWS 64 /* two-model: most rows in one draft forward */

struct spec_draft; /* spec_draft.c */

struct spec {
    struct spec_config c;
    int n_vocab;
    double g_acc[SPEC_BUCKETS], g_rej[SPEC_BUCKETS]; /* every request's, decayed */
    long drafted, accepted, rounds, draft_calls;
    long lk_drafted, lk_accepted; /* two-model: the prompt lookup's share of those */
    /* measured step times: per step size n (1..SPEC_STEP_SIZES) a smoothed time (outliers
     * clipped: a step the OS stalled does not move it far) and a capped count; the line
     * t = a + b n is fitted through them */
    double st[SPEC_STEP_SIZES + 1];
    double jit;    /* a waited decode step's mean excess over its size's low quantile (a
                    * moving average of every step after its size's third, each clipped to
                    * [0, the low quantile]): what a waited step costs above its least, for
                    * the comparison with a burst; jitc: samples (0: none yet) */
    long jitc;
    int sc[SPEC_STEP_SIZES + 1];
    long st_last[SPEC_STEP_SIZES + 1]; /* step_no when the size was last seen */
    long step_no;                      /* decode-only steps timed */
    float beta;                        /* the measured slope (0 = not yet) */
    double bsec;                       /* the same in seconds per token */
    int n_rows;    /* rows offered drafts at the last policy call (probe interval) */
    /* decode bursts (the engine queues a step behind the one in flight: no host gap): per
     * size the low quantile of a burst step's time (bt, count bc), and of the host's time
     * between two steps it waited for (gap, count gapc); burst_base: the step being planned
     * would run in a burst without drafts */
    double bt[SPEC_STEP_SIZES + 1], gap;
    int bc[SPEC_STEP_SIZES + 1], gapc, burst_base;
    double t1;     /* the fitted one-token step time a + b (0 = not yet) */
    /* two-model, the draft's forwards, with the same robust low quantile as the step times
     * (spec_lowq): of one token a row, by rows (dq[n], count dqc[n]); of the catch-up
     * chunks, per token (cq, count cqc) */
    double dq[SPEC_DRAFT_ROWS + 1], cq;
    int dqc[SPEC_DRAFT_ROWS + 1], cqc;
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
    int probing;     /* the last proposal was a probe (spec.c fill_p) */
    int probe_fails; /* probes in a row nothing of which was accepted (the interval backs off) */
    /* two-model: the draft model's sequence; positions [0, dpast) hold the request's
     * tokens[0, dpast) */
    struct kv_seq dseq;
    int dpast;
    int dfed;  /* draft tokens of the last proposal fed to the draft model (at dpast ..) */
    int dlive; /* dseq holds blocks of the draft pool */
    int n0;    /* two-model: the request's tokens at its first proposal (its prompt and the
                * first token; 0 = none yet) */
    int probes; /* two-model: probes this request made whose catch-up its own acceptance did
                 * not pay for (spec.c plan_two_model) */
    /* two-model, sampled rows (spec_req_new): drafts drawn from q; per draft of the last
     * proposal its q as (id, probability) pairs, the support of q */
    int sampled;
    float temp;
    uint64_t seed;
    int qn; /* drafts of the last proposal that carry a q */
    int qk[SPEC_MAX_DRAFT];
    int32_t qdraft[SPEC_MAX_DRAFT]; /* the token drawn from q */
    int32_t qid[SPEC_MAX_DRAFT][SPEC_Q_TOP];
    float qp[SPEC_MAX_DRAFT][SPEC_Q_TOP];
};

/* spec_cost.c */
/* A robust low quantile of a recurring time: *t follows sec down quickly and up slowly (at
 * most 2% a sample, a sample counted at most twice *t), so a sample the OS stalled on a
 * shared machine barely moves it; *cnt counts samples (up to 64; 0: *t is unset). */
void spec_lowq(double *t, int *cnt, double sec);
/* T(n): the measured step-time curve at n tokens (seconds), or the linear model
 * 1 + c (n - 1) in one-token steps while the curve is not known (spec_cost.c). */
double spec_step_at(const struct spec *s, int n);

/* spec_suffix.c */
int spec_suffix_propose(struct spec *s, const int32_t *t, int n, int max, int32_t *out,
                        int *match_len);
void spec_corpus_add(struct spec *s, const int32_t *t, int n);
void spec_corpus_free(struct spec *s);

/* spec_draft.c */
int spec_draft_new(struct spec *s, struct cerr *e);
void spec_draft_free(struct spec *s);
/* Drafts for rows i < n together: up to max[i] tokens to follow t[i][0..nt[i]) into
 * out[i], the count into m[i] (rows with max[i] <= 0 draft nothing). Returns the total. */
int spec_draft_propose_rows(struct spec *s, int n, struct spec_req *const *q,
                            const int32_t *const *t, const int *nt, const int *max,
                            int32_t *const *out, int *m);
/* A draft forward of one token for each of n rows took dt seconds. */
void spec_draft_time(struct spec *s, int n, double dt);
/* What a draft forward of one token for each of n rows costs, in one-token target steps:
 * measured for n rows, else the one-row cost scaled by the target's slope. */
double spec_draft_cost_rows(const struct spec *s, int n);
void spec_draft_rollback(struct spec *s, struct spec_req *q, int n_valid);
void spec_draft_release(struct spec *s, struct spec_req *q);
/* Tokens of t[0..n) the draft must compute before its first draft token (a new request looks
 * its prompt up in the draft's prefix cache first). */
int spec_draft_pending(struct spec *s, struct spec_req *q, const int32_t *t, int n);
/* What the draft's computing one such token costs, in one-token target steps: measured (the
 * catch-up chunks' time per token over the target's one-token step), else the draft's cost
 * ratio times the target's per-token slope. */
double spec_draft_catchup_cost(const struct spec *s);

/* spec_reject.c: draws draft j of q from the draft's logits lg (softmax at q->temp x scale
 * over its SPEC_Q_TOP largest logits), recording q; pos: the drafted token's position. */
int32_t spec_q_draw(struct spec_req *q, int j, const float *lg, int n_vocab, float scale, int pos);

#endif
