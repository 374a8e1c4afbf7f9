/* ember/text.h - tokenizers for language models: a character vocabulary and a byte-level
 * BPE, trained, applied and stored in C (runtime/data/tokenizer.c).
 *
 * Both work on bytes, so any input (UTF-8 or not, NUL included) has a defined encoding.
 * - char: the vocabulary is the distinct bytes of the training text in increasing order
 *   (char-rnn's and nanoGPT's character models); encoding a byte outside it is an error.
 * - bpe: ids 0..255 are the bytes themselves; merge i (0-based) joins the pair (left,
 *   right) into id 256 + i. Training repeats: count adjacent pairs of the current ids,
 *   merge the most frequent pair (ties: the smallest (left, right)) everywhere, left to
 *   right without overlaps, until the vocabulary has vocab_size ids or no pair is left.
 *   Encoding applies the merges in their order, which gives what merging the
 *   lowest-numbered pair present, again and again, gives (a pair made by merge j is merged,
 *   if ever, by a later merge). Every byte string round-trips.
 *
 * Ids are 0-based in C; encode and decode take `base` (the Lua layer passes 1).
 * A tokenizer file is text: "ember-tokenizer 1", "kind char|bpe", then "chars N" and the N
 * byte values, or "merges N" and N lines "left right". */
#ifndef EMBER_TEXT_H
#define EMBER_TEXT_H

#include "core.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* EM_FFI_BEGIN */
typedef struct em_tensor em_tensor;
typedef struct em_tokenizer em_tokenizer;

/* The character vocabulary of text[0..n) (n >= 1). *out must be NULL. */
EM_API em_status em_tokenizer_train_char(em_tokenizer **out, const uint8_t *text, int64_t n);
/* A byte-level BPE of vocab_size ids (256 ..= 8192;
 * files may hold up to 65536) trained on text[0..n). *out must be NULL. */
EM_API em_status em_tokenizer_train_bpe(em_tokenizer **out, const uint8_t *text, int64_t n, int64_t vocab_size);
EM_API void em_tokenizer_free(em_tokenizer *t); /* NULL is fine */
/* "char" or "bpe". */
EM_API const char *em_tokenizer_kind(const em_tokenizer *t);
EM_API int64_t em_tokenizer_vocab_size(const em_tokenizer *t);
/* The bytes id (0-based) stands for; *len receives their count (at most max_piece). */
EM_API const uint8_t *em_tokenizer_piece(const em_tokenizer *t, int64_t id, int64_t *len);
EM_API int64_t em_tokenizer_max_piece(const em_tokenizer *t);
/* BPE merges: their count, and merge i's pair (0-based ids). */
EM_API int64_t em_tokenizer_num_merges(const em_tokenizer *t);
EM_API em_status em_tokenizer_merge(const em_tokenizer *t, int64_t i, int64_t *left, int64_t *right);

/* text[0..n) as a new 1-d int64 CPU tensor of ids + base. *out must be NULL. */
EM_API em_status em_tokenizer_encode(em_tensor **out, const em_tokenizer *t, const uint8_t *text, int64_t n,
                                     int64_t base);
/* The bytes of ids (any shape, integer dtype, CPU; each id - base in 0..vocab_size) into
 * buf[0..cap); *len receives the byte count. Fails with EM_ERR_ARGUMENT, *len set to the
 * size needed, when cap is too small (numel(ids) * max_piece always suffices). */
EM_API em_status em_tokenizer_decode(const em_tokenizer *t, const em_tensor *ids, int64_t base, uint8_t *buf,
                                     int64_t cap, int64_t *len);

/* Writes the tokenizer file (replaced atomically); reads one back. *out must be NULL. */
EM_API em_status em_tokenizer_save(const em_tokenizer *t, const char *path);
EM_API em_status em_tokenizer_load(em_tokenizer **out, const char *path);
/* EM_FFI_END */

#ifdef __cplusplus
}
#endif

#endif
