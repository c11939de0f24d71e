/* ddstore-core: a communicator over files in a shared directory (FileComm).
 *
 * For runs without MPI: every collective writes one file per rank and step
 * under `dir/<ns>/` (published with dds_file_publish, ddstore/files.h: a
 * fresh O_EXCL|O_NOFOLLOW temporary name, then renamed, so a peer never sees
 * a partial file and nothing planted is written through; directory 0700,
 * files 0600) and polls for the peers' files with a short backoff sleep,
 * opening them with dds_file_open_read (never blocks on a FIFO, never
 * follows a link, this user's regular files only).
 *
 * Trust (docs/security.md): `dir` and `dir/<ns>` must belong to the user
 * and must not be writable by others (else -DDS_EINVAL at create).  One run
 * per namespace: each rank claims its slot with `dir/<ns>@rank<r>.claim`
 * (created exclusively; released, not removed, when the process's last
 * communicator on it is destroyed); a live claim of another process makes
 * create fail with -DDS_EBUSY naming the claim and its holder (one of a
 * process that has exited on this host, or a released one, is taken over).
 * Every step file carries its writer's claim nonce, and a peer's file is
 * read only when it carries the nonce of the peer's current claim.  A rank deletes its own file of
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
 * directory need different namespaces (the second is refused).
 *
 * Thread-safety: one thread per communicator at a time (as comm.h).
 */
#ifndef DDSTORE_COMM_FILE_H
#define DDSTORE_COMM_FILE_H


#include "ddstore/visibility.h"
#include "ddstore/comm.h"
#include "ddstore/settings.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Create a file communicator (not collective: no file is exchanged until the
 * first collective call).
 *   dir        shared directory (created 0700 if missing; must be writable,
 *              the user's own and not writable by others)
 *   rank/size  this rank and the number of ranks; rank < 0 or size < 0 take
 *              them from SLURM_PROCID/SLURM_NTASKS, then
 *              OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE, then
 *              PMI_RANK/PMI_SIZE.  size >= 1, 0 <= rank < size.
 *   ns         namespace (a subdirectory: letters, digits, '.', '_', '-');
 *              NULL or "" = SLURM_JOB_ID.SLURM_STEP_ID (or SLURM_JOB_ID)
 *              when set, else "default".
 *   timeout_s  seconds to wait for peers in one collective; <= 0 reads
 *              DDSTORE_COLLECTIVE_TIMEOUT_S (dds_comm_timeout_s).
 * Returns 0, or -DDS_EINVAL (bad argument, directory not usable: not a
 * directory, another user's, writable by others, not writable),
 * -DDS_EBUSY (another run holds this rank of the namespace), -DDS_ECONFIG
 * (bad environment value, size 1 only), -DDS_ENOMEM, -DDS_EIO.
 * With size > 1 a bad DDSTORE_COLLECTIVE_TIMEOUT_S / _WARN_S /
 * DDSTORE_FILECOMM_* value is not returned here (the peers would wait for
 * this rank): the first collective, on every rank, and every later one fail
 * with -DDS_ECONFIG "rank R: VARIABLE='value': ...". */
DDS_API int dds_comm_file_create(const char *dir, int rank, int size, const char *ns,
                         double timeout_s, dds_comm_t *comm_p);

/* The resolved namespace and the directory the files live in (dir/ns) of a
 * communicator made by dds_comm_file_create; NULL for any other. */
DDS_API const char *dds_comm_file_ns(const dds_comm_t *comm);
DDS_API const char *dds_comm_file_path(const dds_comm_t *comm);

/* Register FileComm's DDSTORE_* variables (DDSTORE_HANDSHAKE_TIMEOUT_S for
 * method-2 joins, DDSTORE_FILECOMM_FSYNC) with the config registry; idempotent, and done by
 * the first dds_comm_file_create anyway. */
DDS_API void dds_comm_file_register_config(void);

/* FileComm's and method 2's settings, declared once (settings.h). */
#define DDS_FILECOMM_SETTINGS(X)                                               \
    X(handshake_timeout_s, "DDSTORE_HANDSHAKE_TIMEOUT_S", SECONDS, "120",      \
      NULL, "core",                                                            \
      "seconds a method-2 join waits for the core job's records before "       \
      "failing with a timeout naming them; > 0, or inf for no limit "          \
      "(FileComm collectives: DDSTORE_COLLECTIVE_TIMEOUT_S)")                  \
    X(handshake_dir, "DDSTORE_HANDSHAKE_DIR", STRING, NULL, NULL, "core",      \
      "FileComm and method 2: directory shared by the jobs (method 2: the "    \
      "core job's per-variable record files); created 0700")                   \
    X(exchange_ns, "DDSTORE_EXCHANGE_NS", STRING, NULL, NULL, "core",          \
      "method 2: run namespace written into the core job's records; a reader " \
      "with a namespace accepts only records carrying the same one (e.g. a "   \
      "job id passed to both jobs)")                                           \
    X(fsync, "DDSTORE_FILECOMM_FSYNC", BOOL, "0", NULL, "core",                \
      "FileComm: fsync each file before publishing it (for shared file "       \
      "systems that need it)")

typedef struct dds_filecomm_settings {
    DDS_SETTINGS_FIELDS(DDS_FILECOMM_SETTINGS)
} dds_filecomm_settings_t;

/* Register and read them: 0 or -DDS_ECONFIG naming the variable. */
DDS_API int dds_filecomm_settings_read(dds_filecomm_settings_t *s);

#ifdef __cplusplus
}
#endif
#endif
