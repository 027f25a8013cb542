/* cuda_lora_sg.cu — the op lora on the GPU as two launches per recorded call (SGMV-style):
 * shrink t = x a^T, then expand y += (t * scale) b^T, for every row, group and projection
 * of a struct cu_lk (cuda_lora.cuh) at once.
 *
 * Shrink: one block per (row, tile of CU_LK_TJ of its group's ranks, chunk of LK_KC of K).
 * Each thread walks its chunk's columns (stride LK_ST, ascending) with one accumulator per
 * rank of the tile (one x load feeds LK_TJ FMAs), then the block sums lane order (warp
 * butterfly) and warp order (ascending) and writes the chunk's partial to scratch. The K
 * chunks are fixed by K alone.
 * Expand: one block per (LK_MT outputs of one projection, up to LK_RC rows of one group):
 * t of its rows = the chunks' partials summed in chunk order, times the term's scale
 * (shared memory); each thread then sums t_j * bt[j][m] over the terms and ranks in order
 * for its output m of every row (one bt load feeds LK_RC FMAs) and adds it to y.
 * A row's arithmetic depends only on its own row, its group's terms and K: batch
 * invariant whatever the step's other rows, groups or the call's merged projections.
 * Rows of a call beyond the scratch budget (LK_PART_MAX bytes of partials) run as more
 * launch pairs over row slices of the groups; that changes no row's arithmetic.
 */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_lora_mm.cuh"

enum {
    LK_MT = 128,         /* outputs (threads) per expand block */
    LK_RC = 8,           /* rows per expand block */
    LK_PART_MAX = 64 << 20,
};

/* Shrink: one block per item (cuda_lora_mm.cuh lk_shrink_item). */
__global__ void __launch_bounds__(LK_ST)
    k_lk_shrink(const __grid_constant__ struct cu_lk d, float *part, int R, int Tmax)
{
    cu_pdl_trigger(); /* the next kernel may launch; it waits for this one to finish */
    cu_pdl_wait();
    lk_shrink_item<1>(d, part, R, Tmax, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, 0);
}

/* Level 4's shrink (CINFER_CUDA_LORA_FOLD=4, cuda_lora_mm.cuh cu_lkm.pre): the same items,
 * but it lets the next kernel (the projection that adds the deltas) launch only once its
 * own wait has returned, so that projection may read x, the output of the kernel before
 * this one, before its PDL wait. */
__global__ void __launch_bounds__(LK_ST)
    k_lk_shrink_pre(const __grid_constant__ struct cu_lk d, float *part, int R, int Tmax)
{
    cu_pdl_wait();
    cu_pdl_trigger(); /* after the wait: the kernels before this one have finished */
    lk_shrink_item<1>(d, part, R, Tmax, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, 0);
}

__global__ void __launch_bounds__(LK_MT)
    k_lk_expand(const __grid_constant__ struct cu_lk d, const float *part, int R, int Tmax,
                int ksplit, int rsmax)
{
    cu_pdl_trigger(); /* the next kernel may launch; it waits for this one to finish */
    cu_pdl_wait();
    extern __shared__ float s_t[]; /* (LK_RC, rsmax) */
    int sl = blockIdx.x, p = 0;
    while (p + 1 < d.n_proj && sl >= (d.M[p] + LK_MT - 1) / LK_MT)
        sl -= (d.M[p] + LK_MT - 1) / LK_MT, p++;
    int c = blockIdx.y, gi = 0, base = 0;
    while (gi + 1 < d.n_grp && c >= (d.g[gi].n_rows + LK_RC - 1) / LK_RC)
        c -= (d.g[gi].n_rows + LK_RC - 1) / LK_RC, base += d.g[gi].n_rows, gi++;
    const struct cu_lk_grp &g = d.g[gi];
    if (g.nt[p] == 0) /* (block-uniform) */
        return;
    const int r0 = c * LK_RC, nr = g.n_rows - r0 < LK_RC ? g.n_rows - r0 : LK_RC;
    const int tb = g.t0[p], te = g.t0[p] + g.nt[p];
    const int M = d.M[p], m = sl * LK_MT + threadIdx.x;
    float yv[LK_RC]; /* y's current values, loaded while the partials are summed */
#pragma unroll
    for (int r = 0; r < LK_RC; r++)
        yv[r] = r < nr && m < M ? d.y[p][(int64_t)g.rows[r0 + r] * M + m] : 0.0f;
    int rs = 0;
    for (int k = tb; k < te; k++)
        rs += d.t[k].rank;
    for (int idx = threadIdx.x; idx < nr * rs; idx += LK_MT) {
        const int r = idx / rs, jr = idx - r * rs;
        int j = jr, k = tb;
        while (j >= d.t[k].rank)
            j -= d.t[k].rank, k++;
        const float *pp = part + (int64_t)(base + r0 + r) * Tmax + d.t[k].roff + j;
        const int64_t zs = (int64_t)R * Tmax;
        float s = pp[0];
        for (int z0 = 1; z0 < ksplit; z0 += 8) { /* 8 loads out, then the adds in order */
            float v[8];
#pragma unroll
            for (int u = 0; u < 8; u++)
                v[u] = z0 + u < ksplit ? pp[(z0 + u) * zs] : 0.0f;
#pragma unroll
            for (int u = 0; u < 8; u++)
                if (z0 + u < ksplit)
                    s = __fadd_rn(s, v[u]);
        }
        s_t[r * rsmax + jr] = __fmul_rn(s, d.t[k].scale);
    }
    __syncthreads();
    if (m >= M)
        return;
    float acc[LK_RC];
#pragma unroll
    for (int r = 0; r < LK_RC; r++)
        acc[r] = 0.0f;
    int cj = 0;
    for (int k = tb; k < te; k++) {
        const struct cu_lk_term &t = d.t[k];
        const int dtk = t.dtype;
        for (int j0 = 0; j0 < t.rank; j0 += 16) { /* 16 ranks' loads out, then their FMAs */
            uint32_t raw[16];
#pragma unroll
            for (int u = 0; u < 16; u++)
                raw[u] = j0 + u < t.rank ? lk_raw(t.bt, dtk, (int64_t)(j0 + u) * M + m) : 0u;
#pragma unroll
            for (int u = 0; u < 16; u++) {
                if (j0 + u < t.rank) { /* (no break: the arrays stay in registers) */
                    const float bv = lk_cvt(raw[u], dtk);
                    const float *tv = s_t + cj + j0 + u;
#pragma unroll
                    for (int r = 0; r < LK_RC; r++)
                        if (r < nr)
                            acc[r] = __fmaf_rn(tv[r * rsmax], bv, acc[r]);
                }
            }
        }
        cj += t.rank;
    }
#pragma unroll
    for (int r = 0; r < LK_RC; r++)
        if (r < nr)
            d.y[p][(int64_t)g.rows[r0 + r] * M + m] = __fadd_rn(yv[r], acc[r]);
}

/* ---- host side ---- */

int cu_lora_mode(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("CINFER_CUDA_LORA");
        v = e && !strcmp(e, "v1") ? CU_LK_V1 : e && !strcmp(e, "fused") ? CU_LK_FUSED : CU_LK_SG;
    }
    return v;
}

int cu_lora_v1(void)
{
    return cu_lora_mode() == CU_LK_V1;
}

int cu_lora_norm_on(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("CINFER_CUDA_LORA_NORM");
        v = !cu_lora_v1() && !(e && !strcmp(e, "0"));
    }
    return v;
}

static int n_terms_of(const struct be_lora_grp *g)
{
    return g->n_terms < BE_LORA_MAX_TERMS ? g->n_terms : BE_LORA_MAX_TERMS;
}

int cu_lk_first(struct cu_lk *d, float *y, const float *x, const float *norm, float eps, int K,
                int M, const struct be_lora_grp *g, int n_grp)
{
    d->x = x, d->y[0] = y, d->K = K, d->M[0] = M, d->n_proj = 1;
    d->norm = norm, d->eps = norm ? eps : 0.0f;
    int i = 0;
    for (; i < n_grp && i < CU_LK_GRP; i++) {
        int nt = n_terms_of(&g[i]);
        if (i > 0 && d->n_t + nt > CU_LK_T)
            break;
        struct cu_lk_grp *dg = &d->g[i];
        dg->rows = g[i].rows;
        dg->n_rows = g[i].n_rows;
        dg->t0[0] = (uint8_t)d->n_t;
        dg->nt[0] = (uint8_t)nt;
        for (int k = 0; k < nt; k++) {
            struct cu_lk_term *t = &d->t[d->n_t++];
            t->a = g[i].t[k].a, t->bt = g[i].t[k].bt, t->scale = g[i].t[k].scale;
            t->rank = (uint16_t)g[i].t[k].rank, t->dtype = (uint8_t)g[i].t[k].dtype;
            t->roff = dg->T;
            dg->T = (uint16_t)(dg->T + t->rank);
        }
    }
    d->n_grp = i;
    return i;
}

int cu_lk_merge(struct cu_lk *d, float *y, const float *x, const float *norm, float eps, int K,
                int M, const struct be_lora_grp *g, int n_grp)
{
    if (d->x != x || d->K != K || d->n_proj >= CU_LK_PROJ || d->n_grp != n_grp ||
        (const float *)y == x || d->norm != norm || (norm && d->eps != eps))
        return -1;
    for (int p = 0; p < d->n_proj; p++)
        if (d->y[p] == y)
            return -1;
    int need = 0;
    for (int i = 0; i < n_grp; i++) {
        if (d->g[i].rows != g[i].rows || d->g[i].n_rows != g[i].n_rows)
            return -1;
        int T = d->g[i].T;
        for (int k = 0; k < n_terms_of(&g[i]); k++)
            T += g[i].t[k].rank;
        if (T > 65535)
            return -1;
        need += n_terms_of(&g[i]);
    }
    if (d->n_t + need > CU_LK_T)
        return -1;
    const int p = d->n_proj++;
    d->y[p] = y, d->M[p] = M;
    for (int i = 0; i < n_grp; i++) {
        struct cu_lk_grp *dg = &d->g[i];
        dg->t0[p] = (uint8_t)d->n_t;
        dg->nt[p] = (uint8_t)n_terms_of(&g[i]);
        for (int k = 0; k < dg->nt[p]; k++) {
            struct cu_lk_term *t = &d->t[d->n_t++];
            t->a = g[i].t[k].a, t->bt = g[i].t[k].bt, t->scale = g[i].t[k].scale;
            t->rank = (uint16_t)g[i].t[k].rank, t->dtype = (uint8_t)g[i].t[k].dtype;
            t->roff = dg->T;
            dg->T = (uint16_t)(dg->T + t->rank);
        }
    }
    return 0;
}

/* Bytes of partials one launch pair may use: LK_PART_MAX, or CINFER_CUDA_LORA_PART_MAX (a
 * test setting: a small value makes every call run as row slices). Read once. */
static size_t lk_part_max(void)
{
    static size_t v = 0;
    if (v == 0) {
        const char *e = getenv("CINFER_CUDA_LORA_PART_MAX");
        v = e && atol(e) > 0 ? (size_t)atol(e) : (size_t)LK_PART_MAX;
    }
    return v;
}

/* One shrink + expand pair over all of d's rows (their partials fit the budget). */
static void lk_launch(struct cu_be *cb, const struct cu_lk *d)
{
    int R = 0, Tmax = 0, rsmax = 0, chunks = 0, slices = 0;
    for (int i = 0; i < d->n_grp; i++) {
        R += d->g[i].n_rows;
        chunks += (d->g[i].n_rows + LK_RC - 1) / LK_RC;
        Tmax = d->g[i].T > Tmax ? d->g[i].T : Tmax;
        for (int p = 0; p < d->n_proj; p++) {
            int rs = 0;
            for (int k = d->g[i].t0[p]; k < d->g[i].t0[p] + d->g[i].nt[p]; k++)
                rs += d->t[k].rank;
            rsmax = rs > rsmax ? rs : rsmax;
        }
    }
    for (int p = 0; p < d->n_proj; p++)
        slices += (d->M[p] + LK_MT - 1) / LK_MT;
    if (R == 0 || Tmax == 0 || rsmax == 0 || d->K <= 0)
        return;
    const int ksplit = (d->K + LK_KC - 1) / LK_KC;
    int declined = 0;
    char *buf = cu_lk_scratch(cb, CU_LK_HDR + (size_t)ksplit * (size_t)R * (size_t)Tmax * 4, 0,
                              &declined);
    if (!buf)
        return;
    float *part = (float *)(buf + CU_LK_HDR); /* (the fused path's counters stay) */
    dim3 gs((unsigned)R, (unsigned)((Tmax + LK_TJ - 1) / LK_TJ), (unsigned)ksplit);
    cu_launch(cb, k_lk_shrink, gs, dim3(LK_ST), 0, *d, part, R, Tmax);
    cu_after_launch(cb, "lora shrink");
    dim3 ge((unsigned)slices, (unsigned)chunks);
    size_t smem = (size_t)LK_RC * (size_t)rsmax * sizeof(float); /* <= 32 KiB: ranks <= 1024 */
    cu_launch(cb, k_lk_expand, ge, dim3(LK_MT), smem, *d, (const float *)part, R, Tmax, ksplit,
              rsmax);
    cu_after_launch(cb, "lora expand");
}

void cu_lk_run(struct be *b, const struct cu_lk *d)
{
    struct cu_be *cb = cu_be(b);
    int R = 0, Tmax = 0;
    for (int i = 0; i < d->n_grp; i++) {
        R += d->g[i].n_rows;
        Tmax = d->g[i].T > Tmax ? d->g[i].T : Tmax;
    }
    if (R == 0 || Tmax == 0 || d->K <= 0 || d->n_proj <= 0)
        return;
    if (cu_lora_mode() == CU_LK_FUSED && cu_lkf_run(b, d) == 0)
        return;
    if (d->act_y) { /* an activated call the fused kernel declined: the pairs, then the op */
        struct cu_lk e = *d;
        e.act_y = NULL;
        cu_lk_run(b, &e);
        cu_act_mul(b, d->act_y, d->y[0], d->y[1], (int64_t)d->act_rows * d->M[0], d->act);
        return;
    }
    if (d->ss_out) { /* a chained call the fused kernel declined: the pairs, then the norm's
                      * values of its rows */
        struct cu_lk e = *d;
        e.ss_out = NULL;
        cu_lk_run(b, &e);
        cu_lkf_fix(b, d);
        return;
    }
    const size_t row_bytes = (size_t)((d->K + LK_KC - 1) / LK_KC) * (size_t)Tmax * sizeof(float);
    const size_t cap = lk_part_max() / row_bytes;
    const int budget = cap < 1 ? 1 : cap > (1u << 30) ? (1 << 30) : (int)cap;
    if (R <= budget) {
        lk_launch(cb, d);
        return;
    }
    /* a long prefill: slices of the groups' rows, at most budget rows a pair */
    struct cu_lk s = *d;
    s.n_grp = 0;
    int rows = 0;
    for (int i = 0; i < d->n_grp; i++)
        for (int off = 0; off < d->g[i].n_rows;) {
            int n = d->g[i].n_rows - off;
            if (n > budget - rows)
                n = budget - rows;
            s.g[s.n_grp] = d->g[i];
            s.g[s.n_grp].rows = d->g[i].rows + off;
            s.g[s.n_grp].n_rows = n;
            s.n_grp++;
            rows += n;
            off += n;
            if (rows == budget || s.n_grp == CU_LK_GRP) {
                lk_launch(cb, &s);
                s.n_grp = 0;
                rows = 0;
            }
        }
    if (s.n_grp)
        lk_launch(cb, &s);
}

/* ---- the folded path's host side (cuda_lora_mm.cuh; the kernel is cuda_mmf_lk.cu k_sgl) ---- */

int cu_lkm_on(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("CINFER_CUDA_LORA_FOLD");
        v = cu_lora_mode() == CU_LK_SG && e && ((e[0] >= '1' && e[0] <= '6') || e[0] == '8') &&
                    !e[1]
                ? e[0] - '0'
                : 0;
    }
    return v;
}

int cu_lk8_lead(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("CINFER_CUDA_LORA_FOLD8_LEAD");
        v = e && !strcmp(e, "1");
    }
    return v;
}

int cu_lkm_prep(struct cu_be *cb, const struct cu_lk *d, float *const ys[3], const int ms[3],
                int n_w, int nvs, int tiles, struct cu_lkm *L)
{
    memset(L, 0, sizeof *L);
    if (d->act_y || d->ss_out || d->n_grp < 1 || d->n_proj < 1 || d->K <= 0 || nvs < 1 ||
        nvs > LKM_NG)
        return -1;
    L->d = *d;
    L->pw[0] = L->pw[1] = L->pw[2] = -1;
    for (int p = 0; p < d->n_proj; p++) {
        int w = 0;
        while (w < n_w && ys[w] != d->y[p])
            w++;
        if (w == n_w || ms[w] != d->M[p] || L->pw[w] >= 0)
            return -1; /* a delta the projection does not write */
        L->pw[w] = (int8_t)p;
    }
    int R = 0, Tmax = 0;
    for (int i = 0; i < d->n_grp; i++) {
        const struct cu_lk_grp *g = &d->g[i];
        if (g->n_rows <= 0 || R + g->n_rows > LKM_R)
            return -1;
        for (int r = 0; r < g->n_rows; r++)
            L->eg[R + r] = (uint8_t)i, L->ei[R + r] = (uint8_t)r;
        R += g->n_rows;
        Tmax = g->T > Tmax ? g->T : Tmax;
        for (int p = 0; p < d->n_proj; p++) {
            int rs = 0;
            for (int k = g->t0[p]; k < g->t0[p] + g->nt[p]; k++)
                rs += d->t[k].rank;
            if (rs > LKM_RS || L->rst[p] + rs > LKM_BS)
                return -1;
            L->rs[p][i] = (int16_t)rs;
            L->bo[p][i] = L->rst[p];
            L->rst[p] = (int16_t)(L->rst[p] + rs);
        }
    }
    if (Tmax == 0)
        return -1;
    const int lvl = cu_lkm_on();
    if (lvl == 8 && d->acc8 && R * Tmax <= LK8_SLOT) { /* fold 8: slices into accumulators */
        const int kc = lk8_kc(d->K, cb->n_sm), S = (d->K + kc - 1) / kc;
        if (kc <= 16 * LK8_TPP && S <= LK8_SMAX && S <= cb->n_sm && S <= tiles) {
            L->R = R, L->Tmax = Tmax;
            L->nty = (Tmax + LK_TJ - 1) / LK_TJ;
            L->nvs = nvs;
            L->units = tiles;
            L->pre = 4;
            L->acc8 = d->acc8, L->S8 = S, L->kc8 = kc;
            L->lead8 = cu_lk8_lead();
            return 0;
        }
    }
    const int ksplit = (d->K + LK_KC - 1) / LK_KC;
    const size_t pbytes = (size_t)ksplit * (size_t)R * (size_t)Tmax * sizeof(float);
    if (pbytes > (size_t)lk_part_max())
        return -1;
    /* 4: the shrink as its own launch beside the projection's loop, no counters; 5: before
     * it (the tiles wait at their start; the counters count the tiles only) */
    /* (8: a call fold 8 cannot take folds as 4) */
    const int pre = lvl == 4 || lvl == 6 || lvl == 8 ? 1 : lvl == 5 ? 2 : 0;
    /* 6: at least LKH_PART bytes, so that a host's request (cu_lkh_prep) never moves it */
    const size_t want = lvl == 6 && pbytes < (size_t)LKH_PART ? (size_t)LKH_PART : pbytes;
    int declined = 0;
    char *buf = cu_lk_scratch(cb, CU_LK_HDR + want, pre != 1, &declined);
    if (!buf)
        return declined ? -1 : -2; /* -2: out of memory, latched */
    L->part = (float *)(buf + CU_LK_HDR);
    L->cnt = (unsigned *)buf;
    L->R = R, L->Tmax = Tmax, L->ksplit = ksplit;
    L->nty = (Tmax + LK_TJ - 1) / LK_TJ;
    L->nsv = pre ? 0 : R * L->nty * ksplit;
    L->nvs = nvs;
    L->S = (L->nsv + nvs - 1) / nvs;
    L->units = L->nsv + tiles;
    L->pre = pre;
    return 0;
}

void cu_lk_shrink_pre(struct cu_be *cb, const struct cu_lkm *L)
{
    dim3 gs((unsigned)L->R, (unsigned)L->nty, (unsigned)L->ksplit);
    if (L->pre == 2) /* fold 5: the default shrink (the projection may launch at once) */
        cu_launch(cb, k_lk_shrink, gs, dim3(LK_ST), 0, L->d, L->part, L->R, L->Tmax);
    else
        cu_launch(cb, k_lk_shrink_pre, gs, dim3(LK_ST), 0, L->d, L->part, L->R, L->Tmax);
    cu_after_launch(cb, "lora shrink (fold 4)");
}

int cu_lkh_prep(struct cu_be *cb, const struct cu_lk *d, int nvs, int tiles, struct cu_lkh *H)
{
    memset(H, 0, sizeof *H);
    if (cu_lkm_on() != 6 || d->n_grp < 1 || d->n_proj < 1 || d->K <= 0 || nvs < 1 || nvs > LKM_NG ||
        tiles < 1)
        return -1;
    int R = 0, Tmax = 0; /* (as cu_lkm_prep: the same partials layout) */
    for (int i = 0; i < d->n_grp; i++) {
        if (d->g[i].n_rows <= 0 || R + d->g[i].n_rows > LKM_R)
            return -1;
        R += d->g[i].n_rows;
        Tmax = d->g[i].T > Tmax ? d->g[i].T : Tmax;
    }
    if (Tmax == 0)
        return -1;
    const int ksplit = (d->K + LK_KC - 1) / LK_KC;
    const size_t pbytes = (size_t)ksplit * (size_t)R * (size_t)Tmax * sizeof(float);
    if (pbytes > (size_t)LKH_PART || pbytes > (size_t)lk_part_max())
        return -1;
    int declined = 0;
    char *buf = cu_lk_scratch(cb, CU_LK_HDR + (size_t)LKH_PART, 1, &declined);
    if (!buf)
        return -1; /* (out of memory is latched; the call runs without host blocks) */
    H->d = *d;
    H->d.act_y = NULL, H->d.ss_out = NULL, H->d.xg_out = NULL, H->d.gnext = NULL;
    H->part = (float *)(buf + CU_LK_HDR);
    H->cnt = (unsigned *)buf;
    H->R = R, H->Tmax = Tmax, H->ksplit = ksplit;
    H->nty = (Tmax + LK_TJ - 1) / LK_TJ;
    H->nsv = R * H->nty * ksplit;
    H->nvs = nvs;
    H->S = (H->nsv + nvs - 1) / nvs;
    H->tiles = tiles;
    return 0;
}
