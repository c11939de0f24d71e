/* ddstore-ofi: shm endpoints survive regions left in /dev/shm by a dead
 * process that had this process's pid.
 *
 * libfabric's shm provider names an endpoint's region "<pid>:<domain>:<ep>";
 * a process killed without cleanup leaves those files behind, and a later
 * process with the same pid failed fi_enable with EBUSY.  Here the test
 * plants such files for the next endpoint names of this process, then
 * opens an endpoint: it must succeed, the planted files must be gone, and
 * a read through the new endpoint must work.  A provider that does not
 * exist here is a SKIP.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddofi_test.h"
#include "ddstore/ofi.h"

/* "<pid>:<d>:<e>" of an endpoint, from its address blob (the provider's
 * name is in it as text). */
static int ep_name(ddofi_ep_t *ep, int *d_p, int *e_p)
{
    unsigned char blob[DDOFI_ADDR_BLOB_MAX];
    size_t len = sizeof blob;
    char me[32];
    if (ddofi_ep_address(ep, blob, &len) != 0)
        return -1;
    snprintf(me, sizeof me, "%d:", (int)getpid());
    for (size_t i = 0; i + strlen(me) < len; i++) {
        if (memcmp(blob + i, me, strlen(me)) == 0) {
            char tmp[64];
            size_t n = len - i < sizeof tmp - 1 ? len - i : sizeof tmp - 1;
            memcpy(tmp, blob + i, n);
            tmp[n] = '\0';
            int pid;
            if (sscanf(tmp, "%d:%d:%d", &pid, d_p, e_p) == 3)
                return 0;
        }
    }
    return -1;
}

static int plant(int d, int e)
{
    char path[128];
    snprintf(path, sizeof path, "/dev/shm/%d:%d:%d", (int)getpid(), d, e);
    int fd = open(path, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0)
        return -1;
    int rc = ftruncate(fd, 4096);
    close(fd);
    return rc;
}

static int exists(int d, int e)
{
    char path[128];
    struct stat st;
    snprintf(path, sizeof path, "/dev/shm/%d:%d:%d", (int)getpid(), d, e);
    return stat(path, &st) == 0;
}

int main(void)
{
    ddofi_fabric_params_t fp;
    ddofi_fabric_t *fab = NULL;
    ddofi_ep_t *a = NULL, *b = NULL;
    memset(&fp, 0, sizeof fp);
    fp.field_mask = DDOFI_FABRIC_FIELD_PROVIDER | DDOFI_FABRIC_FIELD_SINGLE_NODE;
    fp.provider = "shm";
    fp.single_node = 1;
    if (ddofi_fabric_open(&fp, &fab) != 0) {
        T_NOPROV("shm", ddofi_last_error());
        return ddofi_test_summary("shm_stale_test");
    }
    ddofi_ep_params_t serve = {DDOFI_EP_FIELD_FLAGS, DDOFI_EP_SERVE};
    T_EQ_INT(ddofi_ep_open(fab, &serve, &a), 0);
    int d = -1, e = -1;
    T_EQ_INT(ep_name(a, &d, &e), 0);
    /* the next two names of this domain, as a dead process would have left
     * them */
    T_EQ_INT(plant(d, e + 1), 0);
    T_EQ_INT(plant(d, e + 2), 0);
    T_EQ_INT(ddofi_ep_open(fab, NULL, &b), 0);
    int d2 = -1, e2 = -1;
    T_EQ_INT(ep_name(b, &d2, &e2), 0);
    T_EQ_INT(d2, d);
    T_OK(e2 > e + 2);
    T_OK(!exists(d, e + 1));
    T_OK(!exists(d, e + 2));

    /* b reads a's registered buffer (a serves: register on a) */
    static char src[4096], dst[4096];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (char)(i * 7 + 1);
    ddofi_mr_t *mr = NULL;
    ddofi_mr_params_t mp;
    memset(&mp, 0, sizeof mp);
    mp.field_mask = DDOFI_MR_FIELD_EP;
    mp.buf = src;
    mp.len = sizeof src;
    mp.access = DDOFI_ACCESS_REMOTE_READ;
    mp.ep = a;
    T_EQ_INT(ddofi_mr_register(fab, &mp, &mr), 0);
    unsigned char mblob[DDOFI_MR_BLOB_SIZE], ablob[DDOFI_ADDR_BLOB_MAX];
    size_t alen = sizeof ablob;
    ddofi_remote_t rem;
    ddofi_peer_t peer;
    T_EQ_INT(ddofi_mr_export(mr, mblob), 0);
    T_EQ_INT(ddofi_remote_import(mblob, sizeof mblob, &rem), 0);
    T_EQ_INT(ddofi_ep_address(a, ablob, &alen), 0);
    T_EQ_INT(ddofi_peer_insert(b, ablob, alen, &peer), 0);
    ddofi_read_op_t op;
    memset(&op, 0, sizeof op);
    op.peer = peer;
    op.remote = &rem;
    op.offset = 0;
    op.dst = dst;
    op.len = sizeof dst;
    T_EQ_INT(ddofi_read(b, &op, 1, NULL), 0);
    T_OK(memcmp(src, dst, sizeof src) == 0);

    T_EQ_INT(ddofi_mr_deregister(mr), 0);
    T_EQ_INT(ddofi_ep_close(b), 0);
    T_EQ_INT(ddofi_ep_close(a), 0);
    T_EQ_INT(ddofi_fabric_close(fab), 0);
    return ddofi_test_summary("shm_stale_test");
}
