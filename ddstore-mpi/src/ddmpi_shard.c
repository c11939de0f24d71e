/* ddstore-mpi: the MPI RMA transport's shards in POSIX shared memory,
 * mapped by the ranks of a node (shard_alloc / shard_free of the transport
 * table; the read path, ddmpi_read.c, copies same-node rows from them).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddstore/errors.h"
#include "ddstore/log.h"
#include "ddmpi_transport_internal.h"

/* ---- shard_alloc / shard_free ---------------------------------------------
 *
 * Host shards the store allocates (var_init, var_add with DDS_ADD_COPY) are
 * POSIX shared memory: each rank creates an object (shm_open, sized with
 * posix_fallocate so that a full /dev/shm is an error here, not a SIGBUS
 * later), the names are exchanged over the node communicator, every rank
 * maps its node peers' objects read-only, one agreement over comm follows
 * and then each rank unlinks its name (the mappings stay).  region_create
 * later hands these mappings to read().
 *
 * Not MPI_Win_allocate_shared: Open MPI unmaps such windows in MPI_Finalize,
 * and the store serves a rank's own rows from its shard after MPI_Finalize;
 * these mappings belong to us, outlive MPI, and shard_free (local, no MPI
 * call) unmaps them.  A rank whose object cannot be created uses malloc (its
 * peers read it with MPI_Get); a peer that cannot be mapped is read with
 * MPI_Get.  Collective over comm, called in the same order everywhere. */

static uint64_t ddmpi_shm_seq;

static void ddmpi_shard_release(ddmpi_shard_t *sh)
{
    if (!sh)
        return;
    if (sh->peer) {
        for (int i = 0; i < sh->nnode; i++)
            if (sh->peer[i] && sh->peer_bytes[i])
                munmap((void *)sh->peer[i], sh->peer_bytes[i]);
    }
    if (sh->mapped && sh->base)
        munmap(sh->base, sh->bytes);
    else
        free(sh->base);
    free(sh->peer);
    free(sh->peer_bytes);
    free(sh);
}

/* Our object: fills sh->base (mapped) and name; 0 = not created. */
static int ddmpi_shm_create(ddmpi_shard_t *sh, size_t bytes, char *name)
{
    int fd;
    void *p;

    snprintf(name, DDMPI_SHM_NAME, "/ddstore.%ld.%llu.%llx", (long)getpid(),
             (unsigned long long)__atomic_add_fetch(&ddmpi_shm_seq, 1,
                                                    __ATOMIC_RELAXED),
             (unsigned long long)(uintptr_t)sh);
    fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0)
        goto fail;
    if (posix_fallocate(fd, 0, (off_t)bytes) != 0) {
        close(fd);
        shm_unlink(name);
        goto fail;
    }
    p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        shm_unlink(name);
        goto fail;
    }
    sh->base = p;
    sh->mapped = 1;
    return 1;
fail:
    DDS_LOG(DDS_LOG_INFO, DDS_SUBSYS_MPI, "shard of %zu bytes: no shared "
            "memory object (%s); same-node peers read it with MPI_Get",
            bytes, strerror(errno));
    name[0] = '\0';
    return 0;
}

int ddmpi_shard_alloc(void *ctx, size_t bytes, void **base_p,
                      void **token_p)
{
    ddmpi_transport_t *t = ctx;
    ddmpi_shard_t *sh = NULL;
    char *names = NULL, mine[DDMPI_SHM_NAME];
    int mrc = MPI_SUCCESS, ok, nnode = 0;

    if (!t || !base_p || !token_p)
        return dds_error(-DDS_EINVAL, "mpi shard_alloc: NULL argument");
    *base_p = NULL;
    *token_p = NULL;
    if (ddmpi_finalized())
        return dds_error(-DDS_EIO, "mpi shard_alloc: MPI is already "
                         "finalized");
    mine[0] = '\0';
    if (t->node != MPI_COMM_NULL)
        MPI_Comm_size(t->node, &nnode);
    sh = calloc(1, sizeof(*sh));
    if (sh) {
        sh->nnode = nnode;
        sh->bytes = bytes;
        sh->peer = calloc((size_t)(nnode ? nnode : 1), sizeof(char *));
        sh->peer_bytes = calloc((size_t)(nnode ? nnode : 1), sizeof(size_t));
    }
    names = calloc((size_t)(nnode ? nnode : 1), DDMPI_SHM_NAME);
    ok = sh && sh->peer && sh->peer_bytes && names;
    if (ok && bytes > 0 &&
        !(nnode > 1 && t->shm && ddmpi_shm_create(sh, bytes, mine))) {
        /* not shared with peers: anonymous MAP_SHARED memory still is
         * shared with forked children (they see later updates) */
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

        if (p != MAP_FAILED) {
            sh->base = p;
            sh->mapped = 1;
        } else {
            sh->base = malloc(bytes);
            ok = sh->base != NULL;
        }
    }
    if (!ok)
        mine[0] = '\0';

    ddmpi_serial_lock(t->serial);
    /* every rank takes part, also after a local failure */
    if (nnode > 1) {
        mrc = MPI_Allgather(mine, DDMPI_SHM_NAME, MPI_CHAR,
                            names ? names : mine, names ? DDMPI_SHM_NAME : 0,
                            MPI_CHAR, t->node);
        if (mrc != MPI_SUCCESS)
            ok = 0;
    }
    if (ok && nnode > 1) {
        int me = -1;

        MPI_Comm_rank(t->node, &me);
        for (int i = 0; i < nnode; i++) {
            const char *nm = names + (size_t)i * DDMPI_SHM_NAME;
            struct stat st;
            void *p;
            int fd;

            if (i == me || nm[0] == '\0' || !t->shm)
                continue;
            fd = shm_open(nm, O_RDONLY, 0);
            if (fd < 0)
                continue;           /* not reachable: MPI_Get for this peer */
            if (fstat(fd, &st) == 0 && st.st_size > 0) {
                p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd,
                         0);
                if (p != MAP_FAILED) {
                    sh->peer[i] = p;
                    sh->peer_bytes[i] = (size_t)st.st_size;
                }
            }
            close(fd);
        }
    }
    {
        int agree = ok;

        mrc = MPI_Allreduce(MPI_IN_PLACE, &agree, 1, MPI_INT, MPI_MIN,
                            t->comm);
        if (mrc != MPI_SUCCESS)
            agree = 0;
        /* everybody has mapped (or given up on) our object: the name can go */
        if (mine[0])
            shm_unlink(mine);
        ddmpi_serial_unlock(t->serial);
        free(names);
        if (agree) {
            *base_p = bytes ? sh->base : NULL;
            *token_p = sh;
            return 0;
        }
    }
    ddmpi_shard_release(sh);
    if (!ok)
        return dds_error(-DDS_ENOMEM, "mpi shard_alloc: cannot allocate "
                         "%zu bytes", bytes);
    if (mrc != MPI_SUCCESS)
        return ddmpi_translate_error(mrc, "mpi shard_alloc");
    return dds_error(-DDS_EIO, "mpi shard_alloc of %zu bytes failed on "
                     "another rank", bytes);
}

/* Local: unmaps (or frees) our shard and our view of the peers'. */
void ddmpi_shard_free(void *ctx, void *base, void *token)
{
    (void)ctx;
    (void)base;
    ddmpi_shard_release(token);
}

/* Test hook (ddmpi_internal.h): MPI_Get calls and same-node memcpy ops. */
