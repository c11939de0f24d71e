/* libddstore: opening a store by method (open.h): the method's row of the
 * backend table (ddstore_backends.c) makes the transport.
 *
 * No Python calls (pyddstore._core calls ddstore_open with the GIL
 * released).  Collective over the store's communicator (the transports
 * exchange addresses / create windows).
 */
#include "ddstore/open.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddstore/backends.h"
#include "ddstore/config.h"
#include "ddstore/errors.h"
#include "ddstore/settings.h"

static int open_method(const ddstore_open_params_t *p, int *method_p)
{
    /* DDSTORE_METHOD: the settings read once by ddstore_open, else the
     * environment; checked even when the caller gives the method (which
     * wins), as every setting is: a bad value fails the creation */
    int env_method = 0;
    int rc = (p->field_mask & DDSTORE_OPEN_FIELD_SETTINGS) && p->settings
                 ? ddstore_method_check(p->settings->method, &env_method)
                 : ddstore_method_from_env(&env_method);
    if (rc < 0)
        return rc;
    *method_p = (p->field_mask & DDSTORE_OPEN_FIELD_METHOD) ? p->method : env_method;
    return 0;
}

int ddstore_transport_create(const ddstore_open_params_t *params,
                             dds_transport_t *transport_p)
{
    const ddstore_backend_t *row;
    int method = 0, rc;
    if (params == NULL || transport_p == NULL)
        return dds_error(-DDS_EINVAL, "ddstore_transport_create: NULL argument");
    rc = open_method(params, &method);
    if (rc < 0)
        return rc;
    rc = ddstore_backend_check(method, "method");
    if (rc < 0)
        return rc;
    row = ddstore_backend_find(method);
    if (row->create != NULL)
        return row->create(row, params, transport_p);
    rc = row->create_comm(&params->comm, transport_p);
    if (rc < 0 && (row->flags & DDSTORE_BACKEND_ONE_PROCESS) &&
        params->comm.size > 1) {
        char detail[512];
        snprintf(detail, sizeof detail, "%s", dds_last_error());
        return dds_error(rc,
                         "method %d (%s) serves only ranks in one process, "
                         "and this communicator has %d ranks: %s",
                         method, row->help, params->comm.size, detail);
    }
    return rc;
}

int ddstore_method_check(int64_t m, int *method_p)
{
    /* core's declaration of DDSTORE_METHOD is an int; its values are the
     * rows of the backend table */
    if (method_p == NULL)
        return dds_error(-DDS_EINVAL, "ddstore_method_check: NULL argument");
    if (m < 0 || m > 1 << 20 || ddstore_backend_find((int)m) == NULL) {
        char list[512];
        ddstore_backend_list(list, sizeof list);
        return dds_error(-DDS_ECONFIG, "%s='%lld': expected one of %s",
                         dds_setting_entry_method()->name, (long long)m,
                         list);
    }
    *method_p = (int)m;
    return 0;
}

int ddstore_method_from_env(int *method_p)
{
    int64_t m = 0;
    int rc;
    if (method_p == NULL)
        return dds_error(-DDS_EINVAL, "ddstore_method_from_env: NULL argument");
    rc = dds_setting_method(&m);
    return rc < 0 ? rc : ddstore_method_check(m, method_p);
}

int ddstore_open(const ddstore_open_params_t *params, dds_store_t **store_p)
{
    dds_store_params_t sp;
    dds_transport_t tr;
    dds_settings_t settings;
    int rc, have_tr;

    memset(&sp, 0, sizeof sp);
    if (params == NULL || store_p == NULL) {
        if (params != NULL && (params->field_mask & DDSTORE_OPEN_FIELD_COMM)) {
            dds_comm_t c = params->comm;
            dds_comm_destroy(&c);
        }
        return dds_error(-DDS_EINVAL, "ddstore_open: NULL argument");
    }
    *store_p = NULL;
    sp.field_mask = DDS_STORE_PARAM_COMM | DDS_STORE_PARAM_TRANSPORT;
    if (params->field_mask & DDSTORE_OPEN_FIELD_COMM) {
        sp.comm = params->comm;
    } else if ((params->field_mask & DDSTORE_OPEN_FIELD_MPI_COMM) &&
               params->mpi_comm != NULL) {
        rc = ddstore_comm_from_mpi(params->mpi_comm, &sp.comm);
        if (rc < 0)
            return rc;
    } else {
        return dds_error(-DDS_EINVAL,
                         "ddstore_open: no communicator (set comm or "
                         "mpi_comm)");
    }

    {
        /* the transport sees the communicator ddstore_open holds, and core's
         * settings, read once here and handed down (to the store too) */
        ddstore_open_params_t tp = *params;
        tp.comm = sp.comm;
        memset(&tr, 0, sizeof tr);
        rc = dds_settings_read(&settings);
        if (rc == 0) {
            tp.field_mask |= DDSTORE_OPEN_FIELD_SETTINGS;
            tp.settings = &settings;
            rc = ddstore_transport_create(&tp, &tr);
        }
    }
    have_tr = rc == 0;
    rc = dds_comm_agree(&sp.comm, rc);
    if (rc < 0) {
        if (have_tr && tr.ops && tr.ops->destroy)
            tr.ops->destroy(tr.ctx);
        dds_comm_destroy(&sp.comm);
        return rc;
    }
    sp.transport = tr;
    sp.field_mask |= DDS_STORE_PARAM_SETTINGS;
    sp.settings = &settings;
    /* GPU memory operations (lazy: nothing is probed until a GPU buffer is
     * used); none in a build without GPU support: the host path */
    if (!(params->field_mask & DDSTORE_OPEN_FIELD_NO_GPU)) {
        if (ddstore_gpu_memsys_open(&settings, &sp.memsys) == 0)
            sp.field_mask |= DDS_STORE_PARAM_MEMSYS;
        else
            dds_error_clear();
    }
    /* ownership of comm, transport and memsys moves to the store, even on
     * failure */
    return dds_store_create(&sp, store_p);
}

/* ---- names -------------------------------------------------------------- */

const char *ddstore_mem_kind_name(dds_mem_kind_t k)
{
    switch (k) {
    case DDS_MEM_HOST: return "host";
    case DDS_MEM_CUDA: return "cuda";
    case DDS_MEM_ROCM: return "rocm";
    default: return "unknown";
    }
}

int ddstore_dtype_from_name(const char *s, dds_dtype_t *dt_p)
{
    int i;
    if (s == NULL || dt_p == NULL)
        return dds_error(-DDS_EINVAL, "ddstore_dtype_from_name: NULL argument");
    if (strncmp(s, "torch.", 6) == 0)   /* str(torch.bfloat16) */
        s += 6;
    if (strcmp(s, "half") == 0)
        s = "float16";
    for (i = 0; i < DDS_DTYPE_COUNT; i++) {
        const char *n = dds_dtype_name((dds_dtype_t)i);
        if (n != NULL && strcmp(n, s) == 0) {
            *dt_p = (dds_dtype_t)i;
            return 0;
        }
    }
    if (strcmp(s, "bool_") == 0) {
        *dt_p = DDS_DTYPE_BOOL;
        return 0;
    }
    return -DDS_ETYPE;
}
