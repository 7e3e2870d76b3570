/* safetensors.h: validated read-only access to a .safetensors file (demo weights, tests).
 *
 * Format: 8-byte little-endian header length N, N bytes of JSON {name: {"dtype", "shape",
 * "data_offsets": [begin, end]}, "__metadata__": {...}}, then the data section; offsets are
 * relative to the data section. The whole file is read into memory and validated once by
 * qf_st_open, so lookups never touch the disk and never read out of bounds, whatever the file. */
#ifndef QF_SAFETENSORS_H
#define QF_SAFETENSORS_H

#include <stdint.h>

#include "status.h"

typedef struct qf_st_file qf_st_file; /* opaque */

/* Opens, reads and validates path: header length within the file, header JSON parses and is an
 * object of tensor entries with the right member types, every dtype is a safetensors dtype, shape
 * products do not overflow and match end - begin, offsets lie inside the data section, tensors
 * do not repeat a name, and the data section holds the tensors end to end from byte 0 to its
 * last byte (no overlap, gap or trailing bytes); the header is UTF-8. Tensors of dtypes qfuse
 * cannot use (I64, F8_*, ...) are allowed here; qf_st_get reports them.
 * On QF_OK *out is owned by the caller (release with qf_st_close). On failure *out is NULL and the
 * status is QF_ERR_NOT_FOUND (no such file), QF_ERR_OUT_OF_MEMORY, or QF_ERR_INVALID_ARG (null
 * argument, unreadable or malformed file); qf_last_error() names the file and the problem. */
QF_INTERNAL qf_status qf_st_open(const char *path, qf_st_file **out);
/* qf_st_open of a file of at most max_bytes; a larger one is QF_ERR_INVALID_ARG before anything
 * is read (the reader holds the whole file in memory). */
QF_INTERNAL qf_status qf_st_open_max(const char *path, uint64_t max_bytes, qf_st_file **out);

/* Releases f and all memory it owns (every data pointer obtained from it). NULL is a no-op. */
QF_INTERNAL void qf_st_close(qf_st_file *f);

/* Looks up tensor name. Fills the non-NULL outputs: *dtype (QF_DTYPE_FP32, FP16 or BF16), *ndim
 * (0..QF_MAX_DIMS; 0 is a scalar), dims[0..ndim-1], *data (host pointer to the little-endian,
 * row-major elements inside f's memory, valid until qf_st_close; aligned to the element size when
 * the file's offsets are multiples of it, as writers produce).
 * Errors: QF_ERR_INVALID_ARG (null f or name), QF_ERR_NOT_FOUND (no tensor of that name),
 * QF_ERR_UNSUPPORTED (the tensor's safetensors dtype, named in the message, is not F32/F16/BF16);
 * outputs are left untouched on error. */
QF_INTERNAL qf_status qf_st_get(const qf_st_file *f, const char *name, qf_dtype *dtype, int *ndim,
                                int64_t dims[8], const void **data);

/* Number of tensors in f (0 for NULL); with qf_st_name, lets callers list a file. */
QF_INTERNAL int qf_st_count(const qf_st_file *f);
/* Name of tensor i in [0, qf_st_count) in byte order of names; NULL when out of range. Owned by f. */
QF_INTERNAL const char *qf_st_name(const qf_st_file *f, int i);

#endif /* QF_SAFETENSORS_H */
