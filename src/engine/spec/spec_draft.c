/* spec_draft.c — the two-model proposer (spec.h, kind two-model). */
#include <stdlib.h>

#include "engine/spec/spec_int.h"

int spec_draft_new(struct spec *s, struct cerr *e)
{
    (void)s;
    return cerr_set(e, CERR_INVALID, "--draft-kind two-model is not available yet");
}

void spec_draft_free(struct spec *s) { (void)s; }

int spec_draft_propose(struct spec *s, struct spec_req *q, const int32_t *t, int n, int max,
                       int32_t *out)
{
    (void)s, (void)q, (void)t, (void)n, (void)max, (void)out;
    return 0;
}

void spec_draft_rollback(struct spec *s, struct spec_req *q, int n_valid)
{
    (void)s, (void)q, (void)n_valid;
}

void spec_draft_release(struct spec *s, struct spec_req *q) { (void)s, (void)q; }
