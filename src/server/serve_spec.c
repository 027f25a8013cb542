/* serve_spec.c — see serve.h: the speculative-decoding flags of `cinfer serve`, the draft
 * model's loading and tokenizer check, and what /stats, /metrics and the ready card show.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/serve.h"

static int int_flag(const char *flag, const char *v, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || errno || *end || x < lo || x > hi) {
        fprintf(stderr, "cinfer serve: %s expects an integer in [%d, %d], got '%s'\n", flag, lo, hi,
                v ? v : "");
        return -1;
    }
    *out = (int)x;
    return 0;
}

int serve_spec_flag(struct serve_opts *o, const char *a, const char *v)
{
    if (!strcmp(a, "--draft-kind") || !strcmp(a, "--draft-model")) {
        if (!v || !*v) {
            fprintf(stderr, "cinfer serve: %s expects a value\n", a);
            return -1;
        }
        if (a[8] == 'k')
            o->draft_kind = v;
        else
            o->draft_model = v;
        return 1;
    }
    if (!strcmp(a, "--num-draft-tokens") || !strcmp(a, "--draft-max"))
        return int_flag(a, v, 1, SPEC_MAX_DRAFT, &o->num_draft) ? -1 : 1;
    if (!strcmp(a, "--draft-lookup")) {
        if (!v || (strcmp(v, "on") && strcmp(v, "off"))) {
            fprintf(stderr, "cinfer serve: --draft-lookup expects on or off, got '%s'\n",
                    v ? v : "");
            return -1;
        }
        o->draft_lookup = v[1] == 'n' ? 1 : 2;
        return 1;
    }
    if (!strcmp(a, "--ngram-max"))
        return int_flag(a, v, 1, 16, &o->ngram_max) ? -1 : 1;
    if (!strcmp(a, "--ngram-min"))
        return int_flag(a, v, 1, 16, &o->ngram_min) ? -1 : 1;
    return 0;
}

/* 1 when the two tokenizers give every id the same piece. */
static int same_tokenizer(const struct tok *a, const struct tok *b)
{
    int n = tok_vocab_size(a);
    if (n != tok_vocab_size(b))
        return 0;
    for (int32_t id = 0; id < n; id++) {
        const char *x = tok_piece(a, id), *y = tok_piece(b, id);
        if ((x == NULL) != (y == NULL) || (x && strcmp(x, y)))
            return 0;
    }
    return 1;
}

int serve_spec_setup(struct serve *sv, struct be *be, struct engine_config *ec)
{
    const struct serve_opts *o = &sv->o;
    struct cerr e = {0};
    int kind = SPEC_NONE;
    if (o->draft_kind && (kind = spec_kind_parse(o->draft_kind, &e)) < 0) {
        fprintf(stderr, "cinfer serve: %s\n", e.msg);
        return -1;
    }
    if (!o->draft_kind && o->draft_model)
        kind = SPEC_TWO_MODEL; /* the default when a draft model is given */
    if (kind == SPEC_NONE) {
        if (o->num_draft || o->ngram_min || o->ngram_max)
            fprintf(stderr, "cinfer serve: --num-draft-tokens/--ngram-* are ignored without "
                            "--draft-kind or --draft-model\n");
        return 0;
    }
    struct spec_config *c = &ec->spec;
    spec_config_default(c, kind);
    if (o->num_draft)
        c->n_draft = o->num_draft;
    if (o->ngram_min)
        c->ngram_min = o->ngram_min;
    if (o->ngram_max)
        c->ngram_max = o->ngram_max;
    if (o->ngram_min && !o->ngram_max && c->ngram_max < c->ngram_min)
        c->ngram_max = c->ngram_min;
    if (o->draft_lookup && kind != SPEC_TWO_MODEL)
        fprintf(stderr, "cinfer serve: --draft-lookup is for two-model (a draft model); "
                        "ignored\n");
    else if (o->draft_lookup)
        c->lookup = o->draft_lookup == 1;
    c->kv_dtype = ec->kv_dtype;
    c->block_size = ec->block_size;
    int tok_same = 1;
    if (o->draft_model) {
        if (kind != SPEC_TWO_MODEL) {
            /* refused by spec_config_check below, before anything loads */
            c->draft = sv->m;
        } else {
            fprintf(stderr, "cinfer serve: loading the draft model %s ...\n", o->draft_model);
            if (model_load(&sv->draft, o->draft_model, be, &e) ||
                tok_load(&sv->draft_tk, o->draft_model, &e)) {
                fprintf(stderr, "cinfer serve: --draft-model %s: %s\n", o->draft_model, e.msg);
                return -1;
            }
            c->draft = sv->draft;
            tok_same = same_tokenizer(sv->tk, sv->draft_tk);
        }
    }
    int rc = spec_config_check(c, sv->m, tok_same, &e);
    if (kind != SPEC_TWO_MODEL)
        c->draft = NULL;
    if (rc) {
        fprintf(stderr, "cinfer serve: %s\n", e.msg);
        return -1;
    }
    return 0;
}

void serve_spec_card(struct serve *sv)
{
    const struct spec_config *c = &engine_config_of(sv->eng)->spec;
    if (c->kind == SPEC_NONE)
        return;
    struct engine_stats es;
    engine_get_stats(sv->eng, &es);
    if (es.spec.kind == SPEC_NONE) {
        printf("  Spec      %s requested but off for this model (see the log)\n",
               spec_kind_name(c->kind));
        return;
    }
    if (c->kind == SPEC_TWO_MODEL)
        printf("  Spec      two-model · draft %s · up to %d draft tokens a step%s · "
               "adaptive\n",
               sv->o.draft_model, es.spec.n_draft,
               c->lookup ? " · copied spans by prompt lookup" : "");
    else if (c->kind == SPEC_NGRAM)
        printf("  Spec      ngram (prompt lookup, n-grams %d..%d) · up to %d draft tokens · "
               "adaptive\n",
               c->ngram_min, c->ngram_max, es.spec.n_draft);
    else
        printf("  Spec      suffix (request + recent outputs) · up to %d draft tokens · "
               "adaptive\n",
               es.spec.n_draft);
}

json_t *serve_spec_stats_json(const struct engine_stats *es)
{
    const struct spec_stats *s = &es->spec;
    if (s->kind == SPEC_NONE)
        return json_pack("{s:s}", "kind", "none");
    json_t *j =
        json_pack("{s:s, s:i, s:I, s:I, s:f, s:I, s:I, s:I, s:f, s:f}", "kind",
                  spec_kind_name(s->kind), "num_draft_tokens", s->n_draft, "drafted",
                  (json_int_t)s->drafted, "accepted", (json_int_t)s->accepted, "acceptance_rate",
                  s->drafted ? (double)s->accepted / (double)s->drafted : 0.0, "verify_rows",
                  (json_int_t)s->rounds, "draft_model_calls", (json_int_t)s->draft_calls,
                  "suffix_corpus_tokens", (json_int_t)s->suffix_tokens, "step_cost",
                  (double)s->step_cost, "step_ms", (double)s->step_ms);
    if (j && s->kind == SPEC_TWO_MODEL) { /* what a draft forward costs, measured */
        json_object_set_new(j, "draft_cost", json_real(s->draft_cost));
        json_object_set_new(j, "draft_ms", json_real(s->draft_ms));
        json_object_set_new(j, "lookup_drafted", json_integer(s->lookup_drafted));
        json_object_set_new(j, "lookup_accepted", json_integer(s->lookup_accepted));
    }
    return j;
}

void serve_spec_metrics(struct sbuf *b, const struct engine_stats *es)
{
    const struct spec_stats *s = &es->spec;
    sbuf_printf(b,
                "# HELP cinfer_spec_draft_tokens_total Draft tokens scored by the target.\n"
                "# TYPE cinfer_spec_draft_tokens_total counter\n"
                "cinfer_spec_draft_tokens_total %ld\n"
                "# HELP cinfer_spec_accepted_tokens_total Draft tokens accepted.\n"
                "# TYPE cinfer_spec_accepted_tokens_total counter\n"
                "cinfer_spec_accepted_tokens_total %ld\n"
                "# HELP cinfer_spec_verify_rows_total Rows that verified drafts.\n"
                "# TYPE cinfer_spec_verify_rows_total counter\n"
                "cinfer_spec_verify_rows_total %ld\n",
                s->drafted, s->accepted, s->rounds);
}

void serve_spec_free(struct serve *sv)
{
    tok_free(sv->draft_tk);
    model_free(sv->draft);
    sv->draft_tk = NULL;
    sv->draft = NULL;
}
