// The folded path's device pieces (cuda_lora_mm.cuh: shrink items as the grid's first
// blocks, the B slab, t gathered after the counter, the epilogue's delta) run on the CPU
// against the two-launch path (cu_lk_run): every output bit for bit, rows of no group
// untouched, both slots of a GLU tile (gate, up), the counters back at zero after each call.
// With CINFER_CUDA_LORA_FOLD=4 (cu_lkm.pre): the shrink as its own launch (k_lk_shrink_pre)
// before a grid of tiles only, which gather t without counters.
// With CINFER_CUDA_LORA_FOLD=6 (cuda_lora_mm.cuh level 6): the shrink run by a producer
// grid's trailing host blocks (lkh_host_block: they wait for the producer's tile blocks,
// lkh_tile_done), then the call's tiles gather t (cu_lkm.pre 3, no shrink launch); the
// counters back at zero. (Here the call's cu_lkm_prep runs before the producer grid: the
// emulator's scratch garbles the partials at every request; the backend's does not.)
// With CINFER_CUDA_LORA_FOLD=8 (cuda_lora_mm.cuh level 8): the slices (lk8_slice) in a first
// launch (the emulator runs blocks one after another, so a tile block would wait forever for
// a later slice block), then the tiles gather from the accumulators (lk8_gather) and add the
// deltas (lk8_add; with a norm: x * gamma in the slices and the row's 1/rms in the add, as
// the chained projection does): within 1e-5 of the two-launch path (fixed point: not its
// bits), each row equal bit for bit to the same row run alone (no row depends on another),
// rows of no group untouched, the counts in the accumulators complete.
// The projection itself (k_sg's tensor-core loop) is not emulated: the base values are y's.
#include "emu_gen.cpp"
#include <random>
static std::mt19937 rng(7);
static float rnd() { return std::uniform_real_distribution<float>(-1, 1)(rng); }
struct term { int rank, dt; float scale; std::vector<uint16_t> a16, b16; std::vector<float> a32, b32; };
static term mk(int rank, int dt, int K, int M)
{
    term t; t.rank = rank; t.dt = dt; t.scale = 0.5f + rnd() * 0.25f;
    if (dt == DT_F32) {
        t.a32.resize((size_t)rank * K); t.b32.resize((size_t)rank * M);
        for (auto &v : t.a32) v = rnd();
        for (auto &v : t.b32) v = rnd();
    } else { /* random 16-bit patterns of small normal values */
        t.a16.resize((size_t)rank * K); t.b16.resize((size_t)rank * M);
        for (auto &v : t.a16) v = (uint16_t)((rng() & 0x8000) | (dt == DT_BF16 ? 0x3c00 + (rng() & 0x3ff) : 0x3000 + (rng() & 0xfff)));
        for (auto &v : t.b16) v = (uint16_t)((rng() & 0x8000) | (dt == DT_BF16 ? 0x3c00 + (rng() & 0x3ff) : 0x3000 + (rng() & 0xfff)));
    }
    return t;
}
static const void *ta(const term &t) { return t.dt == DT_F32 ? (const void *)t.a32.data() : (const void *)t.a16.data(); }
static const void *tb(const term &t) { return t.dt == DT_F32 ? (const void *)t.b32.data() : (const void *)t.b16.data(); }
static struct cu_lkm g_L;
static struct cu_lkh g_H;
/* fold 6: a producer grid without a projection: g_H.tiles tile blocks that only count
 * themselves finished, then the host blocks */
static void k_emu_host()
{
    if ((int)blockIdx.x >= g_H.tiles) {
        lkh_host_block(g_H, (int)blockIdx.x - g_H.tiles);
        return;
    }
    lkh_tile_done(g_H);
}
static float *g_y[3];
static int g_tiles[4], g_M[3], g_nw, g_n, g_glu;
/* fold 8: the slices' x (the projection's: x, or x * gamma with a norm) and each row's
 * multiplier of the delta (1, or 1/rms) */
static const float *g_x8;
static const float *g_mul8;
static void k_emu_slice8()
{
    lk8_slice(g_L, g_x8, g_L.d.K, (int)blockIdx.x);
}
/* the fold kernel's structure without the projection: shrink blocks, then 16-output tiles */
static void k_emu_fold()
{
    const struct cu_lkm &L = g_L;
    if ((int)blockIdx.x < L.S) {
        lkm_shrink_block(L, (int)blockIdx.x);
        return;
    }
    static struct lkm_smem sm;
    const int tile = (int)blockIdx.x - L.S;
    int wi = 0;
    while (wi + 1 < g_nw && tile >= g_tiles[wi + 1])
        wi++;
    const int row0 = (tile - g_tiles[wi]) * 16, M = g_M[wi];
    int lp = L.pw[wi], lq = -1, lqb = 0;
    if (g_glu)
        lp = L.pw[0], lq = L.pw[1], lqb = lp >= 0 ? L.rst[lp] : 0;
    auto rowf = [row0](int r) { return row0 + r; };
    lkm_load_b(L, lp, rowf, M, 0, &sm);
    if (g_glu)
        lkm_load_b(L, lq, rowf, M, lqb, &sm);
    __syncthreads();
    /* every emulated warp gathers (the shim's warp exchanges are block-wide), so each counts
     * as a unit: g_L.units below */
    if (L.pre == 4)
        lk8_gather(L, lp, g_glu ? lq : -1, 0, g_n, &sm);
    else if (L.pre == 1 || L.pre == 3)
        lkm_gather_pre(L, lp, g_glu ? lq : -1, 0, g_n, &sm);
    else
        lkm_gather(L, lp, g_glu ? lq : -1, 0, g_n, &sm);
    __syncthreads();
    const int t = threadIdx.x;
    if (t < 16 * g_n) {
        const int cc = t / 16, r = t % 16;
        float *y0 = g_y[g_glu ? 0 : wi] + (size_t)cc * M + row0 + r;
        if (L.pre == 4)
            *y0 = lk8_add(L, lp, &sm, 0, 0, cc, r, *y0, g_mul8[cc]);
        else
            *y0 = lkm_add(L, lp, &sm, 0, 0, cc, r, *y0);
        if (g_glu) {
            float *y1 = g_y[1] + (size_t)cc * M + row0 + r;
            if (L.pre == 4)
                *y1 = lk8_add(L, lq, &sm, 1, lqb, cc, r, *y1, g_mul8[cc]);
            else
                *y1 = lkm_add(L, lq, &sm, 1, lqb, cc, r, *y1);
        }
    }
}
/* Fold 8 on call d (outputs y*, values y0 before, yr the two-launch path's after). */
static int fold8(cu_lk d, const std::vector<float> &x, const std::vector<float> &nw, int use_norm,
                 int K, int N, int NP, int glu, const int *M, const std::vector<float> *y0,
                 const std::vector<float> *yr, const std::vector<std::vector<int32_t>> &rows,
                 int tiles)
{
    int bad = 0;
    std::vector<float> xs((size_t)N * K), mul(N, 1.0f);
    for (int r = 0; r < N; r++) { /* the chained projection's x * gamma and 1/rms */
        float ss = 0.0f;
        for (int k = 0; k < K; k++)
            ss += x[(size_t)r * K + k] * x[(size_t)r * K + k];
        if (use_norm)
            mul[r] = 1.0f / sqrtf(ss / (float)K + 1e-5f);
        for (int k = 0; k < K; k++)
            xs[(size_t)r * K + k] = use_norm ? x[(size_t)r * K + k] * nw[k] : x[(size_t)r * K + k];
    }
    std::vector<unsigned long long> acc(LK8_SLOT);
    /* run: every group (one = -1) or one group alone; returns the outputs */
    auto run = [&](int one, std::vector<float> *yo) {
        cu_lk e = d;
        if (one >= 0) {
            e.g[0] = d.g[one];
            e.n_grp = 1;
        }
        std::fill(acc.begin(), acc.end(), 0ull);
        e.acc8 = acc.data();
        float *ys[3];
        int ms[3] = {M[0], M[1], NP > 2 ? M[2] : 0};
        for (int p = 0; p < 3; p++) {
            yo[p] = p < NP ? y0[p] : std::vector<float>();
            ys[p] = p < NP ? yo[p].data() : NULL;
            e.y[p] = ys[p];
        }
        struct cu_be cb; memset(&cb, 0, sizeof cb);
        cb.n_sm = 132;
        if (cu_lkm_prep(&cb, &e, ys, ms, NP, 1, 1 << 20, &g_L) || g_L.pre != 4)
            return -1;
        g_x8 = xs.data(), g_mul8 = mul.data();
        cu_launch(&cb, k_emu_slice8, dim3((unsigned)g_L.S8), dim3(256), 0);
        for (int e2 = 0; e2 < g_L.R; e2++) /* every pair's count complete */
            for (int j = 0; j < e.g[g_L.eg[e2]].T; j++)
                if ((long long)((acc[(size_t)e2 * g_L.Tmax + j] + (1ull << 55)) >> 56) != g_L.S8)
                    return -2;
        for (int p = 0; p < NP; p++) g_y[p] = yo[p].data(), g_M[p] = M[p];
        g_nw = glu ? 1 : NP, g_n = N, g_glu = glu;
        cu_launch(&cb, k_emu_fold, dim3((unsigned)tiles), dim3(256), 0);
        return g_L.S8;
    };
    std::vector<float> yf[3];
    const int S = run(-1, yf);
    if (S < 0) {
        printf("fold 8 %s: %s\n", glu ? "glu" : "qkv", S == -1 ? "prep declined" : "a count is short");
        return 1;
    }
    double worst = 0.0;
    int changed = 0, alone = 0;
    for (int p = 0; p < NP; p++) {
        for (size_t i = 0; i < yf[p].size(); i++) {
            const double dlt = fabs((double)yr[p][i] - (double)y0[p][i]);
            const double er = fabs((double)yf[p][i] - (double)yr[p][i]) / (1.0 + dlt);
            worst = er > worst ? er : worst;
        }
        for (int r : {1, 4}) if (memcmp(&yf[p][(size_t)r * M[p]], &y0[p][(size_t)r * M[p]], (size_t)M[p] * 4)) changed++;
    }
    for (int gi = 0; gi < d.n_grp; gi++) { /* each group alone: its rows' bits */
        std::vector<float> ya[3];
        if (run(gi, ya) < 0) { alone++; continue; }
        for (int p = 0; p < NP; p++)
            for (int r : rows[gi])
                if (memcmp(&ya[p][(size_t)r * M[p]], &yf[p][(size_t)r * M[p]], (size_t)M[p] * 4)) alone++;
    }
    const int ok = worst < 1e-5 && !changed && !alone;
    printf("fold 8 %s%s: K %d, %d slices of %d columns: worst |diff| / (1 + |delta|) vs the two-launch path %.2g, rows of no group %s, each group alone %s: %s\n",
           glu ? "glu" : "qkv", use_norm ? " norm" : "", K, S, g_L.kc8, worst, changed ? "CHANGED" : "untouched",
           alone ? "DIFFERS" : "bit-identical", ok ? "ok" : "FAIL");
    return !ok + bad;
}

int main(int argc, char **argv)
{
    const int K = argc > 1 ? atoi(argv[1]) : 1100, N = 8;
    int bad = 0;
    for (int glu = 0; glu < 2; glu++)
        for (int use_norm = 0; use_norm < 2; use_norm++) {
            const int NP = glu ? 2 : 3;
            const int M[3] = {glu ? 64 : 80, glu ? 64 : 32, 32};
            std::vector<float> x((size_t)N * K), nw(K);
            for (auto &v : x) v = rnd();
            for (auto &v : nw) v = 0.5f + rnd();
            const float *norm = use_norm ? nw.data() : NULL;
            /* groups: rows 1 and 4 have none; ranks cross the 16-rank shrink tiles */
            std::vector<std::vector<int32_t>> rows = {{0, 5, 7}, {2}, {6, 3}};
            std::vector<std::vector<std::pair<int, int>>> spec = {{{5, DT_F32}, {20, DT_BF16}}, {{16, DT_F16}}, {{1, DT_F32}, {9, DT_BF16}, {2, DT_F16}}};
            const int NG = 3;
            std::vector<term> T[3][3];
            for (int p = 0; p < NP; p++) for (int g = 0; g < NG; g++) for (auto &s : spec[g]) T[p][g].push_back(mk(s.first, s.second, K, M[p]));
            std::vector<float> y0[3], yr[3], yf[3];
            for (int p = 0; p < NP; p++) { y0[p].resize((size_t)N * M[p]); for (auto &v : y0[p]) v = rnd(); yr[p] = y0[p]; yf[p] = y0[p]; }
            auto grp = [&](int p, int g) { be_lora_grp G; memset(&G, 0, sizeof G); G.rows = rows[g].data(); G.n_rows = (int)rows[g].size(); G.n_terms = (int)T[p][g].size();
                for (int k = 0; k < G.n_terms; k++) G.t[k] = be_lora_term{ta(T[p][g][k]), tb(T[p][g][k]), T[p][g][k].rank, T[p][g][k].dt, T[p][g][k].scale}; return G; };
            be_lora_grp G[3][3];
            for (int p = 0; p < NP; p++) for (int g = 0; g < NG; g++) G[p][g] = grp(p, g);
            auto build = [&](cu_lk &d, std::vector<float> *y) {
                memset(&d, 0, sizeof d);
                cu_lk_first(&d, y[0].data(), x.data(), norm, 1e-5f, K, M[0], G[0], NG);
                for (int p = 1; p < NP; p++)
                    if (cu_lk_merge(&d, y[p].data(), x.data(), norm, 1e-5f, K, M[p], G[p], NG)) { printf("merge failed\n"); exit(1); }
            };
            struct cu_be cb0; memset(&cb0, 0, sizeof cb0);
            cb0.n_sm = 132;
            cu_lk dr; build(dr, yr);
            cu_lk_run(&cb0.base, &dr); /* the two-launch reference */
            cu_lk df; build(df, yf);
            float *ys[3] = {yf[0].data(), yf[1].data(), NP > 2 ? yf[2].data() : NULL};
            int ms[3] = {M[0], M[1], NP > 2 ? M[2] : 0};
            g_tiles[0] = 0;
            for (int p = 0; p < (glu ? 1 : NP); p++) g_tiles[p + 1] = g_tiles[p] + M[p] / 16;
            const int tiles = g_tiles[glu ? 1 : NP];
            if (cu_lkm_on() == 8) { /* fold 8: its own checks (below), then the next case */
                bad += fold8(df, x, nw, use_norm, K, N, NP, glu, M, y0, yr, rows, tiles);
                continue;
            }
            if (cu_lkm_prep(&cb0, &df, ys, ms, NP, 1, tiles, &g_L)) { printf("prep declined\n"); return 1; }
            g_L.units = g_L.nsv + tiles * 8; /* (8 gathering warps a tile block here) */
            if (cu_lkm_on() == 6) { /* the shrink in a producer's host blocks, then no launch */
                if (cu_lkh_prep(&cb0, &df, 1, 3, &g_H)) { printf("host prep declined\n"); return 1; }
                for (size_t i = 0; i < (size_t)g_L.ksplit * g_L.R * g_L.Tmax; i++)
                    g_L.part[i] = NAN;
                if (g_H.part != g_L.part || g_H.R != g_L.R || g_H.Tmax != g_L.Tmax || g_H.ksplit != g_L.ksplit) { printf("host layout differs\n"); bad++; }
                if (!getenv("EMU_SKIP_SHRINK")) /* (=1: the check must then fail) */
                    cu_launch(&cb0, k_emu_host, dim3((unsigned)(g_H.tiles + g_H.S)), dim3(256), 0);
                g_L.pre = 3;
            } else if (g_L.pre) { /* CINFER_CUDA_LORA_FOLD=4 or 5: the shrink as its own launch first;
                            * the reference's partials (same scratch) poisoned before it */
                for (size_t i = 0; i < (size_t)g_L.ksplit * g_L.R * g_L.Tmax; i++)
                    g_L.part[i] = NAN;
                if (!getenv("EMU_SKIP_SHRINK")) /* (=1: the check must then fail) */
                    cu_lk_shrink_pre(&cb0, &g_L);
            }
            for (int p = 0; p < NP; p++) g_y[p] = yf[p].data(), g_M[p] = M[p];
            g_nw = glu ? 1 : NP, g_n = N, g_glu = glu;
            cu_launch(&cb0, k_emu_fold, dim3((unsigned)(g_L.S + tiles)), dim3(256), 0);
            for (int i = 0; i < 64; i++) if (((unsigned *)emu_scratch)[i]) { printf("counter %d = %u after the fold\n", i, ((unsigned *)emu_scratch)[i]); bad++; }
            int diff = 0, changed = 0;
            for (int p = 0; p < NP; p++) {
                if (memcmp(yf[p].data(), yr[p].data(), yf[p].size() * 4)) diff++;
                for (int r : {1, 4}) if (memcmp(&yf[p][(size_t)r * M[p]], &y0[p][(size_t)r * M[p]], (size_t)M[p] * 4)) changed++;
                for (int r : {0, 2, 3}) if (!memcmp(&yf[p][(size_t)r * M[p]], &y0[p][(size_t)r * M[p]], (size_t)M[p] * 4)) changed++;
            }
            printf("fold%s %s%s: %d shrink blocks, %d tiles: %s\n", g_L.pre == 1 ? " 4 (shrink launch first)" : g_L.pre == 2 ? " 5 (shrink launch first, counters)" : g_L.pre == 3 ? " 6 (shrink in a producer's host blocks)" : "", glu ? "glu" : "qkv", use_norm ? " norm" : "", g_L.S, tiles,
                   diff || changed ? "DIFFERS from the two-launch path" : "bit-identical to the two-launch path");
            bad += diff + changed;
        }
    printf("bad %d\n", bad);
    return bad != 0;
}
