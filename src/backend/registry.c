/* registry.c — maps a backend name to its constructor ("cuda" only in builds that have it;
 * "auto" = cuda when this build has it and a GPU answers, else cpu). */
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#ifdef CINFER_HAVE_CUDA
#include "backend/cuda/cuda.h"
#endif

struct be *be_new(const char *name, const struct be_config *cfg, struct cerr *e)
{
    struct be_config def = {0};
    if (!cfg)
        cfg = &def;
    if (!name || strcmp(name, "cpu") == 0)
        return be_cpu_new(cfg, e);
    if (strcmp(name, "auto") == 0) {
#ifdef CINFER_HAVE_CUDA
        struct cerr ce = {0};
        struct be *b = be_cuda_new(cfg, &ce); /* no GPU or driver: the CPU, silently */
        if (b)
            return b;
#endif
        return be_cpu_new(cfg, e);
    }
    if (strcmp(name, "cuda") == 0) {
#ifdef CINFER_HAVE_CUDA
        return be_cuda_new(cfg, e);
#else
        cerr_set(e, CERR_UNSUPPORTED, "this build has no CUDA backend (configure with the CUDA "
                 "toolkit installed, -DCINFER_CUDA=ON)");
        return NULL;
#endif
    }
#ifdef CINFER_HAVE_CUDA
    cerr_set(e, CERR_INVALID, "unknown backend '%s' (this build has: auto, cpu, cuda)", name);
#else
    cerr_set(e, CERR_INVALID, "unknown backend '%s' (this build has: auto, cpu)", name);
#endif
    return NULL;
}
