/* ddstore: symbol visibility of the public API.
 *
 * Every library is compiled with -fvisibility=hidden (bazel/ddstore.bzl,
 * CMakeLists.txt): nothing is exported from a shared object unless marked.
 * The functions declared in the public headers are marked DDS_API (core and
 * its adapters), DDMPI_API, DDGPU_API (DDOFI_API: ddstore/ofi.h, which
 * stands alone).  They are exported only by a shared build of the libraries
 * for C users, which defines DDSTORE_BUILD_SHARED while compiling them.
 * Linked statically into the Python extensions they stay hidden: _core.so
 * exports PyInit__core alone, so no ddstore (or libfabric-looking ofi_*)
 * symbol can interpose on, or be interposed by, another library loaded in
 * the same process.
 */
#ifndef DDSTORE_VISIBILITY_H
#define DDSTORE_VISIBILITY_H

#if defined(DDSTORE_BUILD_SHARED) && (defined(__GNUC__) || defined(__clang__))
#define DDS_API __attribute__((visibility("default")))
#else
#define DDS_API
#endif

#endif
