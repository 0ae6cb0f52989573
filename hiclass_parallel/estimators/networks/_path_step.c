/* One path-local training step of a sparse linear text model, forward and backward, fused.
 *
 * The model (SparseMLP with its defaults): h = X W_in + b_in (X sparse), score(b, c) =
 * h_b . W_out[c] + b_out[c]. The loss (PathLocalCrossEntropy, reduction "mean"): for each
 * labelled sample, one softmax row per group on its ancestral path (its sibling group; under
 * terminal semantics with stops, its children's group for its stop column), averaged over the
 * rows; plus, while training, `level_weight` times the in-batch level term: for every labelled
 * sample b and depth d < depth(b), a softmax over the distinct depth-d ancestors of the batch's
 * targets, target b's own ancestor, averaged over those rows. With sample weights, every row
 * counts with its sample's weight in both means (sum w * loss / sum w over the term's rows), and
 * a zero-weight sample is read as unlabelled (as if it were not in the batch).
 *
 * Why C: the torch route runs this as a chain of small ops (unique, index_select, a block
 * product of the batch against every distinct column, segment reductions, autograd, sparse
 * gradient coalescing); on WordNet subsets most of a step is that overhead, not arithmetic. Here
 * the (sample, column) entries the loss needs are scored once each: the columns most of the batch
 * needs (the upper groups; the level term's upper depths) as one dense block whose three matrix
 * products the caller runs through BLAS, the rest one dot product per entry, organised by column
 * so that a weight row is read once per step for all the samples that need it. The gradients
 * come out already coalesced: the distinct rows touched, ascending, with their summed values.
 *
 * A softmax row is listed one of two ways. A row over a candidate set that at least a quarter of
 * the batch uses (an upper sibling group; a depth's in-batch ancestors) is a "dense row": the
 * set's columns are in the dense block, and the row is (sample, set, target position), read
 * from and written to the block's row directly. Any other row lists its (sample, column) pairs.
 * Most of a step's softmax candidates are in the dense rows (about 150,000 of 170,000 pairs per
 * WordNet step), and listing each as a pair (then sorting the pairs by column to sum their
 * gradients) took longer than the products that score them.
 *
 * Not a Python module: hiclass_parallel/estimators/networks/_native_path_step.py loads it with ctypes. Threads:
 * a pool of pthreads started once that sleep between phases (no spinning waits; the count is
 * the caller's; see `parallel`). Built by setup.py as an optional extension; without it the torch route runs.
 *
 * A group wider than a limit (ps_sampling; the classifier's softmax_sample) may instead be scored
 * on a sampled candidate set shared by the batch, with the sampled-softmax correction on the
 * drawn columns (sample_group); prediction never comes here and stays exact.
 *
 * Compiled with -ffast-math (vectorised dot products and exp). Non-finite scores are detected
 * through their bits (the compiler may assume finite floats) and make the loss NaN, which the
 * classifier's finite-loss guard turns into a named error. */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../ops/engine/_clones.h" /* CLONES: an AVX2 + FMA version and a baseline one */

#define MAX_THREADS 64


static inline int is_nonfinite(float v) { uint32_t u; memcpy(&u, &v, 4); return (u & 0x7f800000u) == 0x7f800000u; }

/* ---------------------------------------------------------------- growable buffers */

typedef struct { void *p; size_t cap; } Buf;

static int reserve(Buf *b, size_t bytes) {
    if (bytes <= b->cap) return 0;
    size_t cap = bytes + bytes / 2 + 64;
    void *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p; b->cap = cap;
    return 0;
}

/* ---------------------------------------------------------------- the workspace of one model */

typedef struct {
    int64_t C, N, F;           /* classes, score columns, input features */
    int64_t *col_mark;         /* (N) -1, or a column's position among the step's distinct columns */
    int64_t *node_mark;        /* (C) -1, or a node's position in its depth's in-batch ancestor list */
    int64_t *feat_mark;        /* (F) -1, or a feature's position among the step's distinct features */
    int64_t *group_count;      /* (C + 1) 0, or (during prepare) the samples of the batch that use a group */
    int64_t *group_set;        /* (C + 1) -1, or (during prepare) a dense group's set */
    uint64_t *col_bits, *feat_bits, *dense_bits;
    /* the step's structure (prepare): R path rows and LR level rows in all; the SR rows listed as
     * pairs, the first RS of them path rows; P pairs (of the listed rows) */
    int64_t B, R, LR, SR, RS, P, U, NF, NNZ;
    /* dense sets: set q's columns set_col[set_ptr[q]:set_ptr[q + 1]] and their positions in the
     * dense block set_k; dense rows, by sample: d_ptr (B + 1) each sample's rows, d_set their
     * set, d_tpos the target's position in it, d_level 1 for a level row; d_cost (B + 1) the
     * cumulative candidates (threads split the samples by it); used_groups the groups counted */
    Buf set_ptr, set_col, set_k, d_ptr, d_set, d_tpos, d_level, d_cost, d_tmp, used_groups;
    int64_t NS, DR, DP;
    Buf row_start, row_target, pair_sample, pair_u, u_ptr, u_pairs, ucol, feat, f_ptr, f_ent, f_row;
    Buf level_nodes, level_ptr;
    /* distinct (sample, column) entries: a pair's score is its entry's; e_ptr (U + 1) the entries
     * of each column, e_sample (E) their sample, pair_entry (P) each pair's entry */
    Buf e_ptr, e_sample, pair_entry, s_mark;
    int64_t E;
    /* Columns most samples of the batch need (the upper groups, the level term's upper depths)
     * are scored as a dense (B, D) block with register tiles: D columns, dense_u (D) their
     * positions among the distinct columns; e_at (E) where each entry's score and gradient live
     * (b * D + k in the block, else B * D + e); sparse_u (Us) the other columns, sparse_w
     * (Us + 1) their cumulative entry counts. */
    Buf dense_u, e_at, sparse_u, sparse_w;
    int64_t D, Us;
    /* per-pair scores and their gradients, per-thread hidden gradients */
    Buf score, grad, dh, hpad, sbuf, gbuf, gscratch;
    /* class text (ps_text_scores / ps_text_grad): v_mark (V) -1, or a vocabulary feature's slot
     * among those present in the batch; slot_v (NP) each slot's feature; xv (B x NP) the batch's
     * input on the present features; tgrad (T x NP) the threads' match-weight gradients */
    Buf v_mark, slot_v, xv, tgrad;
    Buf dense_rows; /* (D) the dense block's W_out rows (ps_finish's fused update) */
    int64_t V, NP;
    /* sample weights (ps_prepare's weight, copied; has_w 0: every sample weighs 1), the targets
     * with zero-weight samples unlabelled, and the weighted row counts: RW of the R path rows,
     * LRW of the LR level rows (the loss's denominators; R and LR themselves without weights) */
    Buf sw, tw;
    int has_w;
    double RW, LRW;
    /* Sampled softmax of wide groups (ps_sampling, read by the next ps_prepare): a used group
     * wider than samp_above columns is scored on one candidate set shared by the batch, in the
     * group's own column order: the group's columns that are targets of the batch's rows in it
     * (in-batch positives) and uniformly drawn others, up to samp_size candidates in all. A drawn
     * column's logit gets + log(1 / Q), Q the chance that it was drawn (the sampled-softmax
     * correction; the positives are always in, + 0). set_off (parallel to set_col) and pair_off
     * (to the pairs) hold the corrections, set_corr (per set) and row_corr (per listed row) 1
     * where one is not 0 (only those rows read them, so a sample that covers the whole group is
     * the exact softmax, operation for operation). n_samp sampled groups of the last step: samp_group
     * their ids, samp_ptr (n_samp + 1) their candidates samp_col and corrections samp_off. */
    int64_t samp_above, samp_size, n_samp;
    uint64_t rng;
    int64_t *group_samp;       /* (C + 1) -1, or (during prepare) a sampled group's index */
    uint64_t *pos_bits, *draw_bits;
    Buf set_off, set_corr, pair_off, row_corr, samp_group, samp_ptr, samp_col, samp_off, samp_scratch;
} Work;

void *ps_new(int64_t C, int64_t N, int64_t F) {
    Work *w = calloc(1, sizeof(Work));
    if (!w) return NULL;
    w->C = C; w->N = N; w->F = F;
    w->col_mark = malloc(sizeof(int64_t) * (size_t)(N > 0 ? N : 1));
    w->node_mark = malloc(sizeof(int64_t) * (size_t)(C > 0 ? C : 1));
    w->feat_mark = malloc(sizeof(int64_t) * (size_t)(F > 0 ? F : 1));
    w->col_bits = calloc((size_t)(N / 64 + 1), 8);
    w->feat_bits = calloc((size_t)(F / 64 + 1), 8);
    w->dense_bits = calloc((size_t)(N / 64 + 1), 8);
    w->group_count = calloc((size_t)(C + 1), sizeof(int64_t));  /* groups: at most C + 1 */
    w->group_set = malloc(sizeof(int64_t) * (size_t)(C + 1));
    w->group_samp = malloc(sizeof(int64_t) * (size_t)(C + 1));
    w->pos_bits = calloc((size_t)(N / 64 + 1), 8);
    w->draw_bits = calloc((size_t)(N / 64 + 1), 8);
    if (!w->col_mark || !w->node_mark || !w->feat_mark || !w->col_bits || !w->feat_bits || !w->dense_bits
        || !w->group_count || !w->group_set || !w->group_samp || !w->pos_bits || !w->draw_bits) {
        free(w->col_mark); free(w->node_mark); free(w->feat_mark); free(w->col_bits); free(w->feat_bits);
        free(w->dense_bits); free(w->group_count); free(w->group_set);
        free(w->group_samp); free(w->pos_bits); free(w->draw_bits);
        free(w);
        return NULL;
    }
    for (int64_t i = 0; i < N; i++) w->col_mark[i] = -1;
    for (int64_t i = 0; i <= C; i++) w->group_set[i] = -1;
    for (int64_t i = 0; i <= C; i++) w->group_samp[i] = -1;
    for (int64_t i = 0; i < C; i++) w->node_mark[i] = -1;
    for (int64_t i = 0; i < F; i++) w->feat_mark[i] = -1;
    return w;
}

void ps_free(void *handle) {
    Work *w = handle;
    if (!w) return;
    Buf *bufs[] = {&w->row_start, &w->row_target, &w->pair_sample, &w->pair_u, &w->u_ptr, &w->u_pairs,
                   &w->ucol, &w->feat, &w->f_ptr, &w->f_ent, &w->f_row, &w->level_nodes, &w->level_ptr,
                   &w->score, &w->grad, &w->dh, &w->hpad, &w->e_ptr, &w->e_sample,
                   &w->pair_entry, &w->s_mark, &w->dense_u, &w->e_at,
                   &w->sparse_u, &w->sparse_w, &w->sbuf, &w->gbuf, &w->set_ptr, &w->set_col, &w->set_k,
                   &w->d_ptr, &w->d_set, &w->d_tpos, &w->d_level, &w->d_cost, &w->d_tmp, &w->used_groups, &w->gscratch,
                   &w->v_mark, &w->slot_v, &w->xv, &w->tgrad, &w->dense_rows, &w->sw, &w->tw,
                   &w->set_off, &w->set_corr, &w->pair_off, &w->row_corr, &w->samp_group, &w->samp_ptr,
                   &w->samp_col, &w->samp_off, &w->samp_scratch};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) free(bufs[i]->p);
    free(w->col_mark); free(w->node_mark); free(w->feat_mark); free(w->col_bits); free(w->feat_bits);
    free(w->dense_bits); free(w->group_count); free(w->group_set);
    free(w->group_samp); free(w->pos_bits); free(w->draw_bits);
    free(w);
}

/* ps_sampling: the next ps_prepare's sampled softmax (see Work): groups wider than `above`
 * columns (0: none, every softmax exact) train on `size` candidates (at least their in-batch
 * positives), drawn with a generator seeded by `seed`. */
void ps_sampling(void *handle, int64_t above, int64_t size, int64_t seed) {
    Work *w = handle;
    w->samp_above = above > 0 ? above : 0;
    w->samp_size = size > 0 ? size : 0;
    w->rng = (uint64_t)seed;
}

/* splitmix64: the sampler's generator (the state advances by a constant; the output mixed) */
static inline uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A uniform integer in [0, n) (n >= 1; the multiply-shift map, bias below 2^-40 for n < 2^24) */
static inline int64_t random_below(uint64_t *state, int64_t n) {
    return (int64_t)(((unsigned __int128)next_random(state) * (uint64_t)n) >> 64);
}

#define I64(buf) ((int64_t *)(buf).p)

/* Append a softmax row: its candidates become pairs (sample, column). */
static int add_pairs(Work *w, int64_t sample, const int64_t *cols, int64_t n, int64_t target_pos, const float *off) {
    int64_t P = w->P;
    if (reserve(&w->pair_sample, 8 * (size_t)(P + n)) || reserve(&w->pair_u, 8 * (size_t)(P + n))) return -1;
    int64_t *ps = I64(w->pair_sample), *pu = I64(w->pair_u);
    for (int64_t i = 0; i < n; i++) {
        int64_t c = cols[i];
        ps[P + i] = sample;
        pu[P + i] = c; /* a column for now; mapped to its distinct position below */
        w->col_bits[c >> 6] |= 1ull << (c & 63);
    }
    int64_t r = w->SR++;
    if (reserve(&w->row_start, 8 * (size_t)(r + 2)) || reserve(&w->row_target, 8 * (size_t)(r + 1))) return -1;
    I64(w->row_start)[r] = P;
    I64(w->row_target)[r] = P + target_pos;
    if (w->samp_above) { /* the row's sampled-softmax corrections (0: none) */
        if (reserve(&w->pair_off, 4 * (size_t)(P + n)) || reserve(&w->row_corr, 8 * (size_t)(r + 1))) return -1;
        float *po = (float *)w->pair_off.p + P;
        int64_t corr = 0;
        for (int64_t i = 0; i < n; i++) { po[i] = off ? off[i] : 0.0f; corr |= po[i] != 0.0f; }
        I64(w->row_corr)[r] = corr;
    }
    w->P = P + n;
    return 0;
}

/* A new dense set over n columns (marked distinct and dense); returns its id, -1 out of memory. */
static int64_t add_set(Work *w, const int64_t *cols, int64_t n, const float *off) {
    const int64_t q = w->NS, at = q ? I64(w->set_ptr)[q] : 0;
    if (reserve(&w->set_ptr, 8 * (size_t)(q + 2)) || reserve(&w->set_col, 8 * (size_t)(at + n + 1))) return -1;
    if (w->samp_above) { /* the set's sampled-softmax corrections (0: none) */
        if (reserve(&w->set_off, 4 * (size_t)(at + n + 1)) || reserve(&w->set_corr, 8 * (size_t)(q + 1))) return -1;
        float *so = (float *)w->set_off.p + at;
        int64_t corr = 0;
        for (int64_t i = 0; i < n; i++) { so[i] = off ? off[i] : 0.0f; corr |= so[i] != 0.0f; }
        I64(w->set_corr)[q] = corr;
    }
    int64_t *sp = I64(w->set_ptr), *sc = I64(w->set_col);
    sp[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t c = cols[i];
        sc[at + i] = c;
        w->col_bits[c >> 6] |= 1ull << (c & 63);
        w->dense_bits[c >> 6] |= 1ull << (c & 63);
    }
    sp[q + 1] = at + n;
    w->NS = q + 1;
    return q;
}

/* A dense row: sample, set, the target's position in the set, path (0) or level (1). */
static int add_dense_row(Work *w, int64_t sample, int64_t set, int64_t tpos, int64_t is_level) {
    const int64_t r = w->DR;
    if (reserve(&w->d_tmp, 8 * (size_t)(4 * (r + 1)))) return -1;
    int64_t *t = I64(w->d_tmp) + 4 * r;
    t[0] = sample; t[1] = set; t[2] = tpos; t[3] = is_level;
    w->DR = r + 1;
    return 0;
}

/* Distinct set bits of `bits` (n_bits wide), ascending, into out; clears the bits. */
static int64_t drain_bits(uint64_t *bits, int64_t n_bits, int64_t *out) {
    int64_t k = 0;
    for (int64_t i = 0; i <= n_bits / 64; i++) {
        uint64_t word = bits[i];
        while (word) {
            int t = __builtin_ctzll(word);
            out[k++] = i * 64 + t;
            word &= word - 1;
        }
        bits[i] = 0;
    }
    return k;
}

/* The candidate set of sampled group g (n columns, its positives' bits set in pos_bits): the
 * positives and samp_size - k of the n - k others drawn uniformly without replacement (a
 * partial Fisher-Yates shuffle), in the group's column order; each drawn column's correction
 * log((n - k) / m) (0 when all are drawn: the exact softmax). Marks each positive's candidate
 * position in col_mark and clears its bit. Returns the group's sampled index, -1 out of memory. */
static int64_t sample_group(Work *w, int64_t g, const int64_t *group_ptr, const int64_t *group_cols) {
    const int64_t lo = group_ptr[g], n = group_ptr[g + 1] - lo, j = w->n_samp;
    const int64_t at = j ? I64(w->samp_ptr)[j] : 0;
    if (reserve(&w->samp_scratch, 8 * (size_t)(n + 1)) || reserve(&w->samp_group, 8 * (size_t)(j + 1))
        || reserve(&w->samp_ptr, 8 * (size_t)(j + 2)))
        return -1;
    int64_t *others = I64(w->samp_scratch), k = 0, n_other = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t c = group_cols[lo + i];
        if ((w->pos_bits[c >> 6] >> (c & 63)) & 1) k++;
        else others[n_other++] = c;
    }
    int64_t m = w->samp_size - k;
    m = m < 0 ? 0 : (m > n_other ? n_other : m);
    for (int64_t i = 0; i < m; i++) {
        const int64_t r = i + random_below(&w->rng, n_other - i), c = others[r];
        others[r] = others[i]; others[i] = c;
        w->draw_bits[c >> 6] |= 1ull << (c & 63);
    }
    const float corr = m > 0 && m < n_other ? (float)log((double)n_other / (double)m) : 0.0f;
    if (reserve(&w->samp_col, 8 * (size_t)(at + k + m + 1)) || reserve(&w->samp_off, 4 * (size_t)(at + k + m + 1)))
        return -1;
    int64_t *sc = I64(w->samp_col) + at, got = 0;
    float *so = (float *)w->samp_off.p + at;
    for (int64_t i = 0; i < n; i++) {
        const int64_t c = group_cols[lo + i];
        const uint64_t bit = 1ull << (c & 63);
        if (w->pos_bits[c >> 6] & bit) {
            w->pos_bits[c >> 6] &= ~bit;
            w->col_mark[c] = got;
            sc[got] = c; so[got++] = 0.0f;
        } else if (w->draw_bits[c >> 6] & bit) {
            w->draw_bits[c >> 6] &= ~bit;
            sc[got] = c; so[got++] = corr;
        }
    }
    I64(w->samp_group)[j] = g;
    I64(w->samp_ptr)[0] = 0;
    I64(w->samp_ptr)[j + 1] = at + got;
    w->n_samp = j + 1;
    return j;
}

/* Sample b's softmax row over group g whose target is column `col` (position `pos` in the
 * group): a dense row of the group's set, or the group's (or its sample's) columns as pairs. */
static int path_row(Work *w, int64_t b, int64_t g, int64_t col, int64_t pos, const int64_t *group_ptr,
                    const int64_t *group_cols) {
    const int64_t j = w->group_samp[g];
    if (j >= 0) pos = w->col_mark[col]; /* the target's position among the sampled candidates */
    if (w->group_set[g] >= 0) return add_dense_row(w, b, w->group_set[g], pos, 0);
    if (j < 0) return add_pairs(w, b, group_cols + group_ptr[g], group_ptr[g + 1] - group_ptr[g], pos, NULL);
    const int64_t a = I64(w->samp_ptr)[j];
    return add_pairs(w, b, I64(w->samp_col) + a, I64(w->samp_ptr)[j + 1] - a, pos, (const float *)w->samp_off.p + a);
}

/* ps_prepare: the structure of one step from the batch's targets and input columns.
 *   target (B) node ids, -1 unlabelled; weight (B) the samples' weights (finite, >= 0; NULL:
 *   all 1; a zero-weight sample is read as unlabelled); xptr (B + 1), xidx (nnz) the batch's
 *   CSR columns;
 *   paths ((C + 1) x L) ancestral paths, -1 padded; group_of (C); child_group (C);
 *   group_ptr, group_cols, col_pos: the sibling groups (hiclass_parallel.ops.sibling_paths);
 *   stop_rows: add the stop row of an internal target (terminal semantics with stops);
 *   level: add the in-batch level rows.
 *   sizes (out, 7): U distinct columns, NF distinct features, P (sample, column) candidates of
 *   all softmax rows (the listed pairs and the dense rows' sets), R path rows, LR level rows,
 *   nnz, D dense columns.
 * Returns 0; -1 out of memory; -2 a target outside [-1, C); -3 a feature outside [0, F). */
int64_t ps_prepare(void *handle, int64_t B, const int64_t *target, const float *weight, const int64_t *xptr,
                   const int64_t *xidx, int64_t L, const int64_t *paths, const int64_t *group_of,
                   const int64_t *child_group, const int64_t *group_ptr, const int64_t *group_cols,
                   const int64_t *col_pos, int64_t stop_rows, int64_t level, int64_t *sizes) {
    Work *w = handle;
    const int64_t C = w->C;
    w->B = B; w->R = 0; w->LR = 0; w->SR = 0; w->RS = 0; w->P = 0; w->NS = 0; w->DR = 0; w->DP = 0;
    w->RW = 0.0; w->LRW = 0.0; w->has_w = weight != NULL; w->n_samp = 0;
    for (int64_t b = 0; b < B; b++)
        if (target[b] < -1 || target[b] >= C) return -2;
    if (weight) { /* the weights kept for ps_backward; zero-weight samples unlabelled */
        if (reserve(&w->sw, 4 * (size_t)(B + 1)) || reserve(&w->tw, 8 * (size_t)(B + 1))) return -1;
        float *sw = w->sw.p;
        int64_t *tw = I64(w->tw);
        for (int64_t b = 0; b < B; b++) { sw[b] = weight[b]; tw[b] = weight[b] > 0.0f ? target[b] : -1; }
        target = tw;
    }
    /* dense sets: a group that at least a quarter of the batch (and 8 samples) uses, and a
     * depth's in-batch ancestors when as many samples reach that depth */
    const int64_t dense_min = B / 4 > 8 ? B / 4 : 8;
    int64_t n_used = 0;
    for (int64_t b = 0; b < B; b++) {
        const int64_t t = target[b];
        if (t < 0) continue;
        if (reserve(&w->used_groups, 8 * (size_t)(n_used + L + 1))) return -1;
        int64_t *used = I64(w->used_groups);
        const int64_t *path = paths + t * L;
        for (int64_t d = 0; d <= L; d++) {
            int64_t g;
            if (d < L && path[d] >= 0) g = group_of[path[d]];
            else if (stop_rows && child_group[t] >= 0) g = child_group[t];
            else break;
            if (w->group_count[g]++ == 0) used[n_used++] = g;
            if (w->samp_above && group_ptr[g + 1] - group_ptr[g] > w->samp_above) { /* an in-batch positive */
                const int64_t c = d < L && path[d] >= 0 ? path[d] : C + g - 1;
                w->pos_bits[c >> 6] |= 1ull << (c & 63);
            }
            if (d == L || path[d] < 0) break; /* the stop row's group, once */
        }
    }
    {
        const int64_t *used = I64(w->used_groups);
        for (int64_t i = 0; i < n_used; i++) {
            const int64_t g = used[i];
            if (w->samp_above && group_ptr[g + 1] - group_ptr[g] > w->samp_above) {
                const int64_t j = sample_group(w, g, group_ptr, group_cols);
                if (j < 0) return -1;
                w->group_samp[g] = j;
            }
            if (w->group_count[g] >= dense_min) {
                const int64_t j = w->group_samp[g];
                const int64_t q = j < 0 ? add_set(w, group_cols + group_ptr[g], group_ptr[g + 1] - group_ptr[g], NULL)
                                        : add_set(w, I64(w->samp_col) + I64(w->samp_ptr)[j],
                                                  I64(w->samp_ptr)[j + 1] - I64(w->samp_ptr)[j],
                                                  (const float *)w->samp_off.p + I64(w->samp_ptr)[j]);
                if (q < 0) return -1;
                w->group_set[g] = q;
            }
            w->group_count[g] = 0;
        }
    }
    /* path rows */
    for (int64_t b = 0; b < B; b++) {
        int64_t t = target[b];
        if (t < 0) continue;
        const int64_t *path = paths + t * L;
        for (int64_t d = 0; d < L && path[d] >= 0; d++) {
            int64_t node = path[d], g = group_of[node];
            if (path_row(w, b, g, node, col_pos[node], group_ptr, group_cols)) return -1;
            w->R++;
            w->RW += weight ? (double)weight[b] : 1.0;
        }
        if (stop_rows && child_group[t] >= 0) {
            int64_t g = child_group[t];
            if (path_row(w, b, g, C + g - 1, col_pos[C + g - 1], group_ptr, group_cols)) return -1;
            w->R++;
            w->RW += weight ? (double)weight[b] : 1.0;
        }
    }
    w->RS = w->SR;
    {
        const int64_t *used = I64(w->used_groups);
        for (int64_t i = 0; i < n_used; i++) { w->group_set[used[i]] = -1; w->group_samp[used[i]] = -1; }
        const int64_t n_cand = w->n_samp ? I64(w->samp_ptr)[w->n_samp] : 0, *sc = I64(w->samp_col);
        for (int64_t i = 0; i < n_cand; i++) w->col_mark[sc[i]] = -1;
    }
    /* level rows: the distinct ancestors of each depth, in order of first appearance */
    if (level) {
        if (reserve(&w->level_nodes, 8 * (size_t)(B * L + 1)) || reserve(&w->level_ptr, 8 * (size_t)(2 * L + 1)))
            return -1;
        int64_t *nodes = I64(w->level_nodes), *lptr = I64(w->level_ptr), n = 0;
        int64_t *lset = lptr + L + 1; /* each depth's dense set, or -1 */
        for (int64_t d = 0; d < L; d++) {
            lptr[d] = n;
            int64_t reach = 0;
            for (int64_t b = 0; b < B; b++) {
                int64_t t = target[b];
                if (t < 0) continue;
                int64_t a = paths[t * L + d];
                if (a < 0) continue;
                reach++;
                if (w->node_mark[a] < 0) {
                    w->node_mark[a] = n - lptr[d];
                    nodes[n++] = a;
                }
            }
            lset[d] = -1;
            if (reach >= dense_min && (lset[d] = add_set(w, nodes + lptr[d], n - lptr[d], NULL)) < 0) return -1;
        }
        lptr[L] = n;
        for (int64_t b = 0; b < B; b++) {
            int64_t t = target[b];
            if (t < 0) continue;
            const int64_t *path = paths + t * L;
            for (int64_t d = 0; d < L && path[d] >= 0; d++) {
                int rc = lset[d] >= 0 ? add_dense_row(w, b, lset[d], w->node_mark[path[d]], 1)
                                      : add_pairs(w, b, nodes + lptr[d], lptr[d + 1] - lptr[d], w->node_mark[path[d]],
                                                  NULL);
                if (rc) return -1;
                w->LR++;
                w->LRW += weight ? (double)weight[b] : 1.0;
            }
        }
        for (int64_t i = 0; i < n; i++) w->node_mark[nodes[i]] = -1;
    }
    /* the dense rows by sample (a counting sort, stable), and each sample's share of the work */
    {
        const int64_t DR = w->DR, *sp = I64(w->set_ptr);
        if (reserve(&w->d_ptr, 8 * (size_t)(B + 1)) || reserve(&w->d_cost, 8 * (size_t)(B + 1))
            || reserve(&w->d_set, 8 * (size_t)(DR + 1)) || reserve(&w->d_tpos, 8 * (size_t)(DR + 1))
            || reserve(&w->d_level, 8 * (size_t)(DR + 1)))
            return -1;
        int64_t *dptr = I64(w->d_ptr), *dcost = I64(w->d_cost), *tmp = I64(w->d_tmp);
        int64_t *dset = I64(w->d_set), *dtpos = I64(w->d_tpos), *dlev = I64(w->d_level);
        for (int64_t b = 0; b <= B; b++) { dptr[b] = 0; dcost[b] = 0; }
        for (int64_t r = 0; r < DR; r++) {
            const int64_t b = tmp[4 * r], q = tmp[4 * r + 1];
            dptr[b + 1]++;
            dcost[b + 1] += sp[q + 1] - sp[q];
        }
        for (int64_t b = 0; b < B; b++) { dptr[b + 1] += dptr[b]; dcost[b + 1] += dcost[b]; }
        for (int64_t r = 0; r < DR; r++) {
            const int64_t at = dptr[tmp[4 * r]]++;
            dset[at] = tmp[4 * r + 1]; dtpos[at] = tmp[4 * r + 2]; dlev[at] = tmp[4 * r + 3];
        }
        for (int64_t b = B; b > 0; b--) dptr[b] = dptr[b - 1];
        dptr[0] = 0;
        w->DP = dcost[B];
    }
    int64_t rows = w->SR, P = w->P;
    if (reserve(&w->row_start, 8 * (size_t)(rows + 1))) return -1;
    I64(w->row_start)[rows] = P;
    /* distinct columns, ascending, and each pair's position among them (a CSC of the pairs) */
    const int64_t n_set_cols = w->NS ? I64(w->set_ptr)[w->NS] : 0;
    if (reserve(&w->ucol, 8 * (size_t)(P + n_set_cols + 1)) || reserve(&w->u_pairs, 8 * (size_t)(P + 1))) return -1;
    int64_t *ucol = I64(w->ucol);
    int64_t U = drain_bits(w->col_bits, w->N, ucol);
    if (reserve(&w->u_ptr, 8 * (size_t)(U + 1))) return -1;
    int64_t *uptr = I64(w->u_ptr), *pu = I64(w->pair_u), *upairs = I64(w->u_pairs);
    for (int64_t u = 0; u < U; u++) { w->col_mark[ucol[u]] = u; uptr[u] = 0; }
    uptr[U] = 0;
    for (int64_t p = 0; p < P; p++) { pu[p] = w->col_mark[pu[p]]; uptr[pu[p] + 1]++; }
    for (int64_t u = 0; u < U; u++) uptr[u + 1] += uptr[u];
    for (int64_t p = 0; p < P; p++) upairs[uptr[pu[p]]++] = p;
    for (int64_t u = U; u > 0; u--) uptr[u] = uptr[u - 1];
    uptr[0] = 0;
    for (int64_t u = 0; u < U; u++) w->col_mark[ucol[u]] = -1;
    w->U = U;
    /* a sample meets a column at most twice (once in a path row, once in a level row); both
     * pairs share one entry, scored once, so the blocked loops below never see a sample twice */
    if (reserve(&w->e_ptr, 8 * (size_t)(U + 1)) || reserve(&w->e_sample, 8 * (size_t)(P + 1))
        || reserve(&w->pair_entry, 8 * (size_t)(P + 1)) || reserve(&w->s_mark, 8 * (size_t)(B + 1)))
        return -1;
    int64_t *eptr = I64(w->e_ptr), *esample = I64(w->e_sample), *pe = I64(w->pair_entry), *smark = I64(w->s_mark);
    const int64_t *psample = I64(w->pair_sample);
    for (int64_t b = 0; b < B; b++) smark[b] = -1;
    int64_t E = 0;
    for (int64_t u = 0; u < U; u++) {
        eptr[u] = E;
        for (int64_t q = uptr[u]; q < uptr[u + 1]; q++) {
            const int64_t p = upairs[q], b = psample[p];
            if (smark[b] >= eptr[u]) { pe[p] = smark[b]; continue; }
            smark[b] = E;
            esample[E] = b;
            pe[p] = E++;
        }
    }
    eptr[U] = E;
    w->E = E;
    /* dense columns: at least a quarter of the batch (and 8 samples) needs them (BLAS scores a
     * whole column at several times the rate of the per-entry loops) */
    if (reserve(&w->dense_u, 8 * (size_t)(U + 1)) || reserve(&w->sparse_u, 8 * (size_t)(U + 1))
        || reserve(&w->sparse_w, 8 * (size_t)(U + 1)) || reserve(&w->e_at, 8 * (size_t)(E + 1)))
        return -1;
    int64_t *du = I64(w->dense_u), *su = I64(w->sparse_u), *sw = I64(w->sparse_w), *eat = I64(w->e_at);
    int64_t D = 0, Us = 0;
    for (int64_t u = 0; u < U; u++) {
        const int64_t c = ucol[u];
        const int in_set = (w->dense_bits[c >> 6] >> (c & 63)) & 1;
        if (in_set || eptr[u + 1] - eptr[u] >= dense_min) du[D++] = u;
    }
    for (int64_t k = 0; k < D; k++) {
        const int64_t c = ucol[du[k]];
        w->dense_bits[c >> 6] = 0;
        w->col_mark[c] = k;
    }
    if (reserve(&w->set_k, 8 * (size_t)(n_set_cols + 1))) return -1;
    {
        const int64_t *sc = I64(w->set_col);
        int64_t *sk = I64(w->set_k);
        for (int64_t i = 0; i < n_set_cols; i++) sk[i] = w->col_mark[sc[i]];
    }
    for (int64_t k = 0; k < D; k++) w->col_mark[ucol[du[k]]] = -1;
    sw[0] = 0;
    for (int64_t u = 0, k = 0; u < U; u++) {
        if (k < D && du[k] == u) {
            for (int64_t e = eptr[u]; e < eptr[u + 1]; e++) eat[e] = esample[e] * D + k;
            k++;
            continue;
        }
        for (int64_t e = eptr[u]; e < eptr[u + 1]; e++) eat[e] = B * D + e;
        su[Us] = u;
        sw[Us + 1] = sw[Us] + (eptr[u + 1] - eptr[u]);
        Us++;
    }
    w->D = D;
    w->Us = Us;
    /* distinct input features, ascending, and the batch entries of each (a CSC of X) */
    int64_t nnz = xptr[B] - xptr[0];
    w->NNZ = nnz;
    if (reserve(&w->feat, 8 * (size_t)(nnz + 1)) || reserve(&w->f_ent, 8 * (size_t)(nnz + 1))
        || reserve(&w->f_row, 8 * (size_t)(nnz + 1)))
        return -1;
    for (int64_t k = xptr[0]; k < xptr[B]; k++) {
        int64_t f = xidx[k];
        if (f < 0 || f >= w->F) {
            drain_bits(w->feat_bits, w->F, I64(w->feat));
            return -3;
        }
        w->feat_bits[f >> 6] |= 1ull << (f & 63);
    }
    int64_t *feat = I64(w->feat);
    int64_t NF = drain_bits(w->feat_bits, w->F, feat);
    if (reserve(&w->f_ptr, 8 * (size_t)(NF + 1))) return -1;
    int64_t *fptr = I64(w->f_ptr), *fent = I64(w->f_ent), *frow = I64(w->f_row);
    for (int64_t i = 0; i <= NF; i++) fptr[i] = 0;
    for (int64_t i = 0; i < NF; i++) w->feat_mark[feat[i]] = i;
    for (int64_t k = xptr[0]; k < xptr[B]; k++) fptr[w->feat_mark[xidx[k]] + 1]++;
    for (int64_t i = 0; i < NF; i++) fptr[i + 1] += fptr[i];
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = xptr[b]; k < xptr[b + 1]; k++) {
            int64_t e = fptr[w->feat_mark[xidx[k]]]++;
            fent[e] = k;
            frow[e] = b;
        }
    for (int64_t i = NF; i > 0; i--) fptr[i] = fptr[i - 1];
    fptr[0] = 0;
    for (int64_t i = 0; i < NF; i++) w->feat_mark[feat[i]] = -1;
    w->NF = NF;
    sizes[0] = U; sizes[1] = NF; sizes[2] = P + w->DP; sizes[3] = w->R; sizes[4] = w->LR; sizes[5] = nnz; sizes[6] = w->D;
    return 0;
}

/* ps_sampled: what the last ps_prepare sampled. sizes (out, 2): the sampled groups and their
 * candidates in all; with groups not NULL, also groups (n_groups) their ids, ptr (n_groups + 1)
 * each one's candidates cols and their corrections off (added to the logits; 0 for the batch's
 * own targets). For tests and diagnostics. */
void ps_sampled(void *handle, int64_t *sizes, int64_t *groups, int64_t *ptr, int64_t *cols, float *off) {
    const Work *w = handle;
    const int64_t n = w->n_samp, total = n ? I64(w->samp_ptr)[n] : 0;
    sizes[0] = n; sizes[1] = total;
    if (!groups) return;
    if (n) {
        memcpy(groups, w->samp_group.p, 8 * (size_t)n);
        memcpy(ptr, w->samp_ptr.p, 8 * (size_t)(n + 1));
        memcpy(cols, w->samp_col.p, 8 * (size_t)total);
        memcpy(off, w->samp_off.p, 4 * (size_t)total);
    } else {
        ptr[0] = 0;
    }
}

/* ---------------------------------------------------------------- threads */

typedef struct Step Step;
typedef struct Text Text;
typedef void (*task_fn)(const Step *s, int tid, int64_t lo, int64_t hi);
typedef struct { task_fn fn; const Step *s; int tid; int64_t lo, hi; } Job;

/* A phase's T chunks are claimed, not assigned: chunk t always runs as tid t (so its scratch
 * block and the order the blocks are summed in do not depend on who ran it, and the answers do
 * not depend on timing), but any thread may run it. The caller claims chunks too, so when the
 * cores are busy with other processes and a worker is not scheduled in time, the caller runs the
 * phase alone instead of waiting for it: a phase waits only for chunks a worker actually began.
 * Workers are started once and sleep on a condition variable between phases (never spin), so
 * a step pays no thread creation and an idle fit leaves nothing running. One phase at a time:
 * callers from several threads take turns (`owner`). */
typedef struct {
    pthread_mutex_t owner; /* held by the caller running a phase */
    pthread_mutex_t mu;    /* guards the fields below */
    pthread_cond_t work, done;
    const Job *jobs;
    int njobs, next, running, nworkers;
} Pool;

static Pool pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
                    PTHREAD_COND_INITIALIZER, NULL, 0, 0, 0, 0};

/* Claim the next chunk of the current phase under pool.mu, or -1. */
static int claim(void) { return pool.next < pool.njobs ? pool.next++ : -1; }

static void *worker_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        int j = claim();
        if (j < 0) { pthread_cond_wait(&pool.work, &pool.mu); continue; }
        const Job job = pool.jobs[j];
        pool.running++;
        pthread_mutex_unlock(&pool.mu);
        job.fn(job.s, job.tid, job.lo, job.hi);
        pthread_mutex_lock(&pool.mu);
        if (--pool.running == 0) pthread_cond_signal(&pool.done);
    }
    return NULL;
}

/* A forked child has the pool's memory but none of its threads: start afresh. */
static void pool_after_fork(void) {
    pthread_mutex_init(&pool.owner, NULL);
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.work, NULL);
    pthread_cond_init(&pool.done, NULL);
    pool.jobs = NULL; pool.njobs = pool.next = pool.running = pool.nworkers = 0;
}

static void pool_atfork_once(void) { pthread_atfork(NULL, NULL, pool_after_fork); }

/* At least n workers (fewer where a thread cannot start: the caller then runs more chunks). */
static void pool_grow(int n) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, pool_atfork_once);
    while (pool.nworkers < n) {
        pthread_t th;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int ok = pthread_create(&th, &attr, worker_main, NULL) == 0;
        pthread_attr_destroy(&attr);
        if (!ok) break;
        pool.nworkers++;
    }
}

/* Run fn over [0, n) in T chunks; with `weight` (n + 1 cumulative costs) the chunks hold equal
 * cost, else equal counts. */
static void parallel(const Step *s, int T, task_fn fn, int64_t n, const int64_t *weight) {
    Job jobs[MAX_THREADS];
    int64_t prev = 0;
    for (int t = 0; t < T; t++) {
        int64_t hi = n;
        if (t < T - 1) {
            if (weight) {
                int64_t goal = weight[0] + (weight[n] - weight[0]) * (t + 1) / T, a = prev, z = n;
                while (a < z) { int64_t m = (a + z) / 2; if (weight[m] < goal) a = m + 1; else z = m; }
                hi = a;
            } else {
                hi = n * (t + 1) / T;
            }
        }
        jobs[t] = (Job){fn, s, t, prev, hi};
        prev = hi;
    }
    if (T <= 1) {
        if (T == 1) fn(s, 0, 0, n);
        return;
    }
    pthread_mutex_lock(&pool.owner);
    pthread_mutex_lock(&pool.mu);
    pool_grow(T - 1);
    pool.jobs = jobs;
    pool.njobs = T;
    pool.next = 0;
    if (pool.nworkers > 0) pthread_cond_broadcast(&pool.work);
    for (int j; (j = claim()) >= 0;) {
        pthread_mutex_unlock(&pool.mu);
        fn(s, jobs[j].tid, jobs[j].lo, jobs[j].hi);
        pthread_mutex_lock(&pool.mu);
    }
    while (pool.running > 0) pthread_cond_wait(&pool.done, &pool.mu);
    pool.jobs = NULL;
    pool.njobs = 0;
    pthread_mutex_unlock(&pool.mu);
    pthread_mutex_unlock(&pool.owner);
}

/* ---------------------------------------------------------------- Adam on one row */

/* LazyAdam's update of a parameter's rows (hyper: lr_t = lr / (1 - b1^step), b1, b2, eps,
 * weight decay, bc2 = 1 - b2^step). m is the first moment (the parameter's shape), float32 or,
 * with ADAM_M_BF16, bfloat16; v the second, the parameter's shape, or with ADAM_ROW_V one value
 * per row (the mean of the row's squared gradient). `form` is the OR of those flags. */
enum { ADAM_ROW_V = 1, ADAM_M_BF16 = 2 };

typedef struct {
    void *m; /* float * or, with m16, uint16_t * (bfloat16 bits); NULL: no update */
    float *v;
    float lr_t, b1, b2, eps, wd, bc2;
    int row_v, m16;
} RowAdam;

static RowAdam row_adam(void *m, float *v, const float *hyper, int64_t form) {
    RowAdam a = {m, v, 0, 0, 0, 0, 0, 1, (form & ADAM_ROW_V) != 0, (form & ADAM_M_BF16) != 0};
    if (m) { a.lr_t = hyper[0]; a.b1 = hyper[1]; a.b2 = hyper[2]; a.eps = hyper[3]; a.wd = hyper[4]; a.bc2 = hyper[5]; }
    return a;
}

#define INLINE static inline __attribute__((always_inline))

/* bfloat16 first moments: the update computes in float32 and stores the moment rounded to the
 * nearest even bfloat16, as torch's .to(torch.bfloat16) does (a NaN stays a NaN). Half the
 * moment's bytes: the update of a touched row waits on memory. */
INLINE float bf16_to_f32(uint16_t u) { const uint32_t x = (uint32_t)u << 16; float f; memcpy(&f, &x, 4); return f; }
INLINE uint16_t f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* sqrt(x) of a second moment (x >= 0). -ffast-math lets GCC vectorise sqrtf(x) as x * rsqrt(x)
 * refined by a Newton step, and the hardware's rsqrt reads a subnormal x (below FLT_MIN) as 0:
 * the root came out infinite or NaN, and so did the weights. Such moments are no corner case: a
 * row whose gradient entries all stay below about 3e-18 has a subnormal mean square, and on a
 * DAG the copies of a label on paths the model has ruled out get gradients scaled by their tiny
 * share of the label's probability. A subnormal is scaled into the normal range by 2^64 (exact)
 * and its root back by 2^-32, so every x gets the root's usual precision. */
INLINE float moment_root(float x) {
    const int tiny = x < FLT_MIN;
    return sqrtf(tiny ? x * 0x1p64f : x) * (tiny ? 0x1p-32f : 1.0f);
}

/* One row's loops for one type of first moment: M_T its element type, M_LOAD / M_STORE how a
 * float is read from and written to it. The same operations, in the same order, as LazyAdam's
 * torch route. */
#define ADAM_ROW(NAME, M_T, M_LOAD, M_STORE)                                                              \
    INLINE void NAME(float *restrict p, const RowAdam *a, int64_t row, const float *restrict g, int64_t H) { \
        p += row * H;                                                                                     \
        M_T *restrict m = (M_T *)a->m + row * H;                                                          \
        if (a->row_v) {                                                                                   \
            float sq = 0.0f;                                                                              \
            for (int64_t j = 0; j < H; j++) {                                                             \
                const float gj = a->wd != 0.0f ? g[j] + a->wd * p[j] : g[j];                              \
                sq += gj * gj;                                                                            \
            }                                                                                             \
            const float vr = a->v[row] * a->b2 + (1.0f - a->b2) * (sq / (float)H);                        \
            a->v[row] = vr;                                                                               \
            const float step = a->lr_t / (moment_root(vr / a->bc2) + a->eps);                             \
            for (int64_t j = 0; j < H; j++) {                                                             \
                const float gj = a->wd != 0.0f ? g[j] + a->wd * p[j] : g[j];                              \
                const float mj = M_LOAD(m[j]) * a->b1 + (1.0f - a->b1) * gj;                              \
                m[j] = M_STORE(mj);                                                                       \
                p[j] -= step * mj;                                                                        \
            }                                                                                             \
            return;                                                                                       \
        }                                                                                                 \
        float *restrict v = a->v + row * H;                                                               \
        for (int64_t j = 0; j < H; j++) {                                                                 \
            const float gj = a->wd != 0.0f ? g[j] + a->wd * p[j] : g[j];                                  \
            const float mj = M_LOAD(m[j]) * a->b1 + (1.0f - a->b1) * gj;                                  \
            const float vj = v[j] * a->b2 + (1.0f - a->b2) * gj * gj;                                     \
            m[j] = M_STORE(mj);                                                                           \
            v[j] = vj;                                                                                    \
            p[j] -= a->lr_t * (mj / (moment_root(vj / a->bc2) + a->eps));                                 \
        }                                                                                                 \
    }

#define SAME(x) (x)
ADAM_ROW(adam_row_f32, float, SAME, SAME)
ADAM_ROW(adam_row_bf16, uint16_t, bf16_to_f32, f32_to_bf16)

/* Adam on row `row` of p (H wide) with gradient g. */
INLINE void adam_row(float *restrict p, const RowAdam *a, int64_t row, const float *restrict g, int64_t H) {
    if (a->m16) adam_row_bf16(p, a, row, g, H);
    else adam_row_f32(p, a, row, g, H);
}

/* ---------------------------------------------------------------- the step */

struct Step {
    const Work *w;
    int64_t H, HS; /* width; row stride of the step's own (B, H) blocks, padded (see ps_run) */
    const int64_t *xptr, *xidx;
    const float *xval, *W_in, *b_in, *W_out, *b_out;
    float *h, *score, *grad, *dh, *sbuf, *gbuf, *dW_in, *dW_out, *db_out;
    /* The fused update (adam.m set): the rows' gradients go to a per-thread scratch row and Adam
     * updates the weight row (upd) at once, while the row is in cache, instead of the gradient
     * being written out for the optimizer to read back. */
    float *upd, *gscratch;
    RowAdam adam;
    const int64_t *upd_rows; /* rows_update_task: the rows of upd to update, their gradients upd_grad */
    const float *upd_grad;
    const float *dh_dense;
    float path_scale, level_scale;
    const float *sw; /* the samples' weights (NULL: all 1): a row's scale is its sample's weight times these */
    int T;
    int relu; /* ps_forward: the hidden rows through max(h, 0); ps_finish: dh masked by h > 0 */
    double loss[MAX_THREADS][2], dloss[MAX_THREADS][2];
    int nonfinite[MAX_THREADS], dnonfinite[MAX_THREADS];
    const Text *text; /* ps_text_scores / ps_text_grad: the class texts; text_grad 1 for the gradient */
    int text_grad;
};

/* The inner loops, as functions so that their restrict parameters hold (GCC does not vectorise
 * them through restrict locals); inlined into each target clone of their callers. */

INLINE void dot4(const float *restrict row, const float *restrict h0, const float *restrict h1,
                 const float *restrict h2, const float *restrict h3, int64_t H, float *out) {
    float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (int64_t j = 0; j < H; j++) {
        const float r = row[j];
        a0 += h0[j] * r; a1 += h1[j] * r; a2 += h2[j] * r; a3 += h3[j] * r;
    }
    out[0] = a0; out[1] = a1; out[2] = a2; out[3] = a3;
}

INLINE float dot1(const float *restrict row, const float *restrict h, int64_t H) {
    float a = 0;
    for (int64_t j = 0; j < H; j++) a += h[j] * row[j];
    return a;
}

/* gw += sum_k g_k h_k and d_k += g_k row, for four distinct samples k */
INLINE void back4(const float *restrict row, float *restrict gw, const float *restrict h0, const float *restrict h1,
                  const float *restrict h2, const float *restrict h3, float *restrict d0, float *restrict d1,
                  float *restrict d2, float *restrict d3, float g0, float g1, float g2, float g3, int64_t H) {
    for (int64_t j = 0; j < H; j++) {
        const float r = row[j];
        gw[j] += g0 * h0[j] + g1 * h1[j] + g2 * h2[j] + g3 * h3[j];
        d0[j] += g0 * r; d1[j] += g1 * r; d2[j] += g2 * r; d3[j] += g3 * r;
    }
}

INLINE void back1(const float *restrict row, float *restrict gw, const float *restrict h, float *restrict d, float g,
                  int64_t H) {
    for (int64_t j = 0; j < H; j++) { gw[j] += g * h[j]; d[j] += g * row[j]; }
}

/* Ask for a weight row before it is needed: the rows of a big table a step touches are scattered
 * over hundreds of megabytes (WordNet's nouns), so each is a main-memory fetch. */
INLINE void prefetch_row(const float *p, int64_t H) {
    for (int64_t j = 0; j < H; j += 16) __builtin_prefetch(p + j);
}

/* The moments of row `row`, asked for ahead of the fused update. */
INLINE void prefetch_adam(const RowAdam *a, int64_t row, int64_t H) {
    if (a->m16) prefetch_row((const float *)((const uint16_t *)a->m + row * H), H / 2);
    else prefetch_row((const float *)a->m + row * H, H);
    if (!a->row_v) prefetch_row(a->v + row * H, H);
}

INLINE void axpy(float *restrict out, const float *restrict x, float a, int64_t H) {
    for (int64_t j = 0; j < H; j++) out[j] += a * x[j];
}

static inline int64_t B_of(const Step *s) { return s->w->B; }

CLONES static void hidden_task(const Step *s, int tid, int64_t lo, int64_t hi) {
    (void)tid;
    const int64_t H = s->H;
    for (int64_t b = lo; b < hi; b++) {
        float *restrict out = s->h + b * s->HS;
        for (int64_t j = 0; j < H; j++) out[j] = 0.0f;
        for (int64_t k = s->xptr[b]; k < s->xptr[b + 1]; k++) {
            if (k + 4 < s->xptr[B_of(s)]) prefetch_row(s->W_in + s->xidx[k + 4] * H, H);
            axpy(out, s->W_in + s->xidx[k] * H, s->xval[k], H);
        }
        for (int64_t j = 0; j < H; j++) out[j] += s->b_in[j];
        if (s->relu) /* max(h, 0) on the bits (-ffast-math may drop NaN checks): a NaN stays NaN, so the
                      * step's loss still reports it */
            for (int64_t j = 0; j < H; j++) {
                uint32_t u;
                memcpy(&u, out + j, 4);
                if ((u >> 31) && (u & 0x7fffffffu) <= 0x7f800000u) out[j] = 0.0f;
            }
    }
}

/* Scores of the entries of the sparse columns [lo, hi) of sparse_u: each weight row read once,
 * for four samples at a time. */
CLONES static void score_task(const Step *s, int tid, int64_t lo, int64_t hi) {
    (void)tid;
    const Work *w = s->w;
    const int64_t H = s->H, HS = s->HS, *eptr = w->e_ptr.p, *es = w->e_sample.p, *ucol = w->ucol.p;
    const int64_t *su = w->sparse_u.p;
    const float *restrict h = s->h;
    float *restrict out = s->sbuf + w->B * w->D;
    for (int64_t i = lo; i < hi; i++) {
        const int64_t u = su[i];
        if (i + 2 < hi) prefetch_row(s->W_out + ucol[su[i + 2]] * H, H);
        const float *restrict row = s->W_out + ucol[u] * H;
        const float bias = s->b_out[ucol[u]];
        int64_t e = eptr[u];
        for (; e + 4 <= eptr[u + 1]; e += 4) {
            float a[4];
            dot4(row, h + es[e] * HS, h + es[e + 1] * HS, h + es[e + 2] * HS, h + es[e + 3] * HS, H, a);
            out[e] = a[0] + bias; out[e + 1] = a[1] + bias; out[e + 2] = a[2] + bias; out[e + 3] = a[3] + bias;
        }
        for (; e < eptr[u + 1]; e++) out[e] = dot1(row, h + es[e] * HS, H) + bias;
    }
}

/* Softmax rows [lo, hi): their loss, and d loss / d score of every pair. */
CLONES static void loss_task(const Step *s, int tid, int64_t lo, int64_t hi) {
    Step *m = (Step *)s;
    const Work *w = s->w;
    const int64_t *start = w->row_start.p, *tgt = w->row_target.p, *pe = w->pair_entry.p, *eat = w->e_at.p;
    const int64_t *psample = w->pair_sample.p, *corr = w->n_samp ? w->row_corr.p : NULL;
    const float *poff = w->pair_off.p;
    double path = 0.0, level = 0.0;
    int bad = 0;
    for (int64_t r = lo; r < hi; r++) {
        const int64_t a = start[r], z = start[r + 1];
        float *restrict x = s->score + a;
        int odd = 0;
        for (int64_t i = 0; i < z - a; i++) { x[i] = s->sbuf[eat[pe[a + i]]]; odd |= is_nonfinite(x[i]); }
        if (odd) { bad = 1; continue; }
        if (corr && corr[r]) /* a sampled row: the drawn columns' corrections (the target's is 0) */
            for (int64_t i = 0; i < z - a; i++) x[i] += poff[a + i];
        float top = x[0];
        for (int64_t i = 1; i < z - a; i++) top = x[i] > top ? x[i] : top;
        float total = 0.0f;
        for (int64_t i = 0; i < z - a; i++) total += expf(x[i] - top);
        const float lse = logf(total) + top;
        const float weight = s->sw ? s->sw[psample[a]] : 1.0f; /* every pair of a row is its sample's */
        const float scale = (r < w->RS ? s->path_scale : s->level_scale) * weight;
        float *g = s->grad + a;
        for (int64_t i = 0; i < z - a; i++) g[i] = scale * expf(x[i] - lse);
        s->grad[tgt[r]] -= scale;
        const double row_loss = (double)weight * ((double)lse - (double)s->score[tgt[r]]);
        if (r < w->RS) path += row_loss; else level += row_loss;
    }
    m->loss[tid][0] = path;
    m->loss[tid][1] = level;
    m->nonfinite[tid] = bad;
}

/* One dense row over a sampled set (positions k in the sample's block row S, corrections off):
 * d loss / d score, times `scale`, added into G; returns lse - the target's logit (unweighted),
 * or 0 with *bad set when a score is not finite (the step's loss is then NaN). */
INLINE double sampled_row(const float *restrict S, float *restrict G, const int64_t *restrict k,
                          const float *restrict off, int64_t n, int64_t tpos, float scale, int *bad) {
    int odd = 0;
    float top = S[k[0]] + off[0];
    for (int64_t i = 0; i < n; i++) {
        const float v = S[k[i]];
        odd |= is_nonfinite(v);
        top = v + off[i] > top ? v + off[i] : top;
    }
    if (odd) { *bad = 1; return 0.0; }
    float total = 0.0f;
    for (int64_t i = 0; i < n; i++) total += expf(S[k[i]] + off[i] - top);
    const float lse = logf(total) + top;
    for (int64_t i = 0; i < n; i++) G[k[i]] += scale * expf(S[k[i]] + off[i] - lse);
    G[k[tpos]] -= scale;
    return (double)lse - (double)(S[k[tpos]] + off[tpos]);
}

/* The dense rows of samples [lo, hi): their loss, and d loss / d score added into the dense
 * block's gradient G (after gsum_task: a sample's rows are all in one thread, and two of its
 * rows may share a column: a path row's group and a level row's ancestors). */
CLONES static void dense_task(const Step *s, int tid, int64_t lo, int64_t hi) {
    Step *m = (Step *)s;
    const Work *w = s->w;
    const int64_t D = w->D, *dptr = w->d_ptr.p, *dset = w->d_set.p, *dtpos = w->d_tpos.p, *dlev = w->d_level.p;
    const int64_t *sp = w->set_ptr.p, *sk = w->set_k.p, *corr = w->n_samp ? w->set_corr.p : NULL;
    double path = 0.0, level = 0.0;
    int bad = 0;
    for (int64_t b = lo; b < hi; b++) {
        const float *restrict S = s->sbuf + b * D;
        float *restrict G = s->gbuf + b * D;
        const float weight = s->sw ? s->sw[b] : 1.0f;
        for (int64_t r = dptr[b]; r < dptr[b + 1]; r++) {
            const int64_t *restrict k = sk + sp[dset[r]], n = sp[dset[r] + 1] - sp[dset[r]];
            if (corr && corr[dset[r]]) { /* a sampled group's set: the drawn columns' corrections */
                const float *restrict off = (const float *)w->set_off.p + sp[dset[r]];
                const float scale = (dlev[r] ? s->level_scale : s->path_scale) * weight;
                const double row_loss = (double)weight * sampled_row(S, G, k, off, n, dtpos[r], scale, &bad);
                if (dlev[r]) level += row_loss; else path += row_loss;
                continue;
            }
            int odd = 0;
            float top = S[k[0]];
            for (int64_t i = 0; i < n; i++) { const float v = S[k[i]]; odd |= is_nonfinite(v); top = v > top ? v : top; }
            if (odd) { bad = 1; continue; }
            float total = 0.0f;
            for (int64_t i = 0; i < n; i++) total += expf(S[k[i]] - top);
            const float lse = logf(total) + top;
            const float scale = (dlev[r] ? s->level_scale : s->path_scale) * weight;
            for (int64_t i = 0; i < n; i++) G[k[i]] += scale * expf(S[k[i]] - lse);
            G[k[dtpos[r]]] -= scale;
            const double row_loss = (double)weight * ((double)lse - (double)S[k[dtpos[r]]]);
            if (dlev[r]) level += row_loss; else path += row_loss;
        }
    }
    m->dloss[tid][0] = path;
    m->dloss[tid][1] = level;
    m->dnonfinite[tid] = bad;
}

/* The pairs' gradients of distinct columns [lo, hi) summed per entry (into the dense block
 * or the sparse entries; each column's entries are its own, so threads never share one). */
CLONES static void gsum_task(const Step *s, int tid, int64_t lo, int64_t hi) {
    (void)tid;
    const Work *w = s->w;
    const int64_t *uptr = w->u_ptr.p, *upairs = w->u_pairs.p, *pe = w->pair_entry.p, *eat = w->e_at.p;
    const int64_t *eptr = w->e_ptr.p;
    float *G = s->gbuf;
    for (int64_t u = lo; u < hi; u++) {
        for (int64_t e = eptr[u]; e < eptr[u + 1]; e++) G[eat[e]] = 0.0f;
        for (int64_t q = uptr[u]; q < uptr[u + 1]; q++) G[eat[pe[upairs[q]]]] += s->grad[upairs[q]];
    }
}

/* Backward of the sparse columns [lo, hi) of sparse_u: each column's weight and bias gradient
 * (its own row of the output) and the hidden gradient, into this thread's own (B, H) block,
 * four entries (four distinct samples) at a time. */
CLONES static void back_task(const Step *s, int tid, int64_t lo, int64_t hi) {
    const Work *w = s->w;
    const int64_t H = s->H, HS = s->HS, *su = w->sparse_u.p;
    const int64_t *eptr = w->e_ptr.p, *es = w->e_sample.p, *ucol = w->ucol.p;
    const float *restrict h = s->h;
    const float *restrict eg = s->gbuf + w->B * w->D;
    float *restrict dh = s->dh + (int64_t)tid * w->B * HS;
    for (int64_t i = lo; i < hi; i++) {
        const int64_t u = su[i];
        if (i + 2 < hi) {
            prefetch_row(s->W_out + ucol[su[i + 2]] * H, H);
            if (s->adam.m) prefetch_adam(&s->adam, ucol[su[i + 2]], H);
        }
        const float *row = s->W_out + ucol[u] * H; /* not restrict: the fused update writes it below */
        float *restrict gw = s->adam.m ? s->gscratch + (int64_t)tid * HS : s->dW_out + u * H;
        float gb = 0.0f;
        for (int64_t j = 0; j < H; j++) gw[j] = 0.0f;
        int64_t e = eptr[u];
        for (; e + 4 <= eptr[u + 1]; e += 4) {
            const float g0 = eg[e], g1 = eg[e + 1], g2 = eg[e + 2], g3 = eg[e + 3];
            back4(row, gw, h + es[e] * HS, h + es[e + 1] * HS, h + es[e + 2] * HS, h + es[e + 3] * HS,
                  dh + es[e] * HS, dh + es[e + 1] * HS, dh + es[e + 2] * HS, dh + es[e + 3] * HS, g0, g1, g2, g3, H);
            gb += g0 + g1 + g2 + g3;
        }
        for (; e < eptr[u + 1]; e++) {
            back1(row, gw, h + es[e] * HS, dh + es[e] * HS, eg[e], H);
            gb += eg[e];
        }
        s->db_out[u] = gb;
        if (s->adam.m) adam_row(s->upd, &s->adam, ucol[u], gw, H); /* after the row's last read */
    }
}

/* The hidden gradient of samples [lo, hi): the threads' blocks summed into block 0, plus the
 * dense block's (dh_dense, unpadded rows, from the caller's matrix product). */
CLONES static void reduce_task(const Step *s, int tid, int64_t lo, int64_t hi) {
    (void)tid;
    const int64_t H = s->H, HS = s->HS, stride = s->w->B * HS;
    float *restrict dst = s->dh;
    for (int t = 1; t < s->T; t++) {
        const float *restrict src = s->dh + t * stride;
        for (int64_t i = lo * HS; i < hi * HS; i++) dst[i] += src[i];
    }
    if (s->dh_dense)
        for (int64_t b = lo; b < hi; b++) axpy(dst + b * HS, s->dh_dense + b * H, 1.0f, H);
    if (s->relu) /* ReLU's gradient: through where the activated hidden row (ps_forward's) is > 0 */
        for (int64_t b = lo; b < hi; b++) {
            const float *restrict hb = s->h + b * HS;
            float *restrict d = dst + b * HS;
            for (int64_t j = 0; j < H; j++) d[j] = hb[j] > 0.0f ? d[j] : 0.0f;
        }
}

/* Input-layer gradient of the distinct features [lo, hi): the sum of value x hidden gradient
 * over the batch entries of each feature. */
CLONES static void input_task(const Step *s, int tid, int64_t lo, int64_t hi) {
    const Work *w = s->w;
    const int64_t H = s->H, *fptr = w->f_ptr.p, *fent = w->f_ent.p, *frow = w->f_row.p;
    const int64_t *feat = w->feat.p;
    for (int64_t f = lo; f < hi; f++) {
        if (s->adam.m && f + 2 < hi) {
            prefetch_row(s->upd + feat[f + 2] * H, H);
            prefetch_adam(&s->adam, feat[f + 2], H);
        }
        float *restrict out = s->adam.m ? s->gscratch + (int64_t)tid * s->HS : s->dW_in + f * H;
        for (int64_t j = 0; j < H; j++) out[j] = 0.0f;
        for (int64_t e = fptr[f]; e < fptr[f + 1]; e++) {
            axpy(out, s->dh + frow[e] * s->HS, s->xval[fent[e]], H);
        }
        if (s->adam.m) adam_row(s->upd, &s->adam, feat[f], out, H);
    }
}

/* Adam on rows upd_rows[lo, hi) of upd with gradients upd_grad (row i's at i * H): adam_rows,
 * and the fused update of the dense block's rows. The rows are scattered: the next row is asked
 * for while this one is updated, so its reads overlap the arithmetic (further ahead measured
 * no better). */
CLONES static void rows_update_task(const Step *s, int tid, int64_t lo, int64_t hi) {
    (void)tid;
    const int64_t H = s->H;
    for (int64_t i = lo; i < hi; i++) {
        if (i + 1 < hi) {
            prefetch_row(s->upd + s->upd_rows[i + 1] * H, H);
            prefetch_adam(&s->adam, s->upd_rows[i + 1], H);
        }
        adam_row(s->upd, &s->adam, s->upd_rows[i], s->upd_grad + i * H, H);
    }
}

/* Threads for n row updates: one when there are few (a thread start costs more than a few rows). */
static int rows_threads(int64_t n, int T) { return n < 64 * (int64_t)T ? 1 : T; }

/* The step runs in three calls around the caller's three matrix products of the dense block
 * (BLAS does them near the machine's peak; these loops do the sparse rest):
 *   ps_forward   hidden rows, the sparse entries' scores;       caller: S = h W_D^T + b_D
 *   ps_backward  the loss, every pair's gradient, the dense block's G (B, D), the sparse columns'
 *                weight, bias and hidden gradients;             caller: dW_D = G^T h, dh_D = G W_D
 *   ps_finish    the hidden gradient, the input layer's gradients, the output rows assembled.
 * Each takes the workspace of ps_prepare (same batch) and T threads. Weights: W_in (F, H),
 * b_in (H), W_out (N, H), b_out (N), C-contiguous float32. Return 0, or -1 out of memory. */

/* A caller's thread count within [1, MAX_THREADS]. */
static int clamp_threads(int64_t T) { return (int)(T < 1 ? 1 : (T > MAX_THREADS ? MAX_THREADS : T)); }

static Step *step_new(Work *w, int64_t T, int64_t H) {
    T = clamp_threads(T);
    const int64_t B = w->B, HS = H + 16;
    /* Rows of the (B, H) blocks are HS apart, not H: with H = 256 floats every row starts at a
     * multiple of 1 KiB, so the four h rows, four dh rows and the weight row a blocked loop
     * streams all map to the same L1 sets and evict each other (several times slower). */
    if (reserve(&w->score, 4 * (size_t)(w->P + 1)) || reserve(&w->grad, 4 * (size_t)(w->P + 1))
        || reserve(&w->hpad, 4 * (size_t)(B * HS + 1)) || reserve(&w->dh, 4 * (size_t)(T * B * HS + 1))
        || reserve(&w->sbuf, 4 * (size_t)(B * w->D + w->E + 1)) || reserve(&w->gbuf, 4 * (size_t)(B * w->D + w->E + 1))
        || reserve(&w->gscratch, 4 * (size_t)(T * HS + 1)))
        return NULL;
    Step *s = calloc(1, sizeof(Step));
    if (!s) return NULL;
    *s = (Step){.w = w, .H = H, .HS = HS, .h = w->hpad.p, .score = w->score.p, .grad = w->grad.p, .dh = w->dh.p,
                .sbuf = w->sbuf.p, .gbuf = w->gbuf.p, .gscratch = w->gscratch.p, .T = (int)T};
    return s;
}

/* ps_forward. Out: h (B, H) the hidden rows (relu 1: max(X W_in + b_in, 0), else linear);
 * dense_cols (D) the dense block's columns. The hidden rows stay in the workspace for
 * ps_backward and ps_finish. */
int64_t ps_forward(void *handle, int64_t T, const int64_t *xptr, const int64_t *xidx, const float *xval, int64_t H,
                   const float *W_in, const float *b_in, const float *W_out, const float *b_out, float *h,
                   int64_t *dense_cols, int64_t relu) {
    Work *w = handle;
    Step *s = step_new(w, T, H);
    if (!s) return -1;
    s->relu = relu != 0;
    const int64_t B = w->B, HS = s->HS;
    s->xptr = xptr; s->xidx = xidx; s->xval = xval; s->W_in = W_in; s->b_in = b_in; s->W_out = W_out; s->b_out = b_out;
    int Tb = (int)(B < s->T ? (B > 0 ? B : 1) : s->T);
    parallel(s, Tb, hidden_task, B, NULL);
    parallel(s, s->T, score_task, w->Us, w->sparse_w.p);
    for (int64_t b = 0; b < B; b++) memcpy(h + b * H, s->h + b * HS, sizeof(float) * (size_t)H);
    const int64_t *du = w->dense_u.p, *ucol = w->ucol.p;
    for (int64_t k = 0; k < w->D; k++) dense_cols[k] = ucol[du[k]];
    free(s);
    return 0;
}

/* ps_backward. In: S (B, D) the dense block's scores. Out: G (B, D) d loss / d S; dW_out (U, H)
 * and db_out (U) the gradients of the distinct columns' rows (the sparse columns' rows filled
 * here, the dense ones by ps_finish; db_out all); loss (3): the loss, its path part (mean over
 * path rows), its level part (mean over level rows, without level_weight; both means weighted
 * by the sample weights of ps_prepare); NaN where a score was not
 * finite. The fused update (m not NULL): W_out's sparse rows are updated by Adam here (m, v,
 * hyper, form as adam_rows takes them; W_out is written) and dW_out is not written. */
int64_t ps_backward(void *handle, int64_t T, int64_t H, float *W_out, const float *S, float level_weight,
                    float *G, float *dW_out, float *db_out, double *loss, void *m, float *v, const float *hyper,
                    int64_t form) {
    Work *w = handle;
    Step *s = step_new(w, T, H);
    if (!s) return -1;
    const int64_t B = w->B, D = w->D, rows = w->SR;
    s->W_out = W_out; s->dW_out = dW_out; s->db_out = db_out;
    s->upd = W_out; s->adam = row_adam(m, v, hyper, form);
    /* the means' denominators: the (weighted) row counts; an empty term divides by 1 */
    s->path_scale = 1.0f / (float)(w->RW > 0.0 ? w->RW : 1.0);
    s->level_scale = level_weight / (float)(w->LRW > 0.0 ? w->LRW : 1.0);
    s->sw = w->has_w ? (const float *)w->sw.p : NULL;
    memcpy(s->sbuf, S, sizeof(float) * (size_t)(B * D));
    parallel(s, s->T, loss_task, rows, w->row_start.p);
    memset(s->gbuf, 0, sizeof(float) * (size_t)(B * D));
    parallel(s, s->T, gsum_task, w->U, w->u_ptr.p);
    parallel(s, (int)(B < s->T ? (B > 0 ? B : 1) : s->T), dense_task, B, w->d_cost.p);
    memset(s->dh, 0, sizeof(float) * (size_t)(s->T * B * s->HS));
    parallel(s, s->T, back_task, w->Us, w->sparse_w.p);
    memcpy(G, s->gbuf, sizeof(float) * (size_t)(B * D));
    const int64_t *du = w->dense_u.p;
    for (int64_t k = 0; k < D; k++) db_out[du[k]] = 0.0f;
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = 0; k < D; k++) db_out[du[k]] += G[b * D + k];
    static const double NaN = __builtin_nan("");
    double path = 0.0, level = 0.0;
    int bad = 0;
    for (int t = 0; t < s->T; t++) {
        path += s->loss[t][0] + s->dloss[t][0];
        level += s->loss[t][1] + s->dloss[t][1];
        bad |= s->nonfinite[t] | s->dnonfinite[t];
    }
    path /= w->RW > 0.0 ? w->RW : 1.0;
    level /= w->LRW > 0.0 ? w->LRW : 1.0;
    loss[0] = bad ? NaN : path + (double)level_weight * level;
    loss[1] = path;
    loss[2] = level;
    free(s);
    return 0;
}

/* ps_finish. In: dh_dense (B, H) = G W_D and dW_dense (D, H) = G^T h (the caller's products);
 * relu as ps_forward's (1: the hidden gradient is masked by the activated hidden rows > 0).
 * Out: dW_in (NF, H) the input rows' gradients (rows: feat_out, NF); db_in (H); dW_out's dense
 * rows; col_out (U) the distinct columns. The fused update (W_in not NULL): Adam updates W_in's
 * touched rows (m_in, v_in, hyper_in, form_in) and W_out's dense rows (m_out, v_out,
 * hyper_out, form_out) here, and dW_in and dW_out are not written. */
int64_t ps_finish(void *handle, int64_t T, const int64_t *xptr, const float *xval, int64_t H, const float *dh_dense,
                  const float *dW_dense, float *dW_in, float *db_in, float *dW_out, int64_t *feat_out,
                  int64_t *col_out, float *W_in, void *m_in, float *v_in, const float *hyper_in, int64_t form_in,
                  float *W_out, void *m_out, float *v_out, const float *hyper_out, int64_t form_out, int64_t relu) {
    Work *w = handle;
    Step *s = step_new(w, T, H);
    if (!s) return -1;
    s->relu = relu != 0;
    const int64_t B = w->B, HS = s->HS;
    s->T = (int)(w->dh.cap / sizeof(float) >= (size_t)(s->T * B * HS) ? s->T : 1); /* blocks of ps_backward */
    s->xptr = xptr; s->xval = xval; s->dW_in = dW_in; s->dh_dense = dh_dense;
    int Tb = (int)(B < s->T ? (B > 0 ? B : 1) : s->T);
    parallel(s, Tb, reduce_task, B, NULL);
    const int fused = W_in && m_in && W_out && m_out;
    if (fused) { s->upd = W_in; s->adam = row_adam(m_in, v_in, hyper_in, form_in); }
    parallel(s, s->T, input_task, w->NF, w->f_ptr.p);
    for (int64_t j = 0; j < H; j++) db_in[j] = 0.0f;
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < H; j++) db_in[j] += s->dh[b * HS + j];
    const int64_t *du = w->dense_u.p;
    if (fused) {
        if (reserve(&w->dense_rows, 8 * (size_t)(w->D + 1))) { free(s); return -1; }
        int64_t *ids = I64(w->dense_rows);
        const int64_t *ucol = w->ucol.p;
        for (int64_t k = 0; k < w->D; k++) ids[k] = ucol[du[k]];
        s->upd = W_out; s->adam = row_adam(m_out, v_out, hyper_out, form_out);
        s->upd_rows = ids; s->upd_grad = dW_dense;
        parallel(s, rows_threads(w->D, s->T), rows_update_task, w->D, NULL);
    } else {
        for (int64_t k = 0; k < w->D; k++) memcpy(dW_out + du[k] * H, dW_dense + k * H, sizeof(float) * (size_t)H);
    }
    memcpy(feat_out, w->feat.p, sizeof(int64_t) * (size_t)w->NF);
    memcpy(col_out, w->ucol.p, sizeof(int64_t) * (size_t)w->U);
    free(s);
    return 0;
}

/* ---------------------------------------------------------------- class text
 *
 * SparseMLP's class text adds to each score the lexical match of the sample's input with the
 * column's text: match(b, c) = sum over the text's entries (v, f) of x_b[feature of v] * mw[v]
 * * f, with mw the (scaled) match weights over the class vocabulary (V features). Only the
 * vocabulary features present in the batch can match (a few thousand), so the batch's input
 * on them is one (B, NP) table, and each entry reads its column's few text entries from it.
 * The match has no gradient into the hidden rows or the output layer, only into mw. */

/* The class texts and mw of one call (Step.text); S the caller's dense scores (scores pass). */
struct Text {
    const int64_t *tptr, *tidx;
    const float *tval, *mw;
    float *S;
};

/* The match of sample b with column c. */
static inline float text_match(const Work *w, const Text *t, int64_t b, int64_t c) {
    const int64_t *vm = w->v_mark.p;
    const float *xv = (const float *)w->xv.p + b * w->NP;
    float acc = 0.0f;
    for (int64_t q = t->tptr[c]; q < t->tptr[c + 1]; q++) {
        const int64_t slot = vm[t->tidx[q]];
        if (slot >= 0) acc += xv[slot] * t->mw[t->tidx[q]] * t->tval[q];
    }
    return acc;
}

/* d loss / d mw of sample b's entry with column c (gradient g), into this thread's slots. */
static inline void text_grad(const Work *w, const Text *t, float *restrict out, int64_t b, int64_t c, float g) {
    const int64_t *vm = w->v_mark.p;
    const float *xv = (const float *)w->xv.p + b * w->NP;
    for (int64_t q = t->tptr[c]; q < t->tptr[c + 1]; q++) {
        const int64_t slot = vm[t->tidx[q]];
        if (slot >= 0) out[slot] += g * xv[slot] * t->tval[q];
    }
}

/* Columns [lo, hi) of the dense block's D columns followed by the U distinct columns: the match
 * into their entries' scores, or (s->text_grad) their entries' match-weight gradient, from the
 * block's and the entries' d loss / d score (gbuf), into the thread's slots. */
static void text_task(const Step *s, int tid, int64_t lo, int64_t hi) {
    const Text *t = s->text;
    const Work *w = s->w;
    const int64_t B = w->B, D = w->D, *ucol = w->ucol.p, *du = w->dense_u.p, *eptr = w->e_ptr.p;
    const int64_t *es = w->e_sample.p, *eat = w->e_at.p;
    float *sbuf = w->sbuf.p;
    const float *gbuf = w->gbuf.p;
    float *out = (float *)w->tgrad.p + (int64_t)tid * (w->NP > 0 ? w->NP : 1);
    for (int64_t i = lo; i < hi; i++) {
        if (i < D) {
            const int64_t c = ucol[du[i]];
            if (t->tptr[c] == t->tptr[c + 1]) continue;
            for (int64_t b = 0; b < B; b++) {
                if (s->text_grad) text_grad(w, t, out, b, c, gbuf[b * D + i]);
                else t->S[b * D + i] += text_match(w, t, b, c);
            }
            continue;
        }
        const int64_t u = i - D, c = ucol[u];
        if (t->tptr[c] == t->tptr[c + 1]) continue;
        for (int64_t e = eptr[u]; e < eptr[u + 1]; e++) {
            if (eat[e] < B * D) continue; /* a dense column's entry: scored in the block */
            if (s->text_grad) text_grad(w, t, out, es[e], c, gbuf[eat[e]]);
            else sbuf[eat[e]] += text_match(w, t, es[e], c);
        }
    }
}

/* Run text_task over the dense block's and the distinct columns in T threads. */
static void text_run(Work *w, int64_t T, const Text *t, int grad) {
    Step st = {.w = w, .T = clamp_threads(T), .text = t, .text_grad = grad};
    parallel(&st, st.T, text_task, w->D + w->U, NULL);
}

/* ps_text_scores: after ps_forward (same batch) and the caller's dense product S (B, D): adds
 * the class-text match to S and to the sparse entries' scores. vpos (F) each input feature's
 * vocabulary position or -1; tptr (N + 1), tidx, tval the columns' texts over the vocabulary
 * (V features); mw (V) the scaled match weights. Returns 0, or -1 out of memory. */
int64_t ps_text_scores(void *handle, int64_t T, const int64_t *xptr, const int64_t *xidx, const float *xval,
                       const int64_t *vpos, int64_t V, const int64_t *tptr, const int64_t *tidx, const float *tval,
                       const float *mw, float *S) {
    Work *w = handle;
    const int64_t B = w->B, nnz = xptr[B] - xptr[0];
    if (V > w->V) {
        if (reserve(&w->v_mark, 8 * (size_t)V)) return -1;
        for (int64_t v = w->V; v < V; v++) I64(w->v_mark)[v] = -1;
        w->V = V;
    }
    if (reserve(&w->slot_v, 8 * (size_t)(nnz + 1))) return -1;
    int64_t *vm = I64(w->v_mark), *sv = I64(w->slot_v), NP = 0;
    for (int64_t k = xptr[0]; k < xptr[B]; k++) {
        const int64_t v = vpos[xidx[k]];
        if (v >= 0 && vm[v] < 0) { vm[v] = NP; sv[NP++] = v; }
    }
    w->NP = NP;
    if (reserve(&w->xv, 4 * (size_t)(B * NP + 1)) || reserve(&w->tgrad, 4 * (size_t)(MAX_THREADS * (NP + 1))))
        return -1;
    float *xv = w->xv.p;
    memset(xv, 0, 4 * (size_t)(B * NP));
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = xptr[b]; k < xptr[b + 1]; k++) {
            const int64_t v = vpos[xidx[k]];
            if (v >= 0) xv[b * NP + vm[v]] += xval[k];
        }
    const Text t = {tptr, tidx, tval, mw, S};
    text_run(w, T, &t, 0);
    return 0;
}

/* ps_text_grad: after ps_backward (same batch): d loss / d mw (V, out; zero where no present
 * feature). Clears the batch's vocabulary marks. */
int64_t ps_text_grad(void *handle, int64_t T, const int64_t *tptr, const int64_t *tidx, const float *tval,
                     const float *mw, int64_t V, float *grad) {
    Work *w = handle;
    const int64_t NP = w->NP;
    const int Tn = clamp_threads(T);
    memset(w->tgrad.p, 0, 4 * (size_t)(Tn * (NP > 0 ? NP : 1)));
    const Text t = {tptr, tidx, tval, mw, NULL};
    text_run(w, Tn, &t, 1);
    const float *tg = w->tgrad.p;
    int64_t *vm = I64(w->v_mark);
    const int64_t *sv = I64(w->slot_v);
    for (int64_t v = 0; v < V; v++) grad[v] = 0.0f;
    for (int64_t slot = 0; slot < NP; slot++) {
        float g = 0.0f;
        for (int i = 0; i < Tn; i++) g += tg[(int64_t)i * (NP > 0 ? NP : 1) + slot];
        grad[sv[slot]] = g;
        vm[sv[slot]] = -1;
    }
    w->NP = 0;
    return 0;
}

/* adam_rows: Adam on the given rows of a float32 parameter (LazyAdam's sparse step).
 *   p (n_param_rows, H): the parameter; m its first moment, of p's shape, float32 or (form &
 *   ADAM_M_BF16) bfloat16; v: the second moment, of p's shape or (form & ADAM_ROW_V) one value
 *   per row (n_param_rows), the mean of the row's squared gradient; rows (n) distinct row ids;
 *   g (n, H) their gradients; lr_t = lr / (1 - b1^step), bc2 = 1 - b2^step.
 * The same operations, in the same order, as LazyAdam's torch route. A row-wise second moment
 * reads and writes 20 bytes per touched entry instead of 28, a bfloat16 first moment 4 fewer:
 * the update is memory-bound. */
void adam_rows(float *p, void *m, float *v, const int64_t *rows, const float *g, int64_t n, int64_t H,
               float lr_t, float b1, float b2, float eps, float wd, float bc2, int64_t T, int64_t form) {
    const float hyper[6] = {lr_t, b1, b2, eps, wd, bc2};
    Step st = {.upd = p, .adam = row_adam(m, v, hyper, form), .H = H, .upd_rows = rows, .upd_grad = g};
    st.T = clamp_threads(T);
    parallel(&st, rows_threads(n, st.T), rows_update_task, n, NULL);
}

/* ---------------------------------------------------------------- data-parallel rows
 *
 * rows_merge: the union of `world` sorted lists of distinct keys (each rank's coalesced sparse
 * gradient: the linear indices of its rows) and, for each key of the union, the sum of its
 * value rows (W floats each) over the lists that hold it, added in list order (rank order, so
 * that every rank computes the same floats). keys[r], vals[r]: list r (counts[r] entries);
 * out_keys, out_vals: room for the sum of the counts. Each summed row is then divided by
 * `divisor` (the number of ranks: their mean) while it is in cache. Returns the size of the
 * union. One pass over the rows, where the torch route (unique, zeros, one index_add per rank,
 * the division) took five. */
int64_t rows_merge(int64_t world, const int64_t *counts, const int64_t *const *keys, const float *const *vals,
                   int64_t W, float divisor, int64_t *out_keys, float *out_vals) {
    int64_t at[MAX_THREADS] = {0}, n = 0;
    if (world < 1 || world > MAX_THREADS) return -1;
    for (;;) {
        int64_t key = INT64_MAX;
        for (int64_t r = 0; r < world; r++)
            if (at[r] < counts[r] && keys[r][at[r]] < key) key = keys[r][at[r]];
        if (key == INT64_MAX) break;
        float *restrict out = out_vals + n * W;
        int first = 1;
        for (int64_t r = 0; r < world; r++) {
            if (at[r] >= counts[r] || keys[r][at[r]] != key) continue;
            const float *restrict v = vals[r] + at[r] * W;
            if (first) memcpy(out, v, sizeof(float) * (size_t)W);
            else for (int64_t j = 0; j < W; j++) out[j] += v[j];
            first = 0;
            at[r]++;
        }
        for (int64_t j = 0; j < W; j++) out[j] /= divisor;
        out_keys[n++] = key;
    }
    return n;
}
