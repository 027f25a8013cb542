#include "emu_gen.cpp"
#include <random>
static std::mt19937 rng(42);
static float rnd() { return std::uniform_real_distribution<float>(-1, 1)(rng); }
static uint16_t to16(float f, int dt)
{
    uint32_t u; memcpy(&u, &f, 4);
    if (dt == DT_BF16) return (uint16_t)(u >> 16);
    // f16: crude via value rounding to representable (keep small exact values)
    int e; float m = frexpf(f, &e); (void)m;
    // use a simple conversion: multiply by 1024 and round for |f|<1 subnormal-free range
    int s = f < 0; float a = fabsf(f);
    if (a < 6.2e-5f) return (uint16_t)(s << 15);
    int ex = (int)floorf(log2f(a)); float mant = a / ldexpf(1, ex) - 1; int mi = (int)lrintf(mant * 1024);
    if (mi == 1024) { mi = 0; ex++; }
    return (uint16_t)((s << 15) | ((ex + 15) << 10) | mi);
}
struct term { int rank, dt; float scale; std::vector<float> a, b; void *da, *dbt; };
static term mk(int rank, int dt, int K, int M)
{
    term t; t.rank = rank; t.dt = dt; t.scale = 0.5f + rnd() * 0.25f;
    t.a.resize((size_t)rank * K); t.b.resize((size_t)rank * M);
    size_t es = dt == DT_F32 ? 4 : 2;
    t.da = malloc(t.a.size() * es); t.dbt = malloc(t.b.size() * es);
    for (size_t i = 0; i < t.a.size(); i++) {
        float v = rnd();
        if (dt == DT_F32) ((float *)t.da)[i] = v; else { uint16_t h = to16(v, dt); ((uint16_t *)t.da)[i] = h; v = dt == DT_BF16 ? cu_bf16(h) : cu_f16(h); }
        t.a[i] = v;
    }
    for (size_t i = 0; i < t.b.size(); i++) {
        float v = rnd();
        if (dt == DT_F32) ((float *)t.dbt)[i] = v; else { uint16_t h = to16(v, dt); ((uint16_t *)t.dbt)[i] = h; v = dt == DT_BF16 ? cu_bf16(h) : cu_f16(h); }
        t.b[i] = v;
    }
    return t;
}
int main(int argc, char **argv)
{
    const int K = argc > 1 ? atoi(argv[1]) : 1100, NROW = 13, NP = 3;
    const int use_norm = argc > 2 && !strcmp(argv[2], "norm"); /* the op lora_norm */
    const float eps = 1e-5f;
    const int M[NP] = {300, 130, 129};
    std::vector<float> x((size_t)NROW * K);
    for (auto &v : x) v = rnd();
    std::vector<float> nw(K);
    for (auto &v : nw) v = 0.5f + rnd();
    const float *norm = use_norm ? nw.data() : NULL;
    std::vector<double> xr((size_t)NROW * K); /* what the deltas see: x or rmsnorm(x) */
    for (int r = 0; r < NROW; r++) {
        double ss = 0;
        for (int k = 0; k < K; k++) ss += (double)x[(size_t)r * K + k] * x[(size_t)r * K + k];
        double inv = use_norm ? 1.0 / sqrt(ss / K + eps) : 1.0;
        for (int k = 0; k < K; k++) xr[(size_t)r * K + k] = x[(size_t)r * K + k] * inv * (use_norm ? nw[k] : 1.0f);
    }
    std::vector<std::vector<int32_t>> rows = {{0, 5, 7, 12, 1, 2, 3, 4, 6, 8}, {9, 11}, {10}};
    std::vector<std::vector<std::pair<int,int>>> spec = {{{5, DT_F32}, {20, DT_BF16}}, {{3, DT_F16}}, {{1, DT_F32}, {16, DT_BF16}, {17, DT_F32}, {2, DT_F16}}};
    const int NG = 3;
    std::vector<term> T[NP][NG];
    for (int p = 0; p < NP; p++) for (int g = 0; g < NG; g++) for (auto &s : spec[g]) T[p][g].push_back(mk(s.first, s.second, K, M[p]));
    std::vector<float> y[NP], y0[NP];
    for (int p = 0; p < NP; p++) { y[p].resize((size_t)NROW * M[p]); for (auto &v : y[p]) v = rnd(); y0[p] = y[p]; }
    auto grp = [&](int p, int g) { be_lora_grp G; memset(&G, 0, sizeof G); G.rows = rows[g].data(); G.n_rows = (int)rows[g].size(); G.n_terms = (int)T[p][g].size();
        for (int k = 0; k < G.n_terms; k++) G.t[k] = be_lora_term{T[p][g][k].da, T[p][g][k].dbt, T[p][g][k].rank, T[p][g][k].dt, T[p][g][k].scale}; return G; };
    // the recorder: first(p0) then merge(p1), merge(p2)
    cu_lk d; memset(&d, 0, sizeof d);
    be_lora_grp G[NP][NG];
    for (int p = 0; p < NP; p++) for (int g = 0; g < NG; g++) G[p][g] = grp(p, g);
    int took = cu_lk_first(&d, y[0].data(), x.data(), norm, eps, K, M[0], G[0], NG);
    if (took != NG) { printf("first took %d\n", took); return 1; }
    for (int p = 1; p < NP; p++) if (cu_lk_merge(&d, y[p].data(), x.data(), norm, eps, K, M[p], G[p], NG)) { printf("merge %d failed\n", p); return 1; }
    // merge refusals
    cu_lk d2 = d;
    if (cu_lk_merge(&d2, y[0].data(), x.data(), norm, eps, K, M[0], G[0], NG) == 0) { printf("4th merge accepted\n"); return 1; }
    cu_lk d3 = d;
    d3.n_proj = 1; /* room again: a different norm must still be refused */
    if (cu_lk_merge(&d3, y[1].data(), x.data(), norm ? NULL : nw.data(), eps, K, M[1], G[1], NG) == 0) { printf("merge across norms accepted\n"); return 1; }
    if (memcmp(&d2, &d, sizeof d)) { printf("refused merge changed d\n"); return 1; }
    struct cu_be cb0; memset(&cb0, 0, sizeof cb0);
    struct be &be0 = cb0.base;
    const int fused = cu_lora_mode() == CU_LK_FUSED;
    cu_lk_run(&be0, &d);
    printf("launches %d\n", emu_launches);
    int bad = 0;
    if (fused && emu_launches != 1) { printf("fused: %d launches, want 1\n", emu_launches); bad++; }
    auto counters_zero = [&]() { for (int i = 0; i < 64; i++) if (((unsigned *)emu_scratch)[i]) { printf("counter %d = %u after a call\n", i, ((unsigned *)emu_scratch)[i]); return false; } return true; };
    if (fused && !counters_zero()) bad++;
    double maxrel = 0;
    for (int p = 0; p < NP; p++) {
        std::vector<char> touched(NROW, 0);
        for (int g = 0; g < NG; g++) for (int r : rows[g]) {
            touched[r] = 1;
            for (int m = 0; m < M[p]; m++) {
                double acc = y0[p][(size_t)r * M[p] + m], mag = fabs(acc);
                for (auto &t : T[p][g]) for (int j = 0; j < t.rank; j++) {
                    double s = 0; for (int k = 0; k < K; k++) s += xr[(size_t)r * K + k] * t.a[(size_t)j * K + k];
                    double tv = (float)s * t.scale; acc += tv * t.b[(size_t)j * M[p] + m]; mag += fabs(tv * t.b[(size_t)j * M[p] + m]);
                }
                double got = y[p][(size_t)r * M[p] + m], rel = fabs(got - acc) / (mag + 1e-6);
                if (!(rel < 1e-5)) { if (bad++ < 5) printf("p%d g%d row %d m %d got %g want %g\n", p, g, r, m, got, acc); }
                if (rel > maxrel) maxrel = rel;
            }
        }
        for (int r = 0; r < NROW; r++) if (!touched[r] && memcmp(&y[p][(size_t)r * M[p]], &y0[p][(size_t)r * M[p]], (size_t)M[p] * 4)) { printf("untouched row %d changed\n", r); bad++; }
    }
    // invariance: group 0 alone, projection 1 alone, same bits for its rows
    std::vector<float> ya = y0[1];
    cu_lk e; memset(&e, 0, sizeof e);
    cu_lk_first(&e, ya.data(), x.data(), norm, eps, K, M[1], &G[1][0], 1);
    cu_lk_run(&be0, &e);
    if (fused && !counters_zero()) bad++;
    for (int r : rows[0]) if (memcmp(&ya[(size_t)r * M[1]], &y[1][(size_t)r * M[1]], (size_t)M[1] * 4)) { printf("row %d of group 0 alone differs\n", r); bad++; }
    /* a chained call (one projection whose delta goes into a gathering ADD's output): the
     * rows it changes get xg = y * gnext and 16-output tile sums of squares; the other rows'
     * stay. Fused, and the two-launch path + the fix kernel (the fused one declining a new
     * buffer during a capture). */
    for (int via = 0; via < 2; via++) {
        const int MC = 320; /* 16-output tiles; not a multiple of the 256-output block */
        std::vector<term> TC[NG];
        for (int g = 0; g < NG; g++) for (auto &s : spec[g]) TC[g].push_back(mk(s.first, s.second, K, MC));
        std::vector<float> yc((size_t)NROW * MC), xg((size_t)NROW * MC, 7.0f), ss((size_t)NROW * MC / 16, 7.0f), gn(MC);
        for (auto &v : yc) v = rnd();
        for (auto &v : gn) v = 0.5f + rnd();
        std::vector<float> yc0 = yc;
        be_lora_grp GC[NG];
        for (int g = 0; g < NG; g++) { memset(&GC[g], 0, sizeof GC[g]); GC[g].rows = rows[g].data(); GC[g].n_rows = (int)rows[g].size(); GC[g].n_terms = (int)TC[g].size();
            for (int k = 0; k < GC[g].n_terms; k++) GC[g].t[k] = be_lora_term{TC[g][k].da, TC[g][k].dbt, TC[g][k].rank, TC[g][k].dt, TC[g][k].scale}; }
        cu_lk c; memset(&c, 0, sizeof c);
        cu_lk_first(&c, yc.data(), x.data(), norm, eps, K, MC, GC, NG);
        c.ss_out = ss.data(), c.xg_out = xg.data(), c.gnext = gn.data();
        struct cu_be cb1; memset(&cb1, 0, sizeof cb1);
        emu_capturing = via; /* 1: a fresh backend during a capture: the fused kernel declines */
        int l0 = emu_launches;
        cu_lk_run(&cb1.base, &c);
        emu_capturing = 0;
        printf("chained (%s): %d launches\n", fused && !via ? "fused" : "two-launch + fix", emu_launches - l0);
        std::vector<char> in(NROW, 0);
        for (int g = 0; g < NG; g++) for (int r : rows[g]) {
            in[r] = 1;
            for (int mm = 0; mm < MC; mm++) {
                double acc = yc0[(size_t)r * MC + mm], mag = fabs(acc);
                for (auto &t : TC[g]) for (int j = 0; j < t.rank; j++) {
                    double s2 = 0; for (int k = 0; k < K; k++) s2 += xr[(size_t)r * K + k] * t.a[(size_t)j * K + k];
                    double tv = (float)s2 * t.scale; acc += tv * t.b[(size_t)j * MC + mm]; mag += fabs(tv * t.b[(size_t)j * MC + mm]);
                }
                double got = yc[(size_t)r * MC + mm];
                if (!(fabs(got - acc) / (mag + 1e-6) < 1e-5)) { if (bad++ < 5) printf("chained row %d m %d got %g want %g\n", r, mm, got, acc); }
                if (xg[(size_t)r * MC + mm] != yc[(size_t)r * MC + mm] * gn[mm]) { if (bad++ < 5) printf("xg row %d m %d\n", r, mm); }
            }
            for (int tt = 0; tt < MC / 16; tt++) {
                double want = 0; for (int i = 0; i < 16; i++) want += (double)yc[(size_t)r * MC + tt * 16 + i] * yc[(size_t)r * MC + tt * 16 + i];
                if (!(fabs(ss[(size_t)r * (MC / 16) + tt] - want) <= 1e-5 * want)) { if (bad++ < 5) printf("ss row %d tile %d got %g want %g\n", r, tt, ss[(size_t)r * (MC / 16) + tt], want); }
            }
        }
        for (int r = 0; r < NROW; r++) if (!in[r]) {
            for (int mm = 0; mm < MC; mm++) if (xg[(size_t)r * MC + mm] != 7.0f || yc[(size_t)r * MC + mm] != yc0[(size_t)r * MC + mm]) { printf("chained: untouched row %d changed\n", r); bad++; break; }
            for (int tt = 0; tt < MC / 16; tt++) if (ss[(size_t)r * (MC / 16) + tt] != 7.0f) { printf("chained: ss of untouched row %d\n", r); bad++; break; }
        }
        if (!fused) break; /* (the two-launch path has no chained calls of its own) */
    }
    /* an activated call (gate and up, the act_mul folded in): act(gate + dg) * (up + du) for
     * the grouped rows, act(gate) * up for rows of no group (13, 14), SiLU and GELU-tanh;
     * fused, and the two-launch path + the op (the fused kernel declining) */
    for (int via = 0; via < 2; via++)
        for (int act = 0; act < 2; act++) {
            const int MA = 300, NA_ = NROW + 2;
            const int bact = act ? BE_ACT_GELU_TANH : BE_ACT_GELU_TANH + 1;
            std::vector<term> TA[2][NG];
            for (int p = 0; p < 2; p++) for (int g = 0; g < NG; g++) for (auto &s : spec[g]) TA[p][g].push_back(mk(s.first, s.second, K, MA));
            std::vector<float> ya[2], out((size_t)NA_ * MA, 7.0f);
            for (int p = 0; p < 2; p++) { ya[p].resize((size_t)NA_ * MA); for (auto &v : ya[p]) v = rnd(); }
            std::vector<float> ya0[2] = {ya[0], ya[1]};
            be_lora_grp GA[2][NG];
            for (int p = 0; p < 2; p++) for (int g = 0; g < NG; g++) { memset(&GA[p][g], 0, sizeof GA[p][g]); GA[p][g].rows = rows[g].data(); GA[p][g].n_rows = (int)rows[g].size(); GA[p][g].n_terms = (int)TA[p][g].size();
                for (int k = 0; k < GA[p][g].n_terms; k++) GA[p][g].t[k] = be_lora_term{TA[p][g][k].da, TA[p][g][k].dbt, TA[p][g][k].rank, TA[p][g][k].dt, TA[p][g][k].scale}; }
            cu_lk c; memset(&c, 0, sizeof c);
            cu_lk_first(&c, ya[0].data(), x.data(), norm, eps, K, MA, GA[0], NG);
            if (cu_lk_merge(&c, ya[1].data(), x.data(), norm, eps, K, MA, GA[1], NG)) { printf("act: merge failed\n"); return 1; }
            c.act_y = out.data(), c.act = bact, c.act_rows = NA_;
            struct cu_be cb1; memset(&cb1, 0, sizeof cb1);
            emu_capturing = via;
            int l0 = emu_launches;
            cu_lk_run(&cb1.base, &c);
            emu_capturing = 0;
            printf("activated (%s, %s): %d launches\n", fused && !via ? "fused" : "two-launch + op", act ? "gelu" : "silu", emu_launches - l0);
            auto glu = [&](double g, double u) { return act ? 0.5 * g * (1 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))) * u : g / (1 + exp(-g)) * u; };
            std::vector<char> in(NA_, 0);
            for (int g = 0; g < NG; g++) for (int r : rows[g]) in[r] = 1;
            for (int r = 0; r < NA_; r++) for (int mm = 0; mm < MA; mm++) {
                double v[2], mag[2];
                for (int p = 0; p < 2; p++) { v[p] = ya0[p][(size_t)r * MA + mm]; mag[p] = fabs(v[p]); }
                for (int g = 0; g < NG && in[r]; g++) for (int rr : rows[g]) if (rr == r)
                    for (int p = 0; p < 2; p++) for (auto &t : TA[p][g]) for (int j = 0; j < t.rank; j++) {
                        double s2 = 0; for (int k = 0; k < K; k++) s2 += xr[(size_t)r * K + k] * t.a[(size_t)j * K + k];
                        double tv = (float)s2 * t.scale; v[p] += tv * t.b[(size_t)j * MA + mm]; mag[p] += fabs(tv * t.b[(size_t)j * MA + mm]);
                    }
                double want = glu(v[0], v[1]), got = out[(size_t)r * MA + mm];
                double tol = 1e-5 * (fabs(want) + (mag[0] + 1) * (mag[1] + 1));
                if (!(fabs(got - want) <= tol)) { if (bad++ < 5) printf("act row %d m %d got %g want %g\n", r, mm, got, want); }
            }
            if (!fused) break;
        }
    printf("max rel %.3g, bad %d\n", maxrel, bad);
    return bad != 0;
}
