/* ember/data.h - reading datasets and planning epochs for the data loaders.
 *
 * IDX is the format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/): a
 * big-endian header (two zero bytes, a type code, the number of dims, then one uint32 per
 * dim) followed by the elements in row-major order. Files may be gzipped; zlib tells
 * them apart by their first bytes, so the same call reads both.
 *
 * Epoch plans are permutations keyed by (seed, stream) on their own Philox streams, so a
 * data loader's order never depends on the global generator (model initialisation, dropout),
 * on the thread count or on how many workers or ranks share the work. */
#ifndef EMBER_DATA_H
#define EMBER_DATA_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* EM_FFI_BEGIN */
/* Reads an IDX file (plain or gzipped) into a new CPU tensor with the file's dims. Type
 * codes: 0x08 unsigned byte -> uint8, 0x09 signed byte, 0x0B int16 and 0x0C int32 ->
 * int32, 0x0D float -> float32, 0x0E double -> float64. limit < 0 reads every item
 * (dim 0) and checks that the data fills the file exactly; limit >= 0 reads only the first
 * min(limit, dim 0) items. Errors name the file and what is wrong with it. *out must be NULL. */
em_status em_data_read_idx(em_tensor **out, const char *path, int64_t limit);

/* A permutation of base .. base + n - 1 (int64) from the Philox stream keyed by seed and
 * stream (a loader passes its epoch): the same arguments give the same permutation,
 * whatever the global generator's state. *out must be NULL. */
em_status em_data_randperm(em_tensor **out, int64_t n, uint64_t seed, uint64_t stream, int64_t base);
/* Batch assembly: the items (slices along dim 0) of src at the positions in index
 * (a 1-d int64 tensor, counted from base) gathered into a new float32 tensor
 * [len(index), src's other dims], each element converted as v * scale + shift (pixels:
 * scale = 1 / (255 std), shift = -mean / std). One pass, no intermediate tensors. src is a
 * contiguous CPU tensor of uint8, int32, float32 or float64. *out must be NULL. */
em_status em_data_gather_normalize(em_tensor **out, const em_tensor *src, const em_tensor *index, int64_t base,
                                   double scale, double shift);
/* EM_FFI_END */

#ifdef __cplusplus
}
#endif
#endif
