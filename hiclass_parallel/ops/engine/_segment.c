/* Per-group log-sum-exp (and log-softmax) of rows of scores: the CPU kernel of the lean engine.
 *
 * Why C: a per-group softmax over (B, C) needs a gather of every group's scores, a max, a sum of
 * exps and a subtraction; NumPy runs each as a separate pass over the batch (about twice a flat
 * torch.log_softmax for WordNet's level partition). Here the passes of one group stay in cache
 * and the loops vectorise: about the cost of one flat log_softmax.
 *
 * Not a Python module: hiclass_parallel/ops/_native.py loads it with ctypes (which releases the
 * GIL during the call, so the engine's thread pool runs chunks of rows in parallel). Built by
 * setup.py as an optional extension: where no C compiler is found the NumPy route runs instead.
 *
 * Compiled with -ffast-math so that exp comes from glibc's vector library (libmvec) and the max
 * and sum reductions vectorise. Under -ffast-math the compiler may assume that no value is
 * infinite or NaN, so -inf, +inf and NaN are made and recognised through their bits, never by a
 * float comparison.
 *
 * Non-finite scores follow the NumPy route exactly (IEEE arithmetic of log-sum-exp):
 *   a group holding a NaN          -> lse NaN, every member's log-softmax NaN;
 *   a group holding +inf (no NaN)  -> lse +inf, log-softmax NaN for the +inf members (inf - inf),
 *                                     -inf for the others;
 *   a group of -inf only (or empty) -> lse -inf, log-softmax -inf (its lse is read as 0).
 * The common, finite case pays nothing for this: a NaN or +inf always makes the computed lse
 * non-finite (exp(inf - inf) is NaN), and only then is the group scanned again. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
/* one AVX2 version (8 floats per instruction) and a baseline one, picked when the library loads */
#define CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CLONES
#endif

static inline float neg_inf_f32(void) { uint32_t u = 0xff800000u; float v; memcpy(&v, &u, 4); return v; }
static inline int is_neg_inf_f32(float v) { uint32_t u; memcpy(&u, &v, 4); return u == 0xff800000u; }
static inline double neg_inf_f64(void) { uint64_t u = 0xfff0000000000000ull; double v; memcpy(&v, &u, 8); return v; }
static inline int is_neg_inf_f64(double v) { uint64_t u; memcpy(&u, &v, 8); return u == 0xfff0000000000000ull; }
static inline float pos_inf_f32(void) { uint32_t u = 0x7f800000u; float v; memcpy(&v, &u, 4); return v; }
static inline float nan_f32(void) { uint32_t u = 0x7fc00000u; float v; memcpy(&v, &u, 4); return v; }
static inline int is_nan_f32(float v) { uint32_t u; memcpy(&u, &v, 4); return (u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu); }
static inline int is_pos_inf_f32(float v) { uint32_t u; memcpy(&u, &v, 4); return u == 0x7f800000u; }
static inline int is_nonfinite_f32(float v) { uint32_t u; memcpy(&u, &v, 4); return (u & 0x7f800000u) == 0x7f800000u; }
static inline double pos_inf_f64(void) { uint64_t u = 0x7ff0000000000000ull; double v; memcpy(&v, &u, 8); return v; }
static inline double nan_f64(void) { uint64_t u = 0x7ff8000000000000ull; double v; memcpy(&v, &u, 8); return v; }
static inline int is_nan_f64(double v) {
    uint64_t u; memcpy(&u, &v, 8);
    return (u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull && (u & 0x000fffffffffffffull);
}
static inline int is_pos_inf_f64(double v) { uint64_t u; memcpy(&u, &v, 8); return u == 0x7ff0000000000000ull; }
static inline int is_nonfinite_f64(double v) { uint64_t u; memcpy(&u, &v, 8); return (u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull; }

/* NAME(x, out, lse, rows, n, members, gstart, G, col_group, buf, table):
 *   x       (rows, n) scores, C-contiguous rows;
 *   lse     (rows, G) out: log-sum-exp of every group, -inf for a group whose scores are all -inf
 *           (NaN and +inf as in the notes above);
 *   out     (rows, n) out, or NULL: x - lse[group] with an empty group's lse read as 0;
 *   members the n columns, group after group; gstart (G + 1) where each group starts in members;
 *   col_group (n) the group of each column; buf (largest group) and table (G) scratch. */
#define DEFINE_GROUP_LSE(NAME, T, EXP, LOG, SFX)                                                     \
CLONES static T NAME##_max(const T* v, int64_t n) {                                                  \
    T m = neg_inf_##SFX();                                                                           \
    for (int64_t i = 0; i < n; i++) m = v[i] > m ? v[i] : m;                                         \
    return m;                                                                                        \
}                                                                                                    \
CLONES static T NAME##_sum_exp(const T* v, int64_t n, T shift) {                                     \
    T s = 0;                                                                                         \
    for (int64_t i = 0; i < n; i++) s += EXP(v[i] - shift);                                          \
    return s;                                                                                        \
}                                                                                                    \
CLONES static void NAME##_minus(const T* x, T* out, const int32_t* group, const T* table, int64_t n) { \
    for (int64_t c = 0; c < n; c++) out[c] = x[c] - table[group[c]];                                 \
}                                                                                                    \
static int NAME##_has_nan(const T* v, int64_t n) {                                                   \
    for (int64_t i = 0; i < n; i++) if (is_nan_##SFX(v[i])) return 1;                                \
    return 0;                                                                                        \
}                                                                                                    \
/* the slow path of a group holding NaN or +inf: its log-softmax written member by member */       \
static void NAME##_special(const T* xr, T* outr, const int32_t* members, int64_t len, T l) {        \
    const int nan_group = is_nan_##SFX(l);                                                           \
    for (int64_t j = 0; j < len; j++) {                                                              \
        const T v = xr[members[j]];                                                                  \
        outr[members[j]] = (nan_group || is_nan_##SFX(v) || is_pos_inf_##SFX(v)) ? nan_##SFX() : neg_inf_##SFX(); \
    }                                                                                                \
}                                                                                                    \
void NAME(const T* x, T* out, T* lse, int64_t rows, int64_t n, const int32_t* members,               \
          const int64_t* gstart, int64_t G, const int32_t* col_group, T* buf, T* table) {            \
    for (int64_t r = 0; r < rows; r++) {                                                             \
        const T* xr = x + r * n;                                                                     \
        T* lr = lse + r * G;                                                                         \
        int special = 0;                                                                             \
        for (int64_t g = 0; g < G; g++) {                                                            \
            const int64_t a = gstart[g], len = gstart[g + 1] - a;                                    \
            for (int64_t j = 0; j < len; j++) buf[j] = xr[members[a + j]];                           \
            const T m = NAME##_max(buf, len);                                                        \
            if (len == 0 || is_neg_inf_##SFX(m)) {                                                   \
                /* -inf only, or NaN that the max skipped: [NaN, -inf] has max -inf */               \
                if (len && NAME##_has_nan(buf, len)) { lr[g] = table[g] = nan_##SFX(); special = 1; } \
                else { lr[g] = neg_inf_##SFX(); table[g] = 0; }                                      \
                continue;                                                                            \
            }                                                                                        \
            T l = m + LOG(NAME##_sum_exp(buf, len, m));                                              \
            if (is_nonfinite_##SFX(l)) { /* only a NaN or a +inf member makes it so */              \
                l = NAME##_has_nan(buf, len) ? nan_##SFX() : pos_inf_##SFX();                       \
                special = 1;                                                                         \
            }                                                                                        \
            lr[g] = table[g] = l;                                                                    \
        }                                                                                            \
        if (!out) continue;                                                                          \
        NAME##_minus(xr, out + r * n, col_group, table, n);                                         \
        if (special)                                                                                 \
            for (int64_t g = 0; g < G; g++)                                                          \
                if (is_nan_##SFX(lr[g]) || is_pos_inf_##SFX(lr[g]))                                  \
                    NAME##_special(xr, out + r * n, members + gstart[g], gstart[g + 1] - gstart[g], lr[g]); \
    }                                                                                                \
}

DEFINE_GROUP_LSE(group_lse_f32, float, expf, logf, f32)
DEFINE_GROUP_LSE(group_lse_f64, double, exp, log, f64)
