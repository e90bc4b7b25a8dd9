/* Writer for PyTorch's torch.save format (a zip archive with a pickle), for
 * one 1-D int64 tensor, so Python users can `torch.load` it without mtpq:
 *
 *   archive/data.pkl    pickle protocol 2: torch._utils._rebuild_tensor_v2(
 *                         persistent_load(('storage', torch.LongStorage, '0',
 *                         'cpu', n)), 0, (n,), (1,), False, OrderedDict())
 *   archive/byteorder   "little"
 *   archive/data/0      n little-endian int64 (64-byte aligned in the file)
 *   archive/version     "3\n"
 *
 * Entries are stored (no compression) with fixed timestamps: the bytes depend
 * only on the values. Written to a temporary name and renamed on success. */
#ifndef MTPQ_IO_TORCH_PT_H
#define MTPQ_IO_TORCH_PT_H

#include <stddef.h>
#include <stdint.h>

#include "io/status.h"

enum mtpq_status mtpq_pt_write_i64(const char *path, const int64_t *v, size_t n,
                                   struct mtpq_err *err);

#endif
