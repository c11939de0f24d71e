/* ddstore-ofi: memory registration (host and FI_HMEM), region blobs. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ddofi_internal.h"

_Static_assert((int)DDOFI_HMEM_SYSTEM == (int)FI_HMEM_SYSTEM, "hmem iface values");
_Static_assert((int)DDOFI_HMEM_CUDA == (int)FI_HMEM_CUDA, "hmem iface values");
_Static_assert((int)DDOFI_HMEM_ROCR == (int)FI_HMEM_ROCR, "hmem iface values");
_Static_assert((int)DDOFI_HMEM_ZE == (int)FI_HMEM_ZE, "hmem iface values");

static const char *iface_name(int iface)
{
    switch (iface) {
    case DDOFI_HMEM_SYSTEM: return "host";
    case DDOFI_HMEM_CUDA: return "cuda";
    case DDOFI_HMEM_ROCR: return "rocr";
    case DDOFI_HMEM_ZE: return "ze";
    default: return "unknown";
    }
}

int ddofi_mr_register(ddofi_fabric_t *f, const ddofi_mr_params_t *p, ddofi_mr_t **mr_p)
{
    if (!f || !p || !mr_p)
        return ddofi_error(-EINVAL, "ddofi_mr_register: NULL argument");
    *mr_p = NULL;
    int rc = ddofi_check_pid(f->pid, "fabric");
    if (rc)
        return rc;
    if (!p->buf && p->len)
        return ddofi_error(-EINVAL, "ddofi_mr_register: NULL buffer of %zu bytes", p->len);
    if (!(p->access & (DDOFI_ACCESS_LOCAL | DDOFI_ACCESS_REMOTE_READ)) ||
        (p->access & ~(unsigned)(DDOFI_ACCESS_LOCAL | DDOFI_ACCESS_REMOTE_READ)))
        return ddofi_error(-EINVAL, "ddofi_mr_register: access 0x%x: expected "
                           "DDOFI_ACCESS_LOCAL and/or DDOFI_ACCESS_REMOTE_READ", p->access);
    int iface = (p->field_mask & DDOFI_MR_FIELD_IFACE) ? p->iface : DDOFI_HMEM_SYSTEM;
    int device = (p->field_mask & DDOFI_MR_FIELD_DEVICE) ? p->device : 0;
    ddofi_ep_t *ep = (p->field_mask & DDOFI_MR_FIELD_EP) ? p->ep : NULL;
    if (iface < DDOFI_HMEM_SYSTEM || iface > DDOFI_HMEM_ZE)
        return ddofi_error(-EINVAL, "ddofi_mr_register: unknown hmem iface %d", iface);
    if (iface != DDOFI_HMEM_SYSTEM && !(f->info->caps & FI_HMEM))
        return ddofi_error(-DDOFI_ENOHMEM,
                           "provider %s (domain %s) was opened without FI_HMEM: %s memory "
                           "(device %d) cannot be registered; open the fabric with hmem=1 "
                           "on a provider that supports it (e.g. cxi, verbs, efa)",
                           f->prov_name, f->domain_name, iface_name(iface), device);
    int remote = (p->access & DDOFI_ACCESS_REMOTE_READ) != 0;
    int bind = remote && ((f->mr_mode & FI_MR_ENDPOINT) || (f->quirk->flags & DDOFI_Q_MR_BIND));
    if (bind && p->len) {
        if (!ep)
            return ddofi_error(-EINVAL,
                               "provider %s binds memory regions to an endpoint "
                               "(FI_MR_ENDPOINT): pass the server endpoint in params->ep",
                               f->prov_name);
        rc = ddofi_check_pid(ep->pid, "endpoint");
        if (rc)
            return rc;
    }

    ddofi_mr_t *m = calloc(1, sizeof *m);
    if (!m)
        return ddofi_error(-ENOMEM, "out of memory");
    m->fab = f;
    m->pid = f->pid;
    m->buf = p->buf;
    m->len = p->len;
    m->access = p->access;
    m->iface = iface;

    if (p->len) {
        struct iovec iov = {p->buf, p->len};
        struct fi_mr_attr attr = {0};
        attr.mr_iov = &iov;
        attr.iov_count = 1;
        attr.access = (p->access & DDOFI_ACCESS_LOCAL ? FI_READ : 0) |
                      (remote ? FI_REMOTE_READ : 0);
        attr.requested_key = (f->mr_mode & FI_MR_PROV_KEY) ? 0 : atomic_fetch_add(&f->next_key, 1);
        attr.iface = (enum fi_hmem_iface)iface;
        if (iface == DDOFI_HMEM_CUDA)
            attr.device.cuda = device;
        else if (iface == DDOFI_HMEM_ZE)
            attr.device.ze = device;
        else
            attr.device.reserved = (uint64_t)device;
        uint64_t t0 = ddofi_now_ns();
        rc = fi_mr_regattr(f->domain, &attr, 0, &m->mr);
        if (rc) {
            rc = ddofi_error_fi(rc, "fi_mr_regattr(%s, %zu bytes of %s memory at %p)",
                                f->prov_name, p->len, iface_name(iface), p->buf);
            goto fail;
        }
        if (bind) {
            rc = fi_mr_bind(m->mr, &ep->ep->fid, 0);
            if (rc) {
                rc = ddofi_error_fi(rc, "fi_mr_bind(endpoint)");
                goto fail;
            }
            rc = fi_mr_enable(m->mr);
            if (rc) {
                rc = ddofi_error_fi(rc, "fi_mr_enable");
                goto fail;
            }
            m->ep = ep;
            atomic_fetch_add(&ep->mr_refs, 1);
        }
        m->key = fi_mr_key(m->mr);
        if (m->key == FI_KEY_NOTAVAIL) {
            rc = ddofi_error(-DDOFI_EPROVIDER, "fi_mr_key: key not available (FI_MR_RAW keys "
                             "are not supported)");
            goto fail;
        }
        m->desc = fi_mr_desc(m->mr);
        DDOFI_LOG(DDOFI_LOG_TRACE, "registered %zu bytes at %p (key 0x%llx) in %.1f us",
                  p->len, p->buf, (unsigned long long)m->key,
                  (double)(ddofi_now_ns() - t0) / 1e3);
    }
    atomic_fetch_add(&f->refs, 1);
    *mr_p = m;
    return 0;

fail:
    if (m->ep)
        atomic_fetch_sub(&m->ep->mr_refs, 1);
    if (m->mr)
        fi_close(&m->mr->fid);
    free(m);
    return rc;
}

int ddofi_mr_deregister(ddofi_mr_t *m)
{
    if (!m)
        return 0;
    if (m->pid != getpid()) {
        free(m);
        return 0;
    }
    int rc = 0;
    if (m->mr) {
        int r = fi_close(&m->mr->fid);
        if (r)
            rc = ddofi_error_fi(r, "fi_close(mr)");
    }
    if (m->ep)
        atomic_fetch_sub(&m->ep->mr_refs, 1);
    atomic_fetch_sub(&m->fab->refs, 1);
    free(m);
    return rc;
}

/* ---------------- region blob ----------------
 *  0 u32 magic "DDOM"   4 u16 version   6 u16 flags (bit 0: VIRT_ADDR,
 *                                                   bit 1: device memory)
 *  8 u32 provider tag  12 u32 checksum (FNV-1a of bytes 0..11, 16..47)
 * 16 u64 base  24 u64 key  32 u64 size  40 u64 reserved (0)
 */
#define MR_MAGIC 0x4d4f4444u /* "DDOM" */
#define MR_VERSION 1u
#define MR_FLAG_VIRT 1u
#define MR_FLAG_DEVICE 2u /* registered with a device iface (not host)  */

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}
static uint32_t mr_checksum(const unsigned char *b)
{
    return ddofi_fnv1a32(b, 12) ^ (ddofi_fnv1a32(b + 16, DDOFI_MR_BLOB_SIZE - 16) * 16777619u);
}

int ddofi_mr_export(const ddofi_mr_t *m, void *blob)
{
    if (!m || !blob)
        return ddofi_error(-EINVAL, "ddofi_mr_export: NULL argument");
    if (!(m->access & DDOFI_ACCESS_REMOTE_READ))
        return ddofi_error(-EINVAL, "ddofi_mr_export: registration lacks "
                           "DDOFI_ACCESS_REMOTE_READ");
    const ddofi_fabric_t *f = m->fab;
    int virt = (f->mr_mode & FI_MR_VIRT_ADDR) && !(f->quirk->flags & DDOFI_Q_MR_RELATIVE);
    unsigned char *b = blob;
    memset(b, 0, DDOFI_MR_BLOB_SIZE);
    put64(b, (uint64_t)MR_MAGIC | (uint64_t)MR_VERSION << 32 |
                 (uint64_t)((virt ? MR_FLAG_VIRT : 0) |
                            (m->iface != DDOFI_HMEM_SYSTEM ? MR_FLAG_DEVICE : 0)) << 48);
    put64(b + 8, f->prov_tag);
    put64(b + 16, (uint64_t)(uintptr_t)m->buf);
    put64(b + 24, m->key);
    put64(b + 32, (uint64_t)m->len);
    uint32_t c = mr_checksum(b);
    for (int i = 0; i < 4; i++)
        b[12 + i] = (unsigned char)(c >> (8 * i));
    return 0;
}

int ddofi_remote_import(const void *blob, size_t len, ddofi_remote_t *r)
{
    if (!blob || !r)
        return ddofi_error(-EINVAL, "ddofi_remote_import: NULL argument");
    const unsigned char *b = blob;
    if (len < DDOFI_MR_BLOB_SIZE)
        return ddofi_error(-DDOFI_EBLOB, "region blob truncated: %zu bytes, expected %d",
                           len, DDOFI_MR_BLOB_SIZE);
    uint64_t h = get64(b);
    if ((uint32_t)h != MR_MAGIC)
        return ddofi_error(-DDOFI_EBLOB, "region blob: bad magic 0x%08x (not a ddstore-ofi "
                           "region)", (unsigned)(uint32_t)h);
    unsigned version = (unsigned)((h >> 32) & 0xffff);
    if (version != MR_VERSION)
        return ddofi_error(-DDOFI_EBLOB, "region blob: format version %u, this library "
                           "reads %u", version, MR_VERSION);
    uint32_t c = (uint32_t)b[12] | (uint32_t)b[13] << 8 | (uint32_t)b[14] << 16 |
                 (uint32_t)b[15] << 24;
    if (c != mr_checksum(b))
        return ddofi_error(-DDOFI_EBLOB, "region blob: checksum mismatch (corrupted)");
    unsigned flags = (unsigned)(h >> 48);
    if (flags & ~(MR_FLAG_VIRT | MR_FLAG_DEVICE))
        return ddofi_error(-DDOFI_EBLOB, "region blob: unknown flags 0x%x", flags);
    if (get64(b + 40) != 0)
        return ddofi_error(-DDOFI_EBLOB, "region blob: reserved field set");
    memset(r, 0, sizeof *r);
    r->prov_tag = (uint32_t)get64(b + 8);
    r->base = get64(b + 16);
    r->key = get64(b + 24);
    r->size = get64(b + 32);
    r->flags = flags;
    r->addr0 = (flags & MR_FLAG_VIRT) ? r->base : 0;
    if (r->addr0 + r->size < r->addr0)
        return ddofi_error(-DDOFI_EBLOB, "region blob: base + size overflows");
    return 0;
}
