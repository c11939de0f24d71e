/* ddstore-core: a communicator over files in a shared directory (FileComm).
 *
 * For runs without MPI: every collective writes one file per rank and step
 * under `dir/<ns>/` (written to a temporary name, then renamed, so a peer
 * never sees a partial file; directory 0700, files 0600) and polls for the
 * peers' files with a short backoff sleep.  A rank deletes its own file of
 * step k once it has seen every rank's file of step k+1 (every rank has then
 * finished step k), so at most two files per rank and communicator exist at
 * any time; destroy removes all but the last one.
 *
 * A communicator that waits longer than its timeout for a peer fails with
 * -DDS_ETIMEDOUT naming the missing ranks (never a hang); it is then out of
 * step and every later collective on it fails at once (-DDS_ETIMEDOUT).
 *
 * Every rank must create its file communicators for one (dir, ns) in the same
 * order: the n-th communicator created in a process for (dir, ns) talks to
 * the n-th one of every peer.  `ns` names one run: two runs sharing a
 * directory need different namespaces (files a crashed run left behind under
 * the same namespace can be mistaken for a peer's).
 *
 * Thread-safety: one thread per communicator at a time (as comm.h).
 */
#ifndef DDSTORE_COMM_FILE_H
#define DDSTORE_COMM_FILE_H

#include "ddstore/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Create a file communicator (not collective: no file is exchanged until the
 * first collective call).
 *   dir        shared directory (created 0700 if missing; must be writable)
 *   rank/size  this rank and the number of ranks; rank < 0 or size < 0 take
 *              them from SLURM_PROCID/SLURM_NTASKS, then
 *              OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE, then
 *              PMI_RANK/PMI_SIZE.  size >= 1, 0 <= rank < size.
 *   ns         namespace (a subdirectory: letters, digits, '.', '_', '-');
 *              NULL or "" = SLURM_JOB_ID.SLURM_STEP_ID (or SLURM_JOB_ID)
 *              when set, else "default".
 *   timeout_s  seconds to wait for peers in one collective; <= 0 reads
 *              DDSTORE_COLLECTIVE_TIMEOUT_S (dds_comm_timeout_s).
 * Returns 0, or -DDS_EINVAL (bad argument, directory not usable),
 * -DDS_ECONFIG (bad environment value), -DDS_ENOMEM. */
int dds_comm_file_create(const char *dir, int rank, int size, const char *ns,
                         double timeout_s, dds_comm_t *comm_p);

/* The resolved namespace and the directory the files live in (dir/ns) of a
 * communicator made by dds_comm_file_create; NULL for any other. */
const char *dds_comm_file_ns(const dds_comm_t *comm);
const char *dds_comm_file_path(const dds_comm_t *comm);

/* Register FileComm's DDSTORE_* variables (DDSTORE_HANDSHAKE_TIMEOUT_S for
 * method-2 joins, DDSTORE_FILECOMM_FSYNC) with the config registry; idempotent, and done by
 * the first dds_comm_file_create anyway. */
void dds_comm_file_register_config(void);

#ifdef __cplusplus
}
#endif
#endif
