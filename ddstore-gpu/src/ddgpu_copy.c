/* ddstore-gpu: copies, segment checks and merging (the public API over the runtime layer;
 * ddgpu_common.c has the map of these files). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ddgpu_internal.h"

/* ------------------------------------------------------------------------ */
/* Copies */

static int check_dir(const char *fn, dds_copy_dir_t dir)
{
    if (dir < DDS_COPY_DEFAULT || dir > DDS_COPY_D2D)
        return dds_error(-DDS_EINVAL, "%s: bad copy direction %d", fn,
                         (int)dir);
    return 0;
}

int ddgpu_copy_async(dds_copy_dir_t dir, void *dst, const void *src,
                     size_t bytes, const dds_mem_t *on)
{
    int rc = check_dir("ddgpu_copy_async", dir);
    if (rc != 0 || bytes == 0)
        return rc;
    if (dst == NULL || src == NULL)
        return dds_error(-DDS_EINVAL,
                         "ddgpu_copy_async: NULL %s for %zu bytes",
                         dst == NULL ? "dst" : "src", bytes);
    rc = ddgpu_gpu_ready("ddgpu_copy_async");
    if (rc != 0)
        return rc;
    ddgpu_guard_t g;
    rc = ddgpu_guard_enter("ddgpu_copy_async", on, &g);
    if (rc == 0)
        rc = ddgpu_rt_memcpy_async(dir, dst, src, bytes, g.stream);
    ddgpu_guard_exit(&g);
    return rc;
}

size_t ddgpu_segs_coalesce(dds_memseg_t *segs, size_t nsegs)
{
    size_t out = 0;
    for (size_t i = 0; i < nsegs; i++) {
        if (segs[i].len == 0)
            continue;
        if (out > 0) {
            dds_memseg_t *p = &segs[out - 1];
            if (p->src_offset + p->len == segs[i].src_offset &&
                p->dst_offset + p->len == segs[i].dst_offset) {
                p->len += segs[i].len;
                continue;
            }
        }
        segs[out++] = segs[i];
    }
    return out;
}

/* Every segment's offsets + len fit size_t; with `cap_src` / `cap_dst`
 * (SIZE_MAX = unknown) also inside those extents. */
int ddgpu_segs_check(const char *fn, const dds_memseg_t *segs, size_t nsegs,
                     size_t cap_src, size_t cap_dst)
{
    for (size_t i = 0; i < nsegs; i++) {
        const dds_memseg_t *s = &segs[i];
        if (s->len > SIZE_MAX - s->src_offset ||
            s->len > SIZE_MAX - s->dst_offset)
            return dds_error(-DDS_ERANGE,
                             "%s: segment %zu (src %zu, dst %zu, len %zu) "
                             "overflows", fn, i, s->src_offset, s->dst_offset,
                             s->len);
        if (s->len > 0 && s->src_offset + s->len > cap_src)
            return dds_error(-DDS_ERANGE,
                             "%s: segment %zu reads [%zu, %zu) outside the "
                             "%zu-byte source buffer",
                             fn, i, s->src_offset, s->src_offset + s->len,
                             cap_src);
        if (s->len > 0 && s->dst_offset + s->len > cap_dst)
            return dds_error(-DDS_ERANGE,
                             "%s: segment %zu writes [%zu, %zu) outside the "
                             "%zu-byte destination buffer",
                             fn, i, s->dst_offset, s->dst_offset + s->len,
                             cap_dst);
    }
    return 0;
}

/* Issue the (merged) copies; inside a guard.  *ncopies_p = copies issued,
 * also on failure. */
int ddgpu_segs_copy_raw(dds_copy_dir_t dir, void *dst, const void *src,
                        const dds_memseg_t *segs, size_t nsegs, void *stream,
                        size_t *ncopies_p, size_t *bytes_p)
{
    size_t ncopies = 0, bytes = 0;
    int rc = 0;
    size_t i = 0;
    while (i < nsegs) {
        if (segs[i].len == 0) {
            i++;
            continue;
        }
        size_t so = segs[i].src_offset, d_o = segs[i].dst_offset;
        size_t len = segs[i].len;
        size_t j = i + 1;
        for (; j < nsegs; j++) {
            if (segs[j].len == 0)
                continue;
            if (segs[j].src_offset != so + len ||
                segs[j].dst_offset != d_o + len)
                break;
            len += segs[j].len;
        }
        rc = ddgpu_rt_memcpy_async(dir, (unsigned char *)dst + d_o,
                                   (const unsigned char *)src + so, len,
                                   stream);
        if (rc != 0)
            break;
        ncopies++;
        bytes += len;
        i = j;
    }
    if (ncopies_p)
        *ncopies_p = ncopies;
    if (bytes_p)
        *bytes_p = bytes;
    return rc;
}

int ddgpu_segs_nonempty(const dds_memseg_t *segs, size_t nsegs)
{
    for (size_t i = 0; i < nsegs; i++)
        if (segs[i].len > 0)
            return 1;
    return 0;
}

int ddgpu_copy_segments_async(dds_copy_dir_t dir, void *dst, const void *src,
                              const dds_memseg_t *segs, size_t nsegs,
                              const dds_mem_t *on, size_t *ncopies_p)
{
    static const char fn[] = "ddgpu_copy_segments_async";
    if (ncopies_p)
        *ncopies_p = 0;
    int rc = check_dir(fn, dir);
    if (rc != 0)
        return rc;
    if (nsegs > 0 && segs == NULL)
        return dds_error(-DDS_EINVAL, "%s: segs is NULL (nsegs %zu)", fn,
                         nsegs);
    rc = ddgpu_segs_check(fn, segs, nsegs, SIZE_MAX, SIZE_MAX);
    if (rc != 0 || !ddgpu_segs_nonempty(segs, nsegs))
        return rc;
    if (dst == NULL || src == NULL)
        return dds_error(-DDS_EINVAL, "%s: %s is NULL", fn,
                         dst == NULL ? "dst" : "src");
    rc = ddgpu_gpu_ready(fn);
    if (rc != 0)
        return rc;
    ddgpu_guard_t g;
    rc = ddgpu_guard_enter(fn, on, &g);
    if (rc == 0)
        rc = ddgpu_segs_copy_raw(dir, dst, src, segs, nsegs, g.stream,
                                 ncopies_p, NULL);
    ddgpu_guard_exit(&g);
    return rc;
}

int ddgpu_memset_async(void *dst, int value, size_t bytes, const dds_mem_t *on)
{
    if (bytes == 0)
        return 0;
    if (dst == NULL)
        return dds_error(-DDS_EINVAL, "ddgpu_memset_async: dst is NULL");
    int rc = ddgpu_gpu_ready("ddgpu_memset_async");
    if (rc != 0)
        return rc;
    ddgpu_guard_t g;
    rc = ddgpu_guard_enter("ddgpu_memset_async", on, &g);
    if (rc == 0)
        rc = ddgpu_rt_memset_async(dst, value, bytes, g.stream);
    ddgpu_guard_exit(&g);
    return rc;
}

