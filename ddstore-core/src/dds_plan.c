/* ddstore-core: global row lookup and the batched-read planner.
 *
 * Batch planning:
 *   1. check every row against [0, total) (first bad one -> -DDS_ERANGE),
 *      noting min, max and whether the rows are already non-decreasing;
 *   2. order the (row, position) pairs by row then position: nothing to do
 *      for non-decreasing input; else pack each pair into one uint64 key
 *      ((row - min) << posbits | position) and sort the keys (insertion
 *      sort for small batches, LSD radix sort on 8-bit digits otherwise,
 *      skipping digits that are the same in every key); when the packed key
 *      would not fit in 64 bits, a stable merge sort of (row, position)
 *      pairs is used instead;
 *   3. walk the sorted pairs once: a repeated row becomes a copy from the
 *      slot of its first occurrence; rows adjacent in the same owner's
 *      shard form a run; each run becomes one read straight into the
 *      destination when the destination slots of its rows are consecutive
 *      and ascending, else one read into staging plus scatter copies when
 *      row_bytes <= merge_row_bytes_max, else one direct read per maximal
 *      sub-run of consecutive destination slots (one row at worst); every
 *      read is split at max_read_bytes.  DDS_PLAN_DIRECT: never staging,
 *      and a repeat starts a new run at its row (read again, after the run
 *      that read its first occurrence), so the plan has no copies.
 * The plan's arrays are grown on demand and reused, so planning allocates
 * nothing once the plan has seen a batch of the same size.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_*_np, strdup, clock_gettime, setenv */
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dds_internal.h"
#include "ddstore/errors.h"
#include "ddstore/plan.h"

#define INSERTION_SORT_MAX 32

typedef struct pair {
    int64_t row;
    uint64_t pos;
} pair_t;

/* ---- small helpers ---------------------------------------------------- */

static unsigned bit_width(uint64_t x)
{
    return x == 0 ? 0u : 64u - (unsigned)__builtin_clzll(x);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    size_t c;
    void *q;

    if (need <= *cap)
        return 0;
    c = *cap > 0 ? *cap : 16;
    while (c < need)
        c = c > SIZE_MAX / 2 ? need : 2 * c;
    if (c > SIZE_MAX / elem)
        return -1;
    q = realloc(*p, c * elem);
    if (q == NULL)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

/* Largest r in [lo, hi] with off[r] <= row; requires off[lo] <= row. */
static inline int owner_search(const int64_t *off, int lo, int hi, int64_t row)
{
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (off[mid] <= row)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

int dds_layout_locate(const int64_t *offsets, int nranks, int64_t row,
                      int *owner_p, int64_t *local_row_p)
{
    int r;

    if (offsets == NULL || nranks < 1)
        return dds_error(-DDS_EINVAL, "layout: no offsets or nranks %d < 1",
                         nranks);
    if (row < offsets[0] || row >= offsets[nranks])
        return dds_error(-DDS_ERANGE,
                         "row %lld is out of range [0, %lld)", (long long)row,
                         (long long)offsets[nranks]);
    r = owner_search(offsets, 0, nranks - 1, row);
    if (owner_p != NULL)
        *owner_p = r;
    if (local_row_p != NULL)
        *local_row_p = row - offsets[r];
    return 0;
}

/* ---- plan storage ----------------------------------------------------- */

void dds_plan_init(dds_plan_t *plan)
{
    if (plan != NULL)
        memset(plan, 0, sizeof(*plan));
}

void dds_plan_fini(dds_plan_t *plan)
{
    if (plan == NULL)
        return;
    free(plan->ops);
    free(plan->copies);
    free(plan->scratch);
    memset(plan, 0, sizeof(*plan));
}

static int check_params(const dds_plan_params_t *p, dds_plan_t *plan)
{
    if (p == NULL || plan == NULL)
        return dds_error(-DDS_EINVAL, "plan: NULL params or plan");
    if (p->nranks < 1 || p->offsets == NULL)
        return dds_error(-DDS_EINVAL, "plan: nranks %d, offsets %p",
                         p->nranks, (const void *)p->offsets);
    if (p->row_bytes == 0 || p->row_bytes > (size_t)INT64_MAX)
        return dds_error(-DDS_EINVAL, "plan: row_bytes %zu must be in "
                                      "[1, 2^63)", p->row_bytes);
    if (p->offsets[0] != 0 || p->offsets[p->nranks] < 0)
        return dds_error(-DDS_EINVAL,
                         "plan: offsets must start at 0 and be "
                         "non-decreasing (offsets[0]=%lld, total=%lld)",
                         (long long)p->offsets[0],
                         (long long)p->offsets[p->nranks]);
    if (p->offsets[p->nranks] > INT64_MAX / (int64_t)p->row_bytes)
        return dds_error(-DDS_EINVAL,
                         "plan: %lld rows of %zu bytes overflow 64-bit "
                         "byte offsets",
                         (long long)p->offsets[p->nranks], p->row_bytes);
    return 0;
}

static int empty_plan(dds_plan_t *plan)
{
    plan->nops = 0;
    plan->ncopies = 0;
    plan->staging_bytes = 0;
    plan->nrows = 0;
    plan->nrows_unique = 0;
    return 0;
}

/* ---- sorting ---------------------------------------------------------- */

static void insertion_sort_u64(uint64_t *a, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        uint64_t k = a[i];
        size_t j = i;
        while (j > 0 && a[j - 1] > k) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = k;
    }
}

/* Stable LSD radix sort of n keys by their bits [lo, lo + bits); returns
 * the array (a or tmp) holding the result.  The bits below `lo` keep their
 * order (the batch planner's keys are in position order already, so only
 * the row bits above the position bits are sorted: one pass fewer for a
 * typical batch). */
static uint64_t *radix_sort_u64(uint64_t *a, uint64_t *tmp, size_t n,
                                unsigned lo, unsigned bits)
{
    uint32_t hist[8][256];
    unsigned passes = (bits + 7) / 8;
    uint64_t *src = a, *dst = tmp;

    if (passes == 0)
        return a;
    memset(hist, 0, passes * sizeof(hist[0]));
    for (size_t i = 0; i < n; i++) {
        uint64_t k = a[i] >> lo;
        for (unsigned p = 0; p < passes; p++)
            hist[p][(k >> (8 * p)) & 255u]++;
    }
    for (unsigned p = 0; p < passes; p++) {
        uint32_t *h = hist[p];
        unsigned shift = lo + 8 * p;
        uint32_t sum = 0;
        if (h[(src[0] >> shift) & 255u] == n)
            continue; /* every key has this digit */
        for (unsigned d = 0; d < 256; d++) {
            uint32_t c = h[d];
            h[d] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++) {
            uint64_t k = src[i];
            dst[h[(k >> shift) & 255u]++] = k;
        }
        uint64_t *t = src;
        src = dst;
        dst = t;
    }
    return src;
}

/* Stable bottom-up merge sort by row; returns a or tmp. */
static pair_t *merge_sort_pairs(pair_t *a, pair_t *tmp, size_t n)
{
    pair_t *src = a, *dst = tmp;
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n;
            size_t hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                dst[k++] = src[j].row < src[i].row ? src[j++] : src[i++];
            while (i < mid)
                dst[k++] = src[i++];
            while (j < hi)
                dst[k++] = src[j++];
        }
        pair_t *t = src;
        src = dst;
        dst = t;
    }
    return src;
}

/* ---- the walk --------------------------------------------------------- */

typedef struct walk {
    dds_read_op_t *ops;
    size_t nops;
    dds_copy_op_t *copies;
    size_t ncopies;
    dds_copy_op_t *reps;
    size_t nreps;
    size_t *upos;     /* first-occurrence position of each unique row */
    size_t nuniq;
    size_t run_start; /* index in upos of the current run's first row */
    const int64_t *off;
    int nranks;
    size_t rb, maxr, merge_max;
    int owner;
    int64_t owner_begin, owner_end;
    int64_t prev_row, run_row;
    size_t prev_pos;
    size_t staging;
    int direct;       /* DDS_PLAN_DIRECT: repeats are reads, not copies */
    size_t nagain;    /* direct: repeats, counted in nuniq (upos holds their
                         slots) but not unique */
} walk_t;

static inline void emit_read(walk_t *w, int owner, int staged, int64_t src,
                             size_t len, size_t dst)
{
    if (w->maxr == 0 || len <= w->maxr) {
        dds_read_op_t *op = &w->ops[w->nops++];
        op->owner = owner;
        op->staged = staged;
        op->src_offset = src;
        op->len = len;
        op->dst_offset = dst;
        return;
    }
    while (len > 0) {
        size_t piece = len < w->maxr ? len : w->maxr;
        dds_read_op_t *op = &w->ops[w->nops++];
        op->owner = owner;
        op->staged = staged;
        op->src_offset = src;
        op->len = piece;
        op->dst_offset = dst;
        src += (int64_t)piece;
        dst += piece;
        len -= piece;
    }
}

static inline void add_copy(dds_copy_op_t *arr, size_t *n, int from_staging,
                            size_t src, size_t dst, size_t len)
{
    if (*n > 0) {
        dds_copy_op_t *c = &arr[*n - 1];
        if (c->from_staging == from_staging && c->src_offset + c->len == src &&
            c->dst_offset + c->len == dst) {
            c->len += len;
            return;
        }
    }
    arr[*n].from_staging = from_staging;
    arr[*n].src_offset = src;
    arr[*n].dst_offset = dst;
    arr[*n].len = len;
    (*n)++;
}

static void flush_run(walk_t *w)
{
    size_t s = w->run_start, e = w->nuniq, k, j, rb = w->rb;
    const size_t *u = w->upos;
    int64_t src;

    if (s == e)
        return;
    k = e - s;
    src = (w->run_row - w->owner_begin) * (int64_t)rb;
    for (j = s + 1; j < e && u[j] == u[j - 1] + 1; j++)
        ;
    if (j == e) { /* one row, or destination slots consecutive */
        emit_read(w, w->owner, 0, src, k * rb, u[s] * rb);
        return;
    }
    if (rb <= w->merge_max) { /* scattered slots: stage, then scatter */
        emit_read(w, w->owner, 1, src, k * rb, w->staging);
        for (j = s; j < e; j++)
            add_copy(w->copies, &w->ncopies, 1, w->staging + (j - s) * rb,
                     u[j] * rb, rb);
        w->staging += k * rb;
        return;
    }
    /* big rows: direct reads of maximal consecutive sub-runs */
    size_t a = s;
    for (j = s + 1; j <= e; j++) {
        if (j == e || u[j] != u[j - 1] + 1) {
            emit_read(w, w->owner, 0, src + (int64_t)((a - s) * rb),
                      (j - a) * rb, u[a] * rb);
            a = j;
        }
    }
}

/* The current run's reads (a single row without flush_run's scan). */
static inline void end_run(walk_t *w)
{
    if (w->nuniq - w->run_start == 1) /* the common single-row run */
        emit_read(w, w->owner, 0,
                  (w->run_row - w->owner_begin) * (int64_t)w->rb, w->rb,
                  w->upos[w->run_start] * w->rb);
    else
        flush_run(w);
}

static inline void walk_one(walk_t *w, int64_t row, size_t pos)
{
    if (row == w->prev_row) {
        if (!w->direct) { /* repeat: copy from the first occurrence */
            add_copy(w->reps, &w->nreps, 0, w->prev_pos * w->rb, pos * w->rb,
                     w->rb);
            return;
        }
        /* direct: the row read again, into this slot: it starts a new run
         * (after the one that read its first occurrence) */
        end_run(w);
        w->run_start = w->nuniq;
        w->run_row = row;
        w->upos[w->nuniq++] = pos;
        w->nagain++;
        w->prev_pos = pos;
        return;
    }
    if (row != w->prev_row + 1 || row >= w->owner_end) {
        end_run(w);
        if (row >= w->owner_end) {
            int o = owner_search(w->off, w->owner + 1, w->nranks - 1, row);
            w->owner = o;
            w->owner_begin = w->off[o];
            w->owner_end = w->off[o + 1];
        }
        w->run_start = w->nuniq;
        w->run_row = row;
    }
    w->upos[w->nuniq++] = pos;
    w->prev_row = row;
    w->prev_pos = pos;
}

/* ---- batch ------------------------------------------------------------ */

int dds_plan_batch(const dds_plan_params_t *params, const int64_t *rows,
                   size_t n, dds_plan_t *plan)
{
    size_t rb, maxr, merge_max, ops_bound, scratch_bytes, keys_bytes;
    int64_t total, mn, mx, prev;
    unsigned posbits, rowbits;
    int sorted = 1, packed, direct;
    walk_t w;
    int rc;

    rc = check_params(params, plan);
    if (rc != 0)
        return rc;
    direct = (params->field_mask & DDS_PLAN_PARAM_FLAGS) &&
             (params->flags & DDS_PLAN_DIRECT);
    if (n == 0)
        return empty_plan(plan);
    if (rows == NULL)
        return dds_error(-DDS_EINVAL, "plan: NULL rows");
    rb = params->row_bytes;
    if (n > SIZE_MAX / rb)
        return dds_error(-DDS_EINVAL, "plan: %zu rows of %zu bytes overflow "
                                      "the address space", n, rb);
    total = params->offsets[params->nranks];

    /* 1. check every row; min, max, order */
    mn = mx = prev = rows[0];
    for (size_t i = 0; i < n; i++) {
        int64_t r = rows[i];
        if (DDS_UNLIKELY((uint64_t)r >= (uint64_t)total))
            return dds_error(-DDS_ERANGE,
                             "index %lld at position %zu is out of range "
                             "[0, %lld)",
                             (long long)r, i, (long long)total);
        if (r < prev)
            sorted = 0;
        if (r < mn)
            mn = r;
        if (r > mx)
            mx = r;
        prev = r;
    }

    /* 2. space */
    maxr = params->max_read_bytes;
    merge_max = params->merge_row_bytes_max != 0
                    ? params->merge_row_bytes_max
                    : DDS_PLAN_MERGE_ROW_BYTES_DEFAULT;
    if (direct)
        merge_max = 0; /* no row is staged */
    ops_bound = n;   /* reads before splitting: one per row at most */
    if (maxr != 0) {
        size_t extra = (n * rb) / maxr;
        if (extra > SIZE_MAX - n)
            return dds_error(-DDS_ENOMEM, "plan: too many reads");
        ops_bound += extra;
    }
    posbits = bit_width((uint64_t)(n - 1));
    rowbits = bit_width((uint64_t)(mx - mn));
    packed = posbits < 64 && rowbits + posbits <= 64;
    keys_bytes = sorted ? 0 : packed ? 2 * n * sizeof(uint64_t)
                                     : 2 * n * sizeof(pair_t);
    scratch_bytes = keys_bytes + n * sizeof(size_t) + n * sizeof(dds_copy_op_t);
    if (grow((void **)&plan->ops, &plan->cap_ops, ops_bound,
             sizeof(dds_read_op_t)) != 0 ||
        grow((void **)&plan->copies, &plan->cap_copies, n,
             sizeof(dds_copy_op_t)) != 0 ||
        grow(&plan->scratch, &plan->cap_scratch, scratch_bytes, 1) != 0)
        return dds_error(-DDS_ENOMEM, "plan: out of memory for %zu rows", n);

    memset(&w, 0, sizeof(w));
    w.ops = plan->ops;
    w.copies = plan->copies;
    w.upos = (size_t *)((char *)plan->scratch + keys_bytes);
    w.reps = (dds_copy_op_t *)((char *)plan->scratch + keys_bytes +
                               n * sizeof(size_t));
    w.off = params->offsets;
    w.nranks = params->nranks;
    w.rb = rb;
    w.maxr = maxr;
    w.merge_max = merge_max;
    w.direct = direct;
    w.owner = -1;
    w.owner_begin = 0;
    w.owner_end = 0;
    w.prev_row = -2;

    /* 3. order and walk */
    if (sorted) {
        for (size_t i = 0; i < n; i++)
            walk_one(&w, rows[i], i);
    } else if (packed) {
        uint64_t *keys = (uint64_t *)plan->scratch, *out;
        uint64_t mask = posbits == 0 ? 0 : (~0ull >> (64 - posbits));
        for (size_t i = 0; i < n; i++)
            keys[i] = ((uint64_t)(rows[i] - mn) << posbits) | (uint64_t)i;
        if (n <= INSERTION_SORT_MAX) {
            insertion_sort_u64(keys, n);
            out = keys;
        } else {
            /* keys[i] holds position i: already in position order, so
             * a stable sort of the row bits orders by (row, position) */
            out = radix_sort_u64(keys, keys + n, n, posbits, rowbits);
        }
        for (size_t i = 0; i < n; i++) {
            uint64_t k = out[i];
            walk_one(&w, (int64_t)(k >> posbits) + mn, (size_t)(k & mask));
        }
    } else {
        pair_t *pairs = (pair_t *)plan->scratch, *out;
        for (size_t i = 0; i < n; i++) {
            pairs[i].row = rows[i];
            pairs[i].pos = i;
        }
        out = merge_sort_pairs(pairs, pairs + n, n);
        for (size_t i = 0; i < n; i++)
            walk_one(&w, out[i].row, (size_t)out[i].pos);
    }
    flush_run(&w);
    if (w.nreps > 0)
        memcpy(w.copies + w.ncopies, w.reps, w.nreps * sizeof(dds_copy_op_t));

    plan->nops = w.nops;
    plan->ncopies = w.ncopies + w.nreps;
    plan->staging_bytes = w.staging;
    plan->nrows = n;
    plan->nrows_unique = w.nuniq - w.nagain;
    return 0;
}

/* ---- range ------------------------------------------------------------ */

int dds_plan_range(const dds_plan_params_t *params, int64_t start,
                   int64_t nrows, dds_plan_t *plan)
{
    int64_t total, end;
    size_t rb, ops_bound;
    int first, last;
    walk_t w;
    int rc;

    rc = check_params(params, plan);
    if (rc != 0)
        return rc;
    total = params->offsets[params->nranks];
    if (start < 0 || nrows < 0 || start > total || nrows > total - start)
        return dds_error(-DDS_ERANGE,
                         "range of %lld rows from %lld is outside [0, %lld)",
                         (long long)nrows, (long long)start, (long long)total);
    if (nrows == 0)
        return empty_plan(plan);
    rb = params->row_bytes;
    if ((uint64_t)nrows > SIZE_MAX / rb)
        return dds_error(-DDS_EINVAL, "plan: %lld rows of %zu bytes overflow "
                                      "the address space",
                         (long long)nrows, rb);
    end = start + nrows;
    first = owner_search(params->offsets, 0, params->nranks - 1, start);
    last = owner_search(params->offsets, first, params->nranks - 1, end - 1);
    ops_bound = (size_t)(last - first) + 1;
    if (params->max_read_bytes != 0)
        ops_bound += ((size_t)nrows * rb) / params->max_read_bytes;
    if (grow((void **)&plan->ops, &plan->cap_ops, ops_bound,
             sizeof(dds_read_op_t)) != 0)
        return dds_error(-DDS_ENOMEM, "plan: out of memory");

    memset(&w, 0, sizeof(w));
    w.ops = plan->ops;
    w.maxr = params->max_read_bytes;
    for (int o = first; o <= last; o++) {
        int64_t b = params->offsets[o] > start ? params->offsets[o] : start;
        int64_t e = params->offsets[o + 1] < end ? params->offsets[o + 1] : end;
        if (e > b)
            emit_read(&w, o, 0, (b - params->offsets[o]) * (int64_t)rb,
                      (size_t)(e - b) * rb, (size_t)(b - start) * rb);
    }
    plan->nops = w.nops;
    plan->ncopies = 0;
    plan->staging_bytes = 0;
    plan->nrows = (size_t)nrows;
    plan->nrows_unique = (size_t)nrows;
    return 0;
}

/* ---- spans (ragged reads) --------------------------------------------- */

int dds_plan_spans(int nranks, size_t max_read_bytes, const dds_span_t *spans,
                   size_t n, dds_plan_t *plan)
{
    size_t *dsto, total = 0, ops_bound, scratch_bytes, m = 0;
    uint64_t *keys, *order;
    unsigned posbits, ownbits;
    walk_t w;

    if (plan == NULL || nranks < 1)
        return dds_error(-DDS_EINVAL, "plan: NULL plan or nranks %d < 1",
                         nranks);
    plan->nops = 0;
    plan->ncopies = 0;
    plan->staging_bytes = 0;
    plan->nrows = n;
    plan->nrows_unique = n;
    if (n > 0 && spans == NULL)
        return dds_error(-DDS_EINVAL, "plan: NULL spans");
    if (n > SIZE_MAX / (3 * sizeof(uint64_t)))
        return dds_error(-DDS_ENOMEM, "plan: too many spans (%zu)", n);
    /* owner (31 bits at most) above the position: one 64-bit sort key */
    posbits = n > 1 ? bit_width((uint64_t)(n - 1)) : 0;
    ownbits = bit_width((uint64_t)(nranks - 1));
    if (posbits + ownbits > 64)
        return dds_error(-DDS_ENOMEM, "plan: too many spans (%zu)", n);
    scratch_bytes = n * (sizeof(size_t) + 2 * sizeof(uint64_t));
    if (grow(&plan->scratch, &plan->cap_scratch, scratch_bytes, 1) != 0)
        return dds_error(-DDS_ENOMEM, "plan: out of memory for %zu spans", n);
    dsto = plan->scratch;
    keys = (uint64_t *)(dsto + n);

    /* 1. check, destination offsets, sort keys of the non-empty spans */
    for (size_t i = 0; i < n; i++) {
        const dds_span_t *sp = &spans[i];
        if (sp->owner < 0 || sp->owner >= nranks)
            return dds_error(-DDS_EINVAL, "plan: span %zu: owner %d is "
                             "outside [0, %d)", i, sp->owner, nranks);
        if (sp->src_offset < 0 ||
            sp->len > (uint64_t)INT64_MAX - (uint64_t)sp->src_offset)
            return dds_error(-DDS_EINVAL, "plan: span %zu: %zu bytes at "
                             "offset %lld are outside 64-bit offsets", i,
                             sp->len, (long long)sp->src_offset);
        if (sp->len > SIZE_MAX - total)
            return dds_error(-DDS_EINVAL, "plan: span %zu: the destination "
                             "offset overflows", i);
        dsto[i] = total;
        total += sp->len;
        if (sp->len > 0)
            keys[m++] = ((uint64_t)sp->owner << posbits) | (uint64_t)i;
    }
    ops_bound = n;
    if (max_read_bytes != 0) {
        size_t extra = total / max_read_bytes;
        if (extra > SIZE_MAX - n)
            return dds_error(-DDS_ENOMEM, "plan: too many reads");
        ops_bound += extra;
    }
    if (grow((void **)&plan->ops, &plan->cap_ops, ops_bound,
             sizeof(dds_read_op_t)) != 0)
        return dds_error(-DDS_ENOMEM, "plan: out of memory for %zu spans", n);

    /* 2. by owner, then position (request order): O(m) radix passes over
     * the key bits, never over the ranks */
    if (m <= INSERTION_SORT_MAX) {
        insertion_sort_u64(keys, m);
        order = keys;
    } else {
        /* keys in position order already: sort the owner bits only */
        order = radix_sort_u64(keys, keys + n, m, posbits, ownbits);
    }

    /* 3. per owner, in request order: merge continuations, split, emit */
    memset(&w, 0, sizeof(w));
    w.ops = plan->ops;
    w.maxr = max_read_bytes;
    {
        const uint64_t mask = posbits == 0 ? 0 : (~0ull >> (64 - posbits));
        size_t k = 0;
        while (k < m) {
            const size_t ia = (size_t)(order[k] & mask);
            const dds_span_t *a = &spans[ia];
            int64_t src = a->src_offset;
            size_t dst = dsto[ia], len = a->len;
            for (k++; k < m; k++) {
                const size_t ib = (size_t)(order[k] & mask);
                const dds_span_t *b = &spans[ib];
                if (b->owner != a->owner ||
                    b->src_offset != src + (int64_t)len ||
                    dsto[ib] != dst + len)
                    break;
                len += b->len;
            }
            emit_read(&w, a->owner, 0, src, len, dst);
        }
    }
    plan->nops = w.nops;
    return 0;
}

/* ---- lookups ---------------------------------------------------------- */

size_t dds_plan_owner_first(const dds_plan_t *plan, int owner)
{
    size_t lo = 0, hi = plan->nops;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (plan->ops[mid].owner < owner)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}
