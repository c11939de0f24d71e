/* ddstore-ofi adapter: method 2's handshake records (split jobs).
 *
 * A core job publishes, per variable, one record file in handshake_dir; a
 * separate reader job parses it and reads the variable with libfabric.
 * This header is the record format and its file I/O.  It depends on
 * ddstore-core (errors, logging) only: no libfabric call is made here (the
 * address and region blobs are opaque bytes, validated by ddstore-ofi when
 * the reader imports them), so the parser can be fuzzed alone.
 *
 * File: {handshake_dir}/{escaped name}.ddshs, binary, little-endian, fixed
 * sizes (format version 2; version 1 had no ragged variables):
 *
 *   header, DDOFI_HS_HEADER_BYTES:
 *     0  magic "DDSHAKE\0"           8   u32 version (2)
 *     12 u32 header bytes (512)      16  u64 file bytes
 *     24 u32 CRC-32 of the file with these 4 bytes zero
 *     28 u32 nranks                  32  u64 run id (random, one per core store)
 *     40 i64 creation time (ns since the epoch, CLOCK_REALTIME)
 *     48 i32 dtype (dds_dtype_t)     52  u32 flags (DDOFI_HS_FLAG_*)
 *     56 u64 itemsize   64 u64 disp   72 u64 row bytes   80 u64 total rows
 *     88 u32 rank entry bytes (480)
 *     92 u32 pid namespace of the core ranks (inode of /proc/self/ns/pid,
 *        truncated; 0 = unknown): liveness checks need the same one
 *     96 char name[256]  352 char exchange_ns[64]  416 char provider[64]
 *     480 char domain[32]            (strings NUL-terminated, NUL-padded)
 *   nranks entries, DDOFI_HS_RANK_BYTES each:
 *     0 i64 rows   8 u64 base   16 u64 key   24 u64 bytes
 *     32 i32 pid   36 u32 address blob length (1..DDOFI_HS_ADDR_MAX)
 *     40 u64 process start time (clock ticks since boot, /proc/PID/stat
 *        field 22; 0 = unknown)
 *     48 char host[64]   112 u8 region blob[DDOFI_HS_MR_BLOB]
 *     160 u8 address blob[DDOFI_HS_ADDR_MAX] (first `length` bytes used,
 *        rest zero)
 *
 * Ragged variables (flags has DDOFI_HS_FLAG_RAGGED; store.h): rows and
 * total rows count samples, and a rank's shard is [index | payload]
 * (transport.h, dds_ragged_index_bytes), so its bytes are
 * dds_ragged_index_bytes(rows) + element rows x row bytes: the reader
 * derives each rank's element rows from its entry (nothing per sample, and
 * no field more per rank than a fixed variable's).
 *
 * Validation on parse (each failure is -DDS_ECORRUPT, or -DDS_ESTALE for a
 * foreign format version, with a detail naming the field): magic, version,
 * header/entry sizes, file size == header + nranks x entry, CRC, nranks in
 * [1, DDOFI_HS_MAX_RANKS], every string NUL-terminated, name non-empty,
 * dtype known, itemsize > 0, row bytes == disp x itemsize (no overflow),
 * rows >= 0, bytes == rows x row bytes (ragged: index bytes + a whole
 * number of rows, rows <= DDS_RAGGED_MAX_ROWS, the element rows' sum and
 * byte offsets within int64), total rows == sum of rows (no overflow),
 * address length in range, pid > 0, creation time > 0; and
 * what the encoder never writes: non-zero bytes after a string's NUL or after the address blob, disp == 0, an itemsize
 * other than a typed dtype's size.  So a record that parses re-encodes to
 * the same bytes.  Flags other than DDOFI_HS_FLAG_RAGGED are not checked
 * (unknown bits are kept).
 *
 * Thread-safety: every function is reentrant.
 */
#ifndef DDSTORE_HANDSHAKE_TRANSPORT_H
#define DDSTORE_HANDSHAKE_TRANSPORT_H


#include "ddstore/visibility.h"
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DDOFI_HS_MAGIC "DDSHAKE"   /* 7 chars + NUL = 8 bytes on disk */
#define DDOFI_HS_VERSION 2u
#define DDOFI_HS_HEADER_BYTES 512u
#define DDOFI_HS_RANK_BYTES 480u
#define DDOFI_HS_NAME_MAX 255      /* == DDS_NAME_MAX */
#define DDOFI_HS_NS_MAX 63
#define DDOFI_HS_PROV_MAX 63
#define DDOFI_HS_DOMAIN_MAX 31
#define DDOFI_HS_HOST_MAX 63
#define DDOFI_HS_MR_BLOB 48        /* == DDOFI_MR_BLOB_SIZE */
#define DDOFI_HS_ADDR_MAX 320      /* == DDOFI_ADDR_BLOB_MAX */
#define DDOFI_HS_MAX_RANKS (1 << 20)
#define DDOFI_HS_SUFFIX ".ddshs"

enum {
    DDOFI_HS_FLAG_LOCAL_ONLY = 1u << 0, /* core served on 127.0.0.1 only */
    DDOFI_HS_FLAG_RAGGED = 1u << 1      /* a ragged variable (version 2)  */
};

typedef struct ddofi_hs_rank {
    int64_t rows;
    uint64_t base, key, bytes;
    int32_t pid;
    uint32_t addr_len;
    uint64_t start_ticks;
    char host[DDOFI_HS_HOST_MAX + 1];
    unsigned char mr_blob[DDOFI_HS_MR_BLOB];
    unsigned char addr[DDOFI_HS_ADDR_MAX];
} ddofi_hs_rank_t;

typedef struct ddofi_hs_record {
    uint32_t version;
    uint32_t nranks;
    uint64_t run_id;
    int64_t ctime_ns;
    int32_t dtype;             /* dds_dtype_t */
    uint32_t flags;            /* DDOFI_HS_FLAG_* */
    uint32_t pidns;            /* core ranks' pid namespace (0 = unknown) */
    uint64_t itemsize, disp, row_bytes, total_rows;
    char name[DDOFI_HS_NAME_MAX + 1];
    char exchange_ns[DDOFI_HS_NS_MAX + 1];
    char provider[DDOFI_HS_PROV_MAX + 1];
    char domain[DDOFI_HS_DOMAIN_MAX + 1];
    ddofi_hs_rank_t *ranks;      /* nranks entries (malloc; ddofi_hs_record_clear) */
} ddofi_hs_record_t;

/* Serialise `r` (nranks entries in r->ranks; the CRC and sizes are computed
 * here, r->version is ignored and written as DDOFI_HS_VERSION).  *buf_p is
 * malloc'ed (caller frees).  Validates like the parser (a record that would
 * not parse is not written): -DDS_EINVAL with a detail, -DDS_ENOMEM. */
DDS_API int ddofi_hs_encode(const ddofi_hs_record_t *r, void **buf_p, size_t *len_p);

/* Parse and validate `len` bytes.  On success *r is filled (r->ranks
 * malloc'ed); on failure *r is zeroed and nothing is allocated.  Returns 0,
 * -DDS_ECORRUPT, -DDS_ESTALE (another format version), -DDS_ENOMEM. */
DDS_API int ddofi_hs_parse(const void *buf, size_t len, ddofi_hs_record_t *r);

/* Free r->ranks and zero *r.  NULL accepted. */
DDS_API void ddofi_hs_record_clear(ddofi_hs_record_t *r);

/* The record's file name for variable `name`: the name itself when it is
 * made of [A-Za-z0-9._-] and does not start with '.', else every other byte
 * (and a leading '.') as %XX; then DDOFI_HS_SUFFIX.  Writes at most `cap`
 * bytes (NUL included); returns 0 or -DDS_EINVAL (too long / empty).
 * ddofi_hs_write / _read / _remove also refuse a file name longer than 255
 * bytes (the usual file-system limit): -DDS_EINVAL naming the variable. */
DDS_API int ddofi_hs_file_name(const char *name, char *out, size_t cap);

/* The file name of the record of `name` in namespace `ns` (exchange_ns):
 * ddofi_hs_file_name(name) when ns is NULL or "", else the namespace encoded
 * the same way, '@' (which encoding never leaves), then the encoded name
 * and DDOFI_HS_SUFFIX ("job42@x.ddshs").  So two core jobs of different
 * namespaces never write, read or remove each other's records. */
DDS_API int ddofi_hs_record_file_name(const char *ns, const char *name, char *out,
                            size_t cap);

/* Create `dir` (and missing parents) with mode 0700, or check the existing
 * one (dds_dir_prepare, ddstore/files.h): refused (-DDS_EINVAL) when it is
 * not a directory, is owned by another user or others may write to it; a
 * warning is logged once when its group may write to it.  Returns 0, or
 * -DDS_EIO / -DDS_EINVAL with the path and what is wrong in the detail. */
DDS_API int ddofi_hs_dir_prepare(const char *dir);

/* Write the record for r->name into `dir` under the file name of
 * (r->exchange_ns, r->name), atomically (dds_file_publish): a fresh 0600
 * temporary file in `dir` (O_EXCL|O_NOFOLLOW), write, fsync, rename over
 * the record, fsync the directory.  Returns 0 or -DDS_EIO / -DDS_EINVAL /
 * -DDS_ENOMEM. */
DDS_API int ddofi_hs_write(const char *dir, const ddofi_hs_record_t *r);

/* Read and parse the record of (`ns`, `name`) in `dir`.  The directory must
 * pass dds_dir_check (owned by this user, not writable by others) and the
 * file dds_file_open_read (a regular file of this user's, not a link or a
 * FIFO: never blocks).  Returns 0, -DDS_ENOENT (no such file or directory
 * yet: the detail names the path), -DDS_EIO / -DDS_EINVAL (unusable file
 * or directory), or ddofi_hs_parse's codes (the detail names the path).  A
 * record whose name or namespace differs from the file's is
 * -DDS_ECORRUPT. */
DDS_API int ddofi_hs_read_ns(const char *dir, const char *ns, const char *name,
                   ddofi_hs_record_t *r);

/* ddofi_hs_read_ns(dir, "", name, r). */
DDS_API int ddofi_hs_read(const char *dir, const char *name, ddofi_hs_record_t *r);

/* Called by ddofi_hs_scan for every record file of the variable in any
 * namespace: rc is ddofi_hs_read_ns's result for it and rec the record when
 * rc == 0 (valid during the call only).  Return 0 to go on, anything else
 * to stop the scan with it. */
typedef int (*ddofi_hs_scan_fn)(void *arg, const char *path, int rc,
                              const ddofi_hs_record_t *rec);

/* Every record file of variable `name` in `dir`, whatever its namespace
 * ({name}.ddshs and *@{name}.ddshs).  Returns the number of files visited
 * (0 when the directory does not exist), the first non-zero return of fn
 * when < 0, or an error code. */
DDS_API int ddofi_hs_scan(const char *dir, const char *name, ddofi_hs_scan_fn fn,
                void *arg);

/* Remove the record of (`ns`, `name`) from `dir` (a missing file is not an
 * error).  Returns 0 or -DDS_EIO. */
DDS_API int ddofi_hs_remove_ns(const char *dir, const char *ns, const char *name);

/* ddofi_hs_remove_ns(dir, "", name). */
DDS_API int ddofi_hs_remove(const char *dir, const char *name);

/* This process's pid namespace (inode of /proc/self/ns/pid, truncated to
 * 32 bits), or 0 when unknown.  A recorded pid means something here only
 * when the namespaces match (containers). */
DDS_API uint32_t ddofi_hs_self_pidns(void);

/* This process's start time in clock ticks since boot (/proc/self/stat
 * field 22), or 0 when unknown. */
DDS_API uint64_t ddofi_hs_self_start_ticks(void);

/* Liveness of a recorded process on this host: 1 = a process with that pid
 * runs and (when start_ticks != 0) started at that time, 0 = gone (or the
 * pid was reused), -1 = cannot tell (e.g. no /proc). */
DDS_API int ddofi_hs_process_alive(int32_t pid, uint64_t start_ticks);

#ifdef __cplusplus
}
#endif
#endif
