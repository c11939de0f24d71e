/* libddstore: the exception class of a DDS_E* code (exc.h). */
#include "ddstore/exc.h"

#include "ddstore/errors.h"

ddstore_exc_t ddstore_exc_of(int rc)
{
    switch (rc < 0 ? -rc : rc) {
    case DDS_ENOENT:
        return DDSTORE_EXC_KEY;
    case DDS_ERANGE:
        return DDSTORE_EXC_INDEX;
    case DDS_EINVAL:
    case DDS_EEXIST:
    case DDS_ECONFIG:
    case DDS_ENOSPC:     /* a ragged read's destination is too small */
        return DDSTORE_EXC_VALUE;
    case DDS_ETYPE:
        return DDSTORE_EXC_TYPE;
    case DDS_ENOMEM:
        return DDSTORE_EXC_MEMORY;
    default: /* EIO ETIMEDOUT EFREED ETRANSPORT ENOGPU ESTALE ECORRUPT ENOSYS
                EBUSY EPEER ... */
        return DDSTORE_EXC_STORE;
    }
}
