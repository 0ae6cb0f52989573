/* Exact best-first decoding of the sibling partition for a linear output layer, one row at a time.
 *
 * Why C: the batched torch search (best_first.py) scores a tiny fraction of the columns of the
 * exhaustive route on WordNet's nouns but runs only a little faster, because it is dozens of
 * small tensor operations per mini-batch plus a matrix product against the union of a batch's
 * columns (most of which any one row does not need). Here each row runs a textbook best-first
 * search with a binary heap, scoring exactly the members of the groups it expands with a dot
 * product (h[row] . W[column] + b[column]): the work is what the search needs, with no per-step
 * overhead.
 *
 * Not a Python module: hiclass_parallel/ops/_native_best_first.py loads it with ctypes (which
 * releases the GIL, so chunks of rows run in parallel threads). Built by setup.py as its own
 * optional extension WITHOUT -ffast-math: the search compares -inf and must round exactly as the
 * exhaustive route does (child = score + (joint(parent) - lse), in the scores' precision), which
 * reassociation would change. The dot product is written with independent accumulators so that
 * it vectorises anyway.
 *
 * The search, per row (the same rules as best_first.py and the exhaustive decode.best_paths):
 *   - a node's joint log-probability J is the sum of its path's group log-softmaxes; group 0 (the
 *     top level) starts at J = 0; a group is expanded by scoring all its members (children in
 *     ascending id, then its stop column when the model has stops);
 *   - candidates: leaves, and under terminal semantics every internal node through its stop
 *     column; the k best are kept ordered by (value descending, node ascending) -- the exhaustive
 *     route's lowest-id rule for ties;
 *   - the heap pops the open internal node of highest J; it is expanded unless J is below the
 *     k-th candidate's value minus a small slack (J never increases down a path, up to rounding);
 *   - a row that scores a NaN or +inf, or more than max_columns columns, is flagged and left to
 *     the caller's exhaustive route (which gives the exact answer, the empty path for NaN/+inf).
 *
 * An optional sparse match term (class text): score(r, c) += sum over the features j the row and
 * the column share of rval(r, j) * tval(c, j); each row's entries are scattered into a dense
 * scratch of the match's width for its search and cleared after it. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_clones.h" /* CLONES: an AVX2 + FMA version and a baseline one */

/* Relative slack of the pruning test (as _SLACK in best_first.py): joints are sums of rounded
 * terms, so a child may exceed its parent by a few ulps; expanding a little more never changes
 * the result. */
#define SLACK 1e-5

/* Weight rows fetched ahead of the dot products, in members of the group: the rows are
 * scattered, and asking for them early overlaps their reads with the arithmetic. */
#define PREFETCH 2

/* Status of a row (the `status` output). */
#define ROW_DONE 0
#define ROW_UNDECIDABLE 1 /* a scored column is NaN or +inf */
#define ROW_OVER_BUDGET 2 /* the search would score more than max_columns columns */

#define DEFINE_SEARCH(NAME, T)                                                                       \
CLONES static T NAME##_dot(const T* a, const T* b, int64_t n) {                                      \
    T acc[16] = {0};                                                                                 \
    int64_t i = 0;                                                                                   \
    for (; i + 16 <= n; i += 16)                                                                     \
        for (int j = 0; j < 16; j++) acc[j] += a[i + j] * b[i + j];                                  \
    T s = 0;                                                                                         \
    for (int j = 0; j < 16; j++) s += acc[j];                                                        \
    for (; i < n; i++) s += a[i] * b[i];                                                             \
    return s;                                                                                        \
}                                                                                                    \
/* ask for a weight row ahead of its use: a group's rows lie anywhere in the weight matrix, */       \
/* so the hardware prefetcher cannot guess them, and the search waits on memory otherwise */          \
static inline void NAME##_prefetch(const T* row, int64_t dim) {                                       \
    const char* p = (const char*)row;                                                                \
    for (int64_t o = 0; o < dim * (int64_t)sizeof(T); o += 64) __builtin_prefetch(p + o);            \
}                                                                                                    \
typedef struct { T j; int64_t node; } NAME##_entry;                                                  \
/* max-heap of open nodes by joint */                                                                \
static void NAME##_push(NAME##_entry* heap, int64_t* size, T j, int64_t node) {                     \
    int64_t i = (*size)++;                                                                           \
    while (i > 0) {                                                                                  \
        int64_t up = (i - 1) / 2;                                                                    \
        if (!(heap[up].j < j)) break;                                                                \
        heap[i] = heap[up];                                                                          \
        i = up;                                                                                      \
    }                                                                                                \
    heap[i].j = j;                                                                                   \
    heap[i].node = node;                                                                             \
}                                                                                                    \
static NAME##_entry NAME##_pop(NAME##_entry* heap, int64_t* size) {                                 \
    NAME##_entry top = heap[0], last = heap[--(*size)];                                              \
    int64_t i = 0, n = *size;                                                                        \
    for (;;) {                                                                                       \
        int64_t c = 2 * i + 1;                                                                       \
        if (c >= n) break;                                                                           \
        if (c + 1 < n && heap[c + 1].j > heap[c].j) c++;                                             \
        if (!(heap[c].j > last.j)) break;                                                            \
        heap[i] = heap[c];                                                                           \
        i = c;                                                                                       \
    }                                                                                                \
    if (n) heap[i] = last;                                                                           \
    return top;                                                                                      \
}                                                                                                    \
/* insert (v, node) into the k best, ordered by value descending then node ascending */             \
static void NAME##_offer(T* top_v, int64_t* top_n, int64_t k, T v, int64_t node) {                  \
    int64_t i = k - 1;                                                                               \
    if (v < top_v[i] || (v == top_v[i] && node >= top_n[i])) return;                                 \
    while (i > 0 && (v > top_v[i - 1] || (v == top_v[i - 1] && node < top_n[i - 1]))) {             \
        top_v[i] = top_v[i - 1];                                                                     \
        top_n[i] = top_n[i - 1];                                                                     \
        i--;                                                                                         \
    }                                                                                                \
    top_v[i] = v;                                                                                    \
    top_n[i] = node;                                                                                 \
}                                                                                                    \
/* NAME(h, n_rows, dim, W, b, n_classes, group_ptr, group_cols, child_group, group_parent, is_leaf,  \
 *      k, terminal, max_columns, heap_cap, largest, top_v, top_n, work, status):                   \
 *   h (n_rows, dim) hidden rows and W (n_outputs, dim), b (n_outputs): C-contiguous;               \
 *   the tree as in SiblingPlan (group_ptr, group_cols, child_group, group_parent) and is_leaf (C);  \
 *   top_v, top_n (n_rows, k) out: the k best candidates (-inf, 2**62 where fewer were found);      \
 *   work (n_rows) out: columns scored; status (n_rows) out: ROW_*.                                 \
 *   heap_cap: room for the open nodes (each internal node is pushed at most once, and only while   \
 *   at most max_columns are scored: min(n_classes, max_columns) suffices); largest: the largest group. \
 *   The match term (rptr NULL: none): rptr (n_rows + 1) absolute offsets into ridx, rval (the      \
 *   rows' features in [0, V) and values); tptr (n_outputs + 1), tidx, tval the columns'.           \
 * Returns 0, or -1 when out of memory. */                                                         \
int NAME(const T* h, int64_t n_rows, int64_t dim, const T* W, const T* b, int64_t n_classes,       \
         const int64_t* group_ptr, const int64_t* group_cols, const int64_t* child_group,            \
         const int64_t* group_parent, const uint8_t* is_leaf, int64_t k, int terminal,              \
         int64_t max_columns, int64_t heap_cap, int64_t largest,                                     \
         T* top_v, int64_t* top_n, int64_t* work, uint8_t* status,                                  \
         const int64_t* rptr, const int64_t* ridx, const T* rval,                                   \
         const int64_t* tptr, const int64_t* tidx, const T* tval, int64_t V) {                      \
    NAME##_entry* heap = malloc(sizeof(NAME##_entry) * (size_t)(heap_cap > 0 ? heap_cap : 1));      \
    T* s = malloc(sizeof(T) * (size_t)(largest > 0 ? largest : 1));                                  \
    T* words = rptr ? calloc((size_t)(V > 0 ? V : 1), sizeof(T)) : NULL;                            \
    if (!heap || !s || (rptr && !words)) { free(heap); free(s); free(words); return -1; }           \
    const T inf = (T)INFINITY;                                                                       \
    for (int64_t r = 0; r < n_rows; r++) {                                                           \
        const T* hr = h + r * dim;                                                                   \
        if (words)                                                                                  \
            for (int64_t q = rptr[r]; q < rptr[r + 1]; q++) words[ridx[q]] += rval[q];              \
        T* tv = top_v + r * k;                                                                       \
        int64_t* tn = top_n + r * k;                                                                 \
        for (int64_t i = 0; i < k; i++) { tv[i] = -inf; tn[i] = (int64_t)1 << 62; }                  \
        int64_t size = 0, done = 0;                                                                  \
        uint8_t st = ROW_DONE;                                                                       \
        int64_t g = 0;                                                                               \
        T base = 0;                                                                                  \
        for (;;) {                                                                                   \
            /* expand group g from a node of joint `base` */                                         \
            const int64_t lo = group_ptr[g], len = group_ptr[g + 1] - lo;                            \
            if (done + len > max_columns) { st = ROW_OVER_BUDGET; break; }              \
            done += len;                                                                             \
            T m = -inf;                                                                              \
            for (int64_t i = 0; i < len && i < PREFETCH; i++) NAME##_prefetch(W + group_cols[lo + i] * dim, dim); \
            for (int64_t i = 0; i < len; i++) {                                                      \
                const int64_t c = group_cols[lo + i];                                                \
                if (i + PREFETCH < len) NAME##_prefetch(W + group_cols[lo + i + PREFETCH] * dim, dim); \
                T v = NAME##_dot(hr, W + c * dim, dim) + b[c];                                      \
                if (words) {                                                                        \
                    T match = 0;                                                                    \
                    for (int64_t q = tptr[c]; q < tptr[c + 1]; q++) match += words[tidx[q]] * tval[q];\
                    v += match;                                                                     \
                }                                                                                   \
                if (isnan(v) || v == inf) st = ROW_UNDECIDABLE;                                      \
                s[i] = v;                                                                            \
                m = v > m ? v : m;                                                                   \
            }                                                                                        \
            if (st != ROW_DONE) break;                                                               \
            /* log-sum-exp shifted by the maximum (0 when all are -inf), as segment_logsumexp */     \
            const T shift = isfinite(m) ? m : 0;                                                     \
            T total = 0;                                                                             \
            for (int64_t i = 0; i < len; i++) total += (T)exp((double)(s[i] - shift));               \
            T lse = (T)log((double)total) + shift;                                                   \
            if (lse == -inf) lse = 0; /* a group of -inf has no mass */                              \
            const T offset = base - lse;                                                             \
            for (int64_t i = 0; i < len; i++) {                                                      \
                const int64_t c = group_cols[lo + i];                                                \
                const T joint = s[i] + offset;                                                       \
                if (c >= n_classes) {                                                                \
                    if (terminal) NAME##_offer(tv, tn, k, joint, group_parent[g]);                   \
                } else if (is_leaf[c]) {                                                             \
                    NAME##_offer(tv, tn, k, joint, c);                                               \
                } else {                                                                             \
                    NAME##_push(heap, &size, joint, c);                                              \
                }                                                                                    \
            }                                                                                        \
            /* the next open node worth expanding, if any */                                         \
            const T bound = tv[k - 1];                                                               \
            const T cut = bound - (T)(SLACK * (1 + fabs((double)bound)));                            \
            if (size == 0 || heap[0].j < cut) break;                                                 \
            NAME##_entry e = NAME##_pop(heap, &size);                                                \
            g = child_group[e.node];                                                                 \
            base = e.j;                                                                              \
        }                                                                                            \
        work[r] = done;                                                                              \
        status[r] = st;                                                                              \
        if (words)                                                                                  \
            for (int64_t q = rptr[r]; q < rptr[r + 1]; q++) words[ridx[q]] = 0;                     \
    }                                                                                                \
    free(heap);                                                                                      \
    free(s);                                                                                         \
    free(words);                                                                                    \
    return 0;                                                                                        \
}

DEFINE_SEARCH(best_first_f32, float)
DEFINE_SEARCH(best_first_f64, double)
