/* burst.c — decode bursts: a step of decode rows whose ids the backend decides runs ahead of
 * the host (engine_int.h: eng_burst_ok, eng_run_burst). Engine thread only. */
#include "engine/engine_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/spec/spec.h"
#include "engine/spec/step_prof.h"
#include "engine/testhook.h"
#include "kv/kv_pool.h"
#include "util/clock.h"
#include "util/log.h"

void eng_burst_init(struct engine *g)
{
    g->prof = step_prof_new(spec_kind_name(g->c.spec.kind));
    /* eng_table_width: CINFER_KV_TABLE_ROUND=N (a multiple of N blocks), =pow2, or 1 (as
     * wide as the longest row); default pow2 where steps are queued (a GPU: its recorded
     * graphs are keyed by the width) unless a layer's KV is quantized (its decode kernel
     * splits the context by the width), else 1 */
    const char *tr = getenv("CINFER_KV_TABLE_ROUND");
    int plain_kv = 1;
    for (int l = 0; l < g->m->hp.n_layer; l++)
        plain_kv &= g->ldt[l] == DT_F16 || g->ldt[l] == DT_F32 || g->ldt[l] == DT_BF16;
    if (tr && *tr)
        g->table_round = !strcmp(tr, "pow2") ? -1 : atoi(tr) > 1 ? atoi(tr) : 1;
    else
        g->table_round = model_queue_async(g->m) && plain_kv ? -1 : 1;
    const char *sb = getenv("CINFER_SPEC_BURST"); /* bursts with speculation */
    g->spec_burst = !(sb && !strcmp(sb, "0"));
}

void eng_burst_deinit(struct engine *g)
{
    step_prof_free(g->prof);
    g->prof = NULL;
}

void eng_step_timed(struct engine *g, int decode_only, int n_tok, int n_rows, double t0)
{
    double t1 = clock_now_s();
    if (g->spec && decode_only) {
        spec_step_time(g->spec, n_tok, t1 - t0);
        if (g->t_end > 0) /* the host's work since the last step's results */
            spec_gap_time(g->spec, t0 - g->t_end);
    }
    g->t_end = t1;
    step_prof_step(g->prof, !decode_only ? STEP_PROMPT : n_tok > n_rows ? STEP_VERIFY : STEP_PLAIN,
                   n_tok, decode_only ? n_tok - n_rows : 0, t0, t1);
}

int eng_table_width(const struct engine *g, int n_rows, int mb)
{
    const int r = g->table_round;
    for (int s = 0; s < n_rows && r != 1; s++)
        if (g->rows[s].r->n_tokens - g->rows[s].r->n_past != 1)
            return mb; /* a prompt chunk: such a step's shape does not repeat anyway */
    if (r > 1 && mb % r)
        mb += r - mb % r;
    else if (r < 0) /* a power of two, at least 32 blocks (512 positions at 16): a short
                     * chat keeps one width (each new width costs every decode shape a run
                     * of plain launches and a capture: ~7% of a cold 256-token reply on
                     * the H100) */
        for (int p = 32;; p *= 2)
            if (p >= mb) {
                mb = p;
                break;
            }
    return mb < g->max_blocks ? mb : g->max_blocks;
}

/* ---- decode bursts ---------------------------------------------------------------- */

/* A step of only decode rows (one token each, every row an output) whose ids the backend
 * decides (plain greedy: its argmax; else, with g->dev_sample, its op sample: greedy with
 * processors or temperature-only sampling, no logprobs) can run as a burst: the engine
 * queues the next step of the same rows (model_forward_queue, its tokens the ids the device
 * decided in this one, its sampling parameters one step further) before it reads this
 * step's ids, so the device never waits for the host between
 * steps. A burst ends when a row finishes, when a row is about to reach its length limit,
 * when the pool cannot hold one more position for every row, or when a submission or a
 * cancellation arrives; each ends the burst before the next step is queued, except a row
 * that finishes on an id only the host sees (EOS, a stop string): the one step already
 * queued then also ran for it, and its id is dropped (its K/V at a position past the end is
 * never read: a later sequence writes that position before attending to it). A burst also
 * ends before a step whose sampling the backend cannot decide (XTC firing at that step,
 * history past the op's room). With model-free speculation (ngram, suffix) a step whose
 * plan gave no row drafts may start a burst; before each further step is queued the host
 * plans the drafts again on the newest ids it has read (the step in flight's are not known
 * yet) and ends the burst where a row would draft (spec_engine.c eng_spec_burst_more), so
 * the next plain plan drafts one step later than it would without the burst: the ids stay
 * those of plain decoding (drafts never change them). The ids are those of run_step: the
 * same forward, the same argmax or op sample. Returns 0 (no burst), 1 (argmax) or 2 (op
 * sample). */
int eng_burst_ok(struct engine *g, int n_rows)
{
    /* requests may be waiting: the plan admitted none of them, and only an end (which
     * ends the burst) or new input (which ends it too) can make room */
    if (!g->overlap || !g->can_argmax || g->kv_swa || (g->spec && !eng_spec_burst_ok(g)))
        return 0;
    int greedy = 1;
    for (int s = 0; s < n_rows; s++) {
        const struct row *w = &g->rows[s];
        const struct ereq *r = w->r;
        if (w->n != 1 || r->n_past + 1 != r->n_tokens || r->want_lp)
            return 0;
        greedy &= sampler_is_plain_greedy(r->smp);
    }
    return greedy ? 1 : g->dev_sample && eng_samp_fill(g, n_rows, 0, 1, 0, NULL) >= 0 ? 2 : 0;
}

/* The batch of a decode step of g->rows (row s: output s): ahead = 0 feeds each row's
 * next token from the host; ahead = 1 is the continuation of a queued step still in flight
 * (positions one further, tokens from the device). ds: the op sample decides the ids
 * (g->samp filled for this step). Returns 0, or -1 when a row's sampling cannot be decided
 * on the backend at that step. */
static int burst_batch(struct engine *g, int n_rows, int ahead, int ds, struct model_batch *b)
{
    int words = ds ? eng_samp_fill(g, n_rows, ahead, 1, 0, NULL) : 0;
    if (words < 0)
        return -1;
    int mb = 1;
    for (int s = 0; s < n_rows; s++) {
        struct ereq *r = g->rows[s].r;
        int p = r->n_past + ahead;
        g->tokens[s] = ahead ? 0 : r->tokens[p];
        g->pos[s] = p;
        g->seqv[s] = s;
        g->slots[s] = kv_seq_slot(g->kv, &r->seq, p);
        g->out_idx[s] = s;
        if (r->seq.n_blocks > mb)
            mb = r->seq.n_blocks;
    }
    mb = eng_table_width(g, n_rows, mb);
    eng_fill_tables(g, n_rows, mb);
    *b = (struct model_batch){.n_tok = n_rows, .tokens = ahead ? NULL : g->tokens,
                              .pos = g->pos, .seq = g->seqv, .slots = g->slots,
                              .n_seq = n_rows, .max_blocks = mb, .block_tables = g->tables,
                              .n_out = n_rows, .out_idx = g->out_idx,
                              .samp = ds ? g->samp : NULL, .samp_words = words};
    eng_lora_batch(g, n_rows, b);
    return 0;
}

/* 1 when one more step may be queued behind the one in flight: every row continues past
 * the in-flight step's id (unless that id is EOS or a stop), holds one more position, and
 * no submission, cancellation or side work (side.c) waits. */
static int burst_more(struct engine *g, int n_rows)
{
    for (int s = 0; s < n_rows; s++) {
        struct ereq *r = g->rows[s].r;
        if (r->n_gen + 1 >= r->max_tokens || r->n_tokens + 1 >= g->c.n_ctx ||
            kv_seq_reserve(g->kv, &r->seq, r->n_past + 2, NULL))
            return 0;
    }
    pthread_mutex_lock(&g->mu);
    int quiet = !g->quit && !g->in.n && !g->n_cancel && !g->side_due;
    pthread_mutex_unlock(&g->mu);
    return quiet;
}

int eng_run_burst(struct engine *g, int n_rows, int ds)
{
    struct model_batch b;
    struct cerr e = {0};
    int alive = n_rows, queued = 1;
    unsigned char *gone = calloc((size_t)n_rows, 1); /* row finished: its ids are dropped */
    double t_prev = clock_now_s(); /* a step's time runs from the one before */
    const long burst0 = g->burst_steps; /* the first step's time holds the host's queueing */
    if (burst_batch(g, n_rows, 0, ds, &b))
        cerr_set(&e, CERR_INVALID, "a burst's first step cannot be sampled on the backend");
    if (!gone || e.code || model_forward_queue(g->m, g->ws, &g->view, &b, &e)) {
        if (!gone)
            cerr_set(&e, CERR_NOMEM, "out of memory");
        goto failed;
    }
    while (queued) {
        /* the next step first, while the device runs the one in flight */
        int next = alive == n_rows && burst_more(g, n_rows) &&
                   (!g->spec || eng_spec_burst_more(g, n_rows));
        if (next && burst_batch(g, n_rows, 1, ds, &b))
            next = 0; /* a row's next id needs the host: the burst ends */
        if (next) {
            if (model_forward_queue(g->m, g->ws, &g->view, &b, &e)) {
                log_error("engine: queueing a decode step failed: %s", e.msg);
                next = 0;
            }
        }
        if (model_forward_wait(g->m, g->ws, g->am, &e))
            goto failed;
        queued = model_queued(g->ws);
        double t = clock_now_s();
        step_prof_step(g->prof, STEP_BURST, n_rows, 0, t_prev, t);
        if (g->spec && g->burst_steps > burst0) /* a step queued behind the one before */
            spec_burst_time(g->spec, n_rows, t - t_prev);
        t_prev = g->t_end = t;
        g->steps++;
        eng_test_step_hook(g->steps);
        g->burst_steps++;
        long gen = 0, fed = 0;
        for (int s = 0; s < n_rows; s++) {
            struct ereq *r = g->rows[s].r;
            if (gone[s])
                continue;
            fed += r->n_past < r->n_prompt; /* a prompt's last token (the rest was cached) */
            r->n_past++;
            kv_cache_commit(g->kv, &r->seq, r->root, r->tokens, r->n_past);
            sampler_skip(r->smp);
            g->dev_rows += ds;
            r->spec_calls++; /* (usage.speculation.target_calls) */
            gen++;
            if (eng_on_token(g, r, g->am[s], NULL))
                gone[s] = 1, alive--;
        }
        if (g->c.check_invariants)
            eng_check_pool(g);
        pthread_mutex_lock(&g->mu);
        g->st.prompt_tokens += fed;
        pthread_mutex_unlock(&g->mu);
        eng_publish_stats(g, gen);
    }
    free(gone);
    return 0;
failed:
    log_error("engine: forward failed: %s", e.msg);
    while (model_queued(g->ws)) { /* nothing of what is still queued is used */
        struct cerr e2 = {0};
        if (model_forward_wait(g->m, g->ws, g->am, &e2))
            break;
    }
    for (int s = 0; s < n_rows; s++)
        if (!gone || !gone[s]) {
            eng_run_remove(g, g->rows[s].r);
            eng_fail(g, g->rows[s].r, e.msg);
        }
    free(gone);
    return -1;
}

