/* step_prof.c — see step_prof.h: per class and size, a decode step's time and the host's gap
 * before it. */
#include "engine/spec/step_prof.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"

#define PROF_SIZES 65 /* sizes 1..64; larger steps count at 64 */

struct prof_cell {
    long n, drafts;
    double sum, min, gap;
    long n_gap;
};

struct step_prof {
    char label[64];
    char path[512]; /* "" = the log */
    double last_end;
    struct prof_cell c[STEP_CLASSES][PROF_SIZES];
};

static const char *const CLASS_NAME[STEP_CLASSES] = {"plain", "verify", "burst", "prompt"};

struct step_prof *step_prof_new(const char *label)
{
    const char *v = getenv("CINFER_STEP_PROF");
    if (!v || !*v || !strcmp(v, "0"))
        return NULL;
    struct step_prof *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    snprintf(p->label, sizeof p->label, "%s", label ? label : "");
    if (strcmp(v, "1") != 0)
        snprintf(p->path, sizeof p->path, "%s.%ld.txt", v, (long)getpid());
    return p;
}

void step_prof_step(struct step_prof *p, int cls, int n_tok, int drafts, double t0, double t1)
{
    if (!p || cls < 0 || cls >= STEP_CLASSES || n_tok < 1)
        return;
    struct prof_cell *c = &p->c[cls][n_tok < PROF_SIZES ? n_tok : PROF_SIZES - 1];
    double dt = t1 - t0;
    if (c->n == 0 || dt < c->min)
        c->min = dt;
    c->n++;
    c->sum += dt;
    c->drafts += drafts;
    if (cls != STEP_BURST && p->last_end > 0 && t0 - p->last_end < 1.0 && t0 >= p->last_end) {
        c->gap += t0 - p->last_end;
        c->n_gap++;
    }
    p->last_end = t1;
}

void step_prof_free(struct step_prof *p)
{
    if (!p)
        return;
    FILE *f = p->path[0] ? fopen(p->path, "a") : NULL;
    char line[256];
    snprintf(line, sizeof line, "step prof [%s]: class tokens: steps, mean ms, min ms, host gap "
             "before ms, drafts a step", p->label);
    if (f)
        fprintf(f, "%s\n", line);
    else
        log_info("%s", line);
    for (int k = 0; k < STEP_CLASSES; k++) {
        long n = 0;
        double sum = 0, gap = 0;
        long ng = 0;
        for (int s = 1; s < PROF_SIZES; s++) {
            const struct prof_cell *c = &p->c[k][s];
            if (!c->n)
                continue;
            n += c->n, sum += c->sum, gap += c->gap, ng += c->n_gap;
            snprintf(line, sizeof line, "  %-6s %2d%s: %6ld, %.3f, %.3f, %.3f, %.2f",
                     CLASS_NAME[k], s, s == PROF_SIZES - 1 ? "+" : "", c->n, 1e3 * c->sum / c->n,
                     1e3 * c->min, c->n_gap ? 1e3 * c->gap / c->n_gap : 0.0,
                     (double)c->drafts / c->n);
            if (f)
                fprintf(f, "%s\n", line);
            else
                log_info("%s", line);
        }
        if (!n)
            continue;
        snprintf(line, sizeof line, "  %-6s all: %6ld steps, %.1f ms in all, %.3f ms a step, "
                 "gap %.3f ms", CLASS_NAME[k], n, 1e3 * sum, 1e3 * sum / n,
                 ng ? 1e3 * gap / ng : 0.0);
        if (f)
            fprintf(f, "%s\n", line);
        else
            log_info("%s", line);
    }
    if (f)
        fclose(f);
    free(p);
}
