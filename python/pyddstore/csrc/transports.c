/* pyddstore._core: the transport factory, one place that knows every
 * backend.
 *
 *   method 0  MPI RMA (ddstore-mpi), needs an MPI communicator
 *   method 1  libfabric RDMA (ddstore-ofi's transport adapter)
 *   method 2  libfabric with a file handshake in handshake_dir (split jobs)
 *
 * Runs without the GIL and without Python calls.  Collective over the
 * store's communicator (the transports exchange addresses / create windows).
 */
#include "pydds.h"

#ifdef DDSTORE_HAVE_OFI
#include "ddstore/ofi_transport.h"
#endif

static int make_ofi(int method, const pydds_transport_args_t *args,
                    dds_transport_t *transport_p)
{
#ifdef DDSTORE_HAVE_OFI
    /* methods 1 and 2: ddstore-ofi's adapter, addresses exchanged over
     * args->comm (DDSTORE_FABRIC, FABRIC_IFACE, DDSTORE_NIC_MAP from the
     * environment; nic_map= wins over DDSTORE_NIC_MAP).  Method 2 adds the
     * handshake records: a core job (n_core 0) publishes one per variable,
     * a reader job (n_core > 0) joins them. */
    ddofi_transport_params_t p;
    memset(&p, 0, sizeof p);
    if (args->nic_map != NULL && args->nic_map[0] != '\0') {
        p.field_mask |= DDOFI_TRANSPORT_FIELD_NIC_MAP;
        p.nic_map = args->nic_map;
    }
    if (method == 2) {
        p.field_mask |= DDOFI_TRANSPORT_FIELD_HANDSHAKE;
        p.handshake_dir = args->handshake_dir;
        p.exchange_ns = args->exchange_ns;
        p.n_core = args->n_core;
    }
    return ddofi_transport_create(args->comm, &p, transport_p);
#endif
    (void)args;
    (void)transport_p;
    return dds_error(-DDS_ENOSYS,
                     "method %d needs libfabric, and this build of pyddstore "
                     "has none (built without libfabric or with "
                     "--config=noofi); use method 0",
                     method);
}

int pydds_make_transport(int method, const pydds_transport_args_t *args,
                         dds_transport_t *transport_p)
{
    if (args == NULL || transport_p == NULL)
        return dds_error(-DDS_EINVAL, "pydds_make_transport: NULL argument");
    switch (method) {
    case 0:
#ifdef HAVE_MPI
        if (args->mpi_comm == NULL)
            return dds_error(-DDS_EINVAL,
                             "method 0 (MPI RMA) needs an MPI communicator, "
                             "got a '%s' communicator; use method 1 or 2",
                             args->comm_kind ? args->comm_kind : "non-MPI");
        return ddmpi_transport_create(*(const MPI_Comm *)args->mpi_comm,
                                      transport_p);
#else
        return dds_error(-DDS_ENOSYS,
                         "method 0 (MPI RMA) needs MPI, and this build of "
                         "pyddstore has none (pyddstore.HAVE_MPI is False); "
                         "use method 1 or 2");
#endif
    case 1:
    case 2:
        return make_ofi(method, args, transport_p);
    default:
        return dds_error(-DDS_EINVAL,
                         "method: expected 0 (MPI RMA), 1 (libfabric) or 2 "
                         "(libfabric, split jobs), got %d",
                         method);
    }
}
