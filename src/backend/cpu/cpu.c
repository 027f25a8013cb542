/* cpu.c — placeholder; the CPU backend lands with its kernels. */
#include "backend/cpu/cpu.h"

struct be *be_cpu_new(const struct be_config *cfg, struct cerr *e)
{
    (void)cfg;
    cerr_set(e, CERR_UNSUPPORTED, "the CPU backend is not built yet");
    return NULL;
}
