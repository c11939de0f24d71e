/* ddstore-mpi: private helpers shared by ddmpi_comm.c and
 * ddmpi_transport.c (not installed). */
#ifndef DDMPI_INTERNAL_H
#define DDMPI_INTERNAL_H

#include <mpi.h>

/* Non-zero if MPI provides less than MPI_THREAD_MULTIPLE: then every MPI call
 * of this library (communicator ops, region create/destroy, reads) runs under
 * one process-wide mutex so that threads never enter MPI at once.  Logs a
 * warning once.  MPI must be initialised. */
int ddmpi_need_serial(void);

/* The process-wide mutex (no-ops when `serial` is 0).  It is the innermost
 * lock: nothing else is acquired while it is held (ddmpi_transport.c takes
 * its list of live windows before it). */
void ddmpi_serial_lock(int serial);
void ddmpi_serial_unlock(int serial);

/* Test hook (ddmpi_transport.c): MPI_Get calls and ops served by memcpy
 * from a same-node peer's shared window since the transport was created. */
#include <stdint.h>
#include "ddstore/transport.h"
void ddmpi_transport_counts(const dds_transport_t *tr, uint64_t *gets,
                            uint64_t *shm);

#endif
