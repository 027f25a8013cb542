/* step_prof.h — where a decode step's time goes, for speculation's device runs (off unless
 * CINFER_STEP_PROF is set): per class of step (plain, verify, burst, with a prompt chunk)
 * and per step size in tokens, the steps, their mean and least time, and the host's gap
 * before the step (the engine's own work between two forwards: sampling, verifying,
 * planning, drafting). The summary goes to the log when the engine stops
 * (CINFER_STEP_PROF=1), or to PATH.<pid>.txt (CINFER_STEP_PROF=PATH; the CUDA backend adds
 * its graph counters to the same file, cuda_graph.cu).
 *
 * Engine thread only. Measuring costs two clock reads a step; nothing is allocated after
 * step_prof_new.
 */
#ifndef CINFER_ENGINE_SPEC_STEP_PROF_H
#define CINFER_ENGINE_SPEC_STEP_PROF_H

enum step_class {
    STEP_PLAIN = 0, /* decode rows only, no drafts, the host waits for the step */
    STEP_VERIFY,    /* decode rows, some with drafts */
    STEP_BURST,     /* a step of a decode burst (queued behind the one before it) */
    STEP_PROMPT,    /* a prompt chunk in the step */
    STEP_CLASSES
};

struct step_prof;

/* NULL (profiling off, or out of memory) unless CINFER_STEP_PROF is set; label names the
 * configuration in the summary (e.g. the draft kind). */
struct step_prof *step_prof_new(const char *label);
/* Writes the summary (see above) and frees p. NULL is a no-op. */
void step_prof_free(struct step_prof *p);
/* A step of class cls with n_tok tokens (drafts: its draft tokens) ran from t0 to t1
 * (seconds, clock_now_s). For a burst step t0 is when the step before it ended (its time is
 * the device's step time, no host gap in between). The gap counted is t0 minus the end of
 * the step before (gaps over a second are idle time, not counted). NULL p: no-op. */
void step_prof_step(struct step_prof *p, int cls, int n_tok, int drafts, double t0, double t1);

#endif
