/* source.c - datasets in the built-in formats, filled a batch at a time.
 *
 * A source knows how to find sample i's pixels (or raw row) and label:
 *   idx       images and labels read whole (runtime/data/idx.c); a sample is a row
 *   npy       x (and y) mapped read-only; uint8 [N, H, W] or [N, C, H, W] / [N, H, W, C] are
 *             images, anything else raw rows
 *   tfrecord  shards of tf.train.Example records: a bytes feature (JPEG, or raw pixels of a
 *             given shape) and an int64 label
 *   jpeg      JPEG files: a list with labels, or a directory with one folder per class
 * and em_source_fill turns a list of ids into batch rows: read (file bytes, CRC, protobuf),
 * decode (JPEG), transform (transforms.c), timing each stage. A bad record (a CRC that
 * does not match, a JPEG that does not decode, an image of the wrong size) is an error that
 * names the file and the offset, or, with skip_bad, is left out and counted.
 *
 * A source is used by one thread at a time (it keeps scratch buffers and file handles). */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include "data/pipeline/wire.h"
#include "ember/data.h"
#include "data_impl.h"
#include "formats.h"

#define OP "source"

enum { SRC_IDX, SRC_NPY, SRC_TFRECORD, SRC_JPEG };

struct em_source {
  int kind;
  int64_t n, label_offset;
  int has_labels, image, encoded, channels;
  int c, h, w, last; /* image geometry (encoded: the first sample's) */
  em_dtype raw_dtype; /* raw rows */
  int raw_ndim;
  int64_t raw_shape[8], row_bytes;
  em_tensor *images, *labels; /* idx */
  dp_npy x, y; /* npy */
  char **files; /* tfrecord shards, jpeg files */
  int nfiles;
  int *fds;
  dp_record *recs;
  int64_t nrecs, cap_recs;
  char *image_key, *label_key;
  int64_t *file_labels; /* jpeg */
  uint8_t *buf;
  size_t cap;
  dp_jpeg *jpeg;
  dp_pool *pool; /* em_source_batch's tensors (made on first use) */
};

/* ---------------------------------------------------------------- helpers */
static int split_lines(const char *text, char ***out) {
  int n = 0;
  char **v = NULL;
  const char *p = text ? text : "";
  while (*p) {
    size_t len = strcspn(p, "\n");
    if (len) {
      char **nv = realloc(v, (size_t)(n + 1) * sizeof *v);
      if (!nv) break;
      v = nv;
      v[n] = strndup(p, len);
      if (!v[n]) break;
      n++;
    }
    p += len + (p[len] == '\n');
  }
  *out = v;
  return n;
}

static void free_lines(char **v, int n) {
  for (int i = 0; i < n; i++) free(v[i]);
  free(v);
}

static int64_t label_at(const em_tensor *labels, int64_t i) {
  switch (em_tensor_dtype(labels)) {
    case EM_UINT8: return ((const uint8_t *)em_tensor_data(labels))[i];
    case EM_INT32: return ((const int32_t *)em_tensor_data(labels))[i];
    default: return ((const int64_t *)em_tensor_data(labels))[i];
  }
}

/* A label of the given dtype at row i of p (unaligned reads: npy data need not be). */
static inline int64_t label_of(const uint8_t *p, int dtype, int64_t i) {
  switch (dtype) {
    case EM_UINT8: return p[i];
    case EM_INT32: {
      int32_t v;
      memcpy(&v, p + 4 * i, 4);
      return v;
    }
    default: {
      int64_t v;
      memcpy(&v, p + 8 * i, 8);
      return v;
    }
  }
}

static int64_t npy_label(const dp_npy *y, int64_t i) { return label_of(y->map + y->data_offset, y->dtype, i); }

static int is_jpeg_name(const char *name) {
  const char *dot = strrchr(name, '.');
  return dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"));
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Entries of dir (sorted): folders when want_dirs, else JPEG files. */
static int list_dir(const char *dir, int want_dirs, char ***out) {
  DIR *d = opendir(dir);
  *out = NULL;
  if (!d) return -1;
  int n = 0, cap = 0;
  char **v = NULL;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat sb;
    if (stat(path, &sb) != 0) continue;
    if (want_dirs ? !S_ISDIR(sb.st_mode) : !(S_ISREG(sb.st_mode) && is_jpeg_name(e->d_name))) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      char **nv = realloc(v, (size_t)cap * sizeof *v);
      if (!nv) break;
      v = nv;
    }
    v[n++] = strdup(path);
  }
  closedir(d);
  qsort(v, (size_t)n, sizeof *v, cmp_str);
  *out = v;
  return n;
}

/* ---------------------------------------------------------------- reading one sample */
/* Pixels (or the raw row) and label of sample i; read and decode times added. */
static em_status sample_at(em_source *s, int64_t i, const uint8_t **px, int *h, int *w, int *c, int64_t *label,
                           double *t_read, double *t_decode) {
  *h = s->h;
  *w = s->w;
  *c = s->c;
  *label = 0;
  switch (s->kind) {
    case SRC_IDX:
      *px = (const uint8_t *)em_tensor_data(s->images) + i * s->row_bytes;
      if (s->has_labels) *label = label_at(s->labels, i);
      return EM_OK;
    case SRC_NPY:
      *px = s->x.map + s->x.data_offset + i * s->row_bytes;
      if (s->has_labels) *label = npy_label(&s->y, i);
      return EM_OK;
    default: break;
  }
  double t0 = em_clock_monotonic();
  const uint8_t *bytes;
  size_t len;
  char what[700];
  em_status st;
  if (s->kind == SRC_TFRECORD) {
    const dp_record *r = &s->recs[i];
    st = dp_tfrecord_read(s->fds[r->file], s->files[r->file], r, i + 1, &s->buf, &s->cap);
    snprintf(what, sizeof what, "'%s': the record at offset %lld (sample %lld)", s->files[r->file],
             (long long)r->offset, (long long)i + 1);
    if (!st)
      st = dp_example_find(s->buf, (size_t)r->length, s->image_key, s->has_labels ? s->label_key : NULL, &bytes, &len,
                           label, what);
    if (!st && !s->encoded && (int64_t)len != s->row_bytes)
      st = em_set_error(EM_ERR_FORMAT, OP ": %s: feature '%s' holds %zu bytes, the shape given needs %lld", what,
                        s->image_key, len, (long long)s->row_bytes);
  } else { /* a JPEG file */
    const char *path = s->files[i];
    snprintf(what, sizeof what, "'%s'", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    st = EM_OK;
    if (fd < 0 || fstat(fd, &sb) != 0) {
      st = em_set_error(EM_ERR_IO, "jpeg: cannot open '%s': %s", path, strerror(errno));
    } else {
      len = (size_t)sb.st_size;
      if (len > s->cap) {
        uint8_t *b = realloc(s->buf, len);
        if (!b) st = em_set_error(EM_ERR_MEMORY, "jpeg: out of memory reading '%s'", path);
        else s->buf = b, s->cap = len;
      }
      if (!st && read(fd, s->buf, len) != (ssize_t)len) st = em_set_error(EM_ERR_IO, "jpeg: cannot read '%s'", path);
      bytes = s->buf;
    }
    if (fd >= 0) close(fd);
    if (s->has_labels) *label = s->file_labels[i];
  }
  double t1 = em_clock_monotonic();
  *t_read += t1 - t0;
  if (st) return st;
  if (!s->encoded) {
    *px = bytes;
    return EM_OK;
  }
  st = dp_jpeg_decode(s->jpeg, bytes, len, s->c, what, px, h, w, c);
  *t_decode += em_clock_monotonic() - t1;
  return st;
}

/* Image geometry from a file's dims: each at least 1 and the image's bytes within an int
 * (the augmentation kernel indexes pixels with ints). what names the file and its dims. */
static em_status set_image_dims(em_source *s, em_status code, int64_t c, int64_t h, int64_t w, const char *what) {
  if (c < 1 || h < 1 || w < 1 || c > INT_MAX / h / w)
    return em_set_error(code,
                        OP
                        ": %s: images of %lld x %lld x %lld (channels x height x width), expected "
                        "each at least 1 and at most %d bytes in all",
                        what, (long long)c, (long long)h, (long long)w, INT_MAX);
  s->c = (int)c, s->h = (int)h, s->w = (int)w;
  return EM_OK;
}

/* ---------------------------------------------------------------- open */
static em_status open_idx(em_source *s, char **paths, int np, int64_t limit) {
  if (np < 1 || np > 2) return em_set_error(EM_ERR_ARGUMENT, OP ": idx expects the images file and the labels file");
  em_status st = em_data_read_idx(&s->images, paths[0], limit > 0 ? limit : -1);
  if (st) return st;
  if (em_tensor_dtype(s->images) != EM_UINT8 || em_tensor_ndim(s->images) != 3)
    return em_set_error(EM_ERR_FORMAT, OP ": '%s' holds %s data of %d dims, expected uint8 images [N, H, W]", paths[0],
                        em_dtype_name(em_tensor_dtype(s->images)), em_tensor_ndim(s->images));
  s->n = em_tensor_size(s->images, 0);
  s->image = 1;
  char what[600];
  snprintf(what, sizeof what, "'%s'", paths[0]);
  st = set_image_dims(s, EM_ERR_FORMAT, 1, em_tensor_size(s->images, 1), em_tensor_size(s->images, 2), what);
  if (st) return st;
  s->row_bytes = (int64_t)s->h * s->w;
  if (np == 2) {
    if ((st = em_data_read_idx(&s->labels, paths[1], limit > 0 ? limit : -1))) return st;
    if (em_tensor_ndim(s->labels) != 1 || em_tensor_size(s->labels, 0) != s->n ||
        em_tensor_dtype(s->labels) == EM_FLOAT32 || em_tensor_dtype(s->labels) == EM_FLOAT64)
      return em_set_error(EM_ERR_FORMAT, OP ": '%s' should hold %lld integer labels, it holds %s of %d dims", paths[1],
                          (long long)s->n, em_dtype_name(em_tensor_dtype(s->labels)), em_tensor_ndim(s->labels));
    s->has_labels = 1;
  }
  return EM_OK;
}

static em_status open_npy(em_source *s, char **paths, int np, const em_source_options *o) {
  if (np < 1 || np > 2) return em_set_error(EM_ERR_ARGUMENT, OP ": npy expects an x file and optionally a y file");
  em_status st = dp_npy_open(&s->x, paths[0], 1);
  if (st) return st;
  if (s->x.ndim < 1)
    return em_set_error(EM_ERR_FORMAT, OP ": '%s' holds a 0-d array, expected samples along dim 0", paths[0]);
  s->n = s->x.shape[0];
  s->row_bytes = (int64_t)em_dtype_size(s->x.dtype);
  for (int d = 1; d < s->x.ndim; d++) s->row_bytes *= s->x.shape[d];
  if (s->x.dtype == EM_UINT8 && (s->x.ndim == 3 || s->x.ndim == 4)) {
    s->image = 1;
    s->last = o->channels_last;
    const int64_t *d = s->x.shape;
    char what[600];
    snprintf(what, sizeof what, "'%s' (uint8 of %d dims, read as images)", paths[0], s->x.ndim);
    if (s->x.ndim == 3) s->last = 0, st = set_image_dims(s, EM_ERR_FORMAT, 1, d[1], d[2], what);
    else if (s->last) st = set_image_dims(s, EM_ERR_FORMAT, d[3], d[1], d[2], what);
    else st = set_image_dims(s, EM_ERR_FORMAT, d[1], d[2], d[3], what);
    if (st) return st;
  } else if (s->n > 0 && s->row_bytes == 0) {
    return em_set_error(EM_ERR_FORMAT,
                        OP
                        ": '%s' holds %lld samples of 0 bytes (a zero dim after the first), "
                        "expected samples with data",
                        paths[0], (long long)s->n);
  }
  s->raw_dtype = s->x.dtype;
  s->raw_ndim = s->x.ndim - 1;
  for (int d = 1; d < s->x.ndim; d++) s->raw_shape[d - 1] = s->x.shape[d];
  if (np == 2) {
    if ((st = dp_npy_open(&s->y, paths[1], 1))) return st;
    if (s->y.ndim != 1 || s->y.shape[0] != s->n ||
        (s->y.dtype != EM_UINT8 && s->y.dtype != EM_INT32 && s->y.dtype != EM_INT64))
      return em_set_error(EM_ERR_FORMAT,
                          OP
                          ": '%s' should hold %lld integer labels (u1, i4 or i8), it holds %s of %d "
                          "dims",
                          paths[1], (long long)s->n, em_dtype_name(s->y.dtype), s->y.ndim);
    s->has_labels = 1;
  }
  return EM_OK;
}

/* Encoded sources learn their geometry from sample 0. */
static em_status probe_first(em_source *s) {
  if (s->n == 0) return EM_OK;
  const uint8_t *px;
  int h, w, c;
  int64_t label;
  double tr = 0, td = 0;
  em_status st = sample_at(s, 0, &px, &h, &w, &c, &label, &tr, &td);
  if (st) return st;
  s->h = h, s->w = w, s->c = c; /* later images are converted to the first one's channels */
  return EM_OK;
}

static em_status open_tfrecord(em_source *s, char **paths, int np, const em_source_options *o) {
  if (np < 1) return em_set_error(EM_ERR_ARGUMENT, OP ": tfrecord expects one or more shard files");
  s->fds = malloc((size_t)np * sizeof *s->fds);
  if (!s->fds) return em_set_error(EM_ERR_MEMORY, OP ": out of memory");
  for (int i = 0; i < np; i++) s->fds[i] = -1;
  s->files = paths;
  s->nfiles = np;
  for (int i = 0; i < np; i++) {
    em_status st = dp_tfrecord_index(paths[i], i, &s->recs, &s->nrecs, &s->cap_recs);
    if (st) return st;
    s->fds[i] = open(paths[i], O_RDONLY | O_CLOEXEC);
    if (s->fds[i] < 0) return em_set_error(EM_ERR_IO, OP ": cannot open '%s': %s", paths[i], strerror(errno));
  }
  s->n = s->nrecs;
  s->image_key = strdup(o->image_key && *o->image_key ? o->image_key : "image");
  s->label_key = strdup(o->label_key && *o->label_key ? o->label_key : "label");
  s->has_labels = !(o->label_key && !strcmp(o->label_key, "-"));
  s->image = 1;
  s->encoded = o->encoded;
  if (s->encoded) {
    s->c = o->channels;
    if (!(s->jpeg = dp_jpeg_new())) return em_last_status() ? em_last_status() : EM_ERR_MEMORY;
    return EM_OK;
  }
  /* raw pixels: [H, W], [C, H, W] or [H, W, C] (channels_last) */
  em_status st;
  const char *what = "the shape given for raw tfrecord images";
  if (o->ndim == 2) st = set_image_dims(s, EM_ERR_ARGUMENT, 1, o->shape[0], o->shape[1], what);
  else if (o->ndim == 3 && o->channels_last)
    s->last = 1, st = set_image_dims(s, EM_ERR_ARGUMENT, o->shape[2], o->shape[0], o->shape[1], what);
  else if (o->ndim == 3) st = set_image_dims(s, EM_ERR_ARGUMENT, o->shape[0], o->shape[1], o->shape[2], what);
  else
    return em_set_error(EM_ERR_ARGUMENT, OP ": raw (not encoded) tfrecord images need their shape [H, W] or [C, H, W]");
  if (st) return st;
  s->row_bytes = (int64_t)s->c * s->h * s->w;
  return EM_OK;
}

static em_status open_jpeg(em_source *s, char **paths, int np, const em_source_options *o) {
  struct stat sb;
  if (np == 1 && stat(paths[0], &sb) == 0 && S_ISDIR(sb.st_mode)) { /* root/<class>/<image>.jpg */
    char root[512];
    snprintf(root, sizeof root, "%s", paths[0]);
    char **classes;
    int nc = list_dir(paths[0], 1, &classes);
    if (nc < 0) return em_set_error(EM_ERR_IO, "jpeg: cannot list '%s': %s", paths[0], strerror(errno));
    char **files = NULL;
    int64_t *labels = NULL, n = 0;
    for (int k = 0; k <= nc; k++) { /* k == nc: images directly in root, unlabelled */
      if (k == nc && n > 0) break;
      char **f;
      int nf = list_dir(k < nc ? classes[k] : paths[0], 0, &f);
      if (nf > 0) {
        char **nfiles = realloc(files, (size_t)(n + nf) * sizeof *files);
        int64_t *nlabels = realloc(labels, (size_t)(n + nf) * sizeof *labels);
        if (nfiles) files = nfiles;
        if (nlabels) labels = nlabels;
        if (!nfiles || !nlabels) {
          free_lines(f, nf);
          break;
        }
        for (int j = 0; j < nf; j++) files[n] = f[j], labels[n++] = k;
        s->has_labels = k < nc;
      }
      free(f);
    }
    free_lines(classes, nc > 0 ? nc : 0);
    free_lines(paths, np);
    s->files = files;
    s->nfiles = (int)n;
    s->file_labels = labels;
    if (n == 0) return em_set_error(EM_ERR_ARGUMENT, "jpeg: '%s' holds no .jpg files (nor folders of them)", root);
  } else {
    s->files = paths;
    s->nfiles = np;
    if (o->labels) {
      s->file_labels = malloc((size_t)np * sizeof(int64_t) + 1);
      if (!s->file_labels) return em_set_error(EM_ERR_MEMORY, OP ": out of memory");
      memcpy(s->file_labels, o->labels, (size_t)np * sizeof(int64_t));
      s->has_labels = 1;
    }
  }
  s->n = s->nfiles;
  s->image = 1;
  s->encoded = 1;
  s->c = o->channels;
  if (!(s->jpeg = dp_jpeg_new())) return em_last_status() ? em_last_status() : EM_ERR_MEMORY;
  return EM_OK;
}

em_status em_source_open(em_source **out, const em_source_options *o) {
  if (!out || *out) return em_set_error(EM_ERR_ARGUMENT, OP ": out must point to NULL (the source is new)");
  if (!o || !o->format) return em_set_error(EM_ERR_ARGUMENT, OP ": expected options with a format");
  if (o->channels != 0 && o->channels != 1 && o->channels != 3)
    return em_set_error(EM_ERR_ARGUMENT, OP ": channels must be 1 or 3, got %d", o->channels);
  em_source *s = calloc(1, sizeof *s);
  if (!s) return em_set_error(EM_ERR_MEMORY, OP ": out of memory");
  s->label_offset = o->label_offset;
  char **paths;
  int np = split_lines(o->paths, &paths);
  em_status st;
  if (!strcmp(o->format, "idx")) {
    s->kind = SRC_IDX;
    st = open_idx(s, paths, np, o->limit);
    free_lines(paths, np);
  } else if (!strcmp(o->format, "npy")) {
    s->kind = SRC_NPY;
    st = open_npy(s, paths, np, o);
    free_lines(paths, np);
  } else if (!strcmp(o->format, "tfrecord")) {
    s->kind = SRC_TFRECORD;
    st = open_tfrecord(s, paths, np, o); /* keeps paths */
    if (!s->files) free_lines(paths, np);
  } else if (!strcmp(o->format, "jpeg")) {
    s->kind = SRC_JPEG;
    st = open_jpeg(s, paths, np, o); /* keeps or frees paths */
  } else {
    free_lines(paths, np);
    st = em_set_error(EM_ERR_ARGUMENT, OP ": unknown format '%s' (expected idx, npy, tfrecord or jpeg)", o->format);
  }
  if (!st && o->limit > 0 && o->limit < s->n) s->n = o->limit;
  if (!st && s->encoded) st = probe_first(s);
  if (st) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", em_last_error());
    em_source_free(s);
    return em_set_error(st, "%s", msg);
  }
  *out = s;
  return EM_OK;
}

void em_source_free(em_source *s) {
  if (!s) return;
  em_tensor_release(s->images);
  em_tensor_release(s->labels);
  dp_npy_close(&s->x);
  dp_npy_close(&s->y);
  for (int i = 0; s->fds && i < s->nfiles; i++)
    if (s->fds[i] >= 0) close(s->fds[i]);
  free(s->fds);
  free_lines(s->files, s->nfiles);
  free(s->recs);
  free(s->image_key);
  free(s->label_key);
  free(s->file_labels);
  free(s->buf);
  dp_jpeg_free(s->jpeg);
  dp_pool_close(s->pool);
  free(s);
}

int64_t em_source_size(const em_source *s) { return s ? s->n : 0; }

/* ---------------------------------------------------------------- describe and fill */
static int augments(const em_augment *aug) {
  return aug && (aug->crop_h || aug->crop_w || aug->flip_p > 0 || aug->normalise || aug->channels || aug->pad);
}

int em_source_describe(em_source *s, const em_augment *aug, int64_t rows, em_tensor_desc *descs) {
  if (!s || !descs || rows < 0) {
    em_set_error(EM_ERR_ARGUMENT, OP ": describe expects a source, rows >= 0 and room for 2 descriptions");
    return -1;
  }
  memset(descs, 0, 2 * sizeof *descs);
  snprintf(descs[0].name, sizeof descs[0].name, "x");
  descs[0].sizes[0] = rows;
  if (s->image) {
    int oc, oh, ow;
    if (dp_augment_shape(aug, s->c ? s->c : 3, s->h, s->w, &oc, &oh, &ow)) return -1;
    descs[0].ndim = 4;
    descs[0].dtype = aug && aug->normalise ? EM_FLOAT32 : EM_UINT8;
    descs[0].sizes[1] = oc, descs[0].sizes[2] = oh, descs[0].sizes[3] = ow;
  } else {
    if (augments(aug)) {
      em_set_error(EM_ERR_ARGUMENT, OP ": crop, flip and normalise take uint8 images; this source holds %s rows",
                   em_dtype_name(s->raw_dtype));
      return -1;
    }
    descs[0].ndim = 1 + s->raw_ndim;
    descs[0].dtype = s->raw_dtype;
    for (int d = 0; d < s->raw_ndim; d++) descs[0].sizes[d + 1] = s->raw_shape[d];
  }
  if (!s->has_labels) return 1;
  snprintf(descs[1].name, sizeof descs[1].name, "y");
  descs[1].ndim = 1;
  descs[1].dtype = EM_INT64;
  descs[1].sizes[0] = rows;
  return 2;
}

static em_status check_out(em_source *s, const em_augment *aug, int64_t n, em_tensor *x, em_tensor *y) {
  em_tensor_desc d[2];
  int nd = em_source_describe(s, aug, n, d);
  if (nd < 0) return em_last_status();
  em_tensor *t[2] = {x, y};
  for (int i = 0; i < nd; i++) {
    if (!t[i] || (int)em_tensor_dtype(t[i]) != d[i].dtype || em_tensor_ndim(t[i]) != d[i].ndim ||
        !em_tensor_is_contiguous(t[i]) || em_tensor_size(t[i], 0) < n)
      return em_set_error(EM_ERR_ARGUMENT,
                          OP ": fill: '%s' must be a contiguous %s tensor of %d dims with >= %lld rows", d[i].name,
                          em_dtype_name((em_dtype)d[i].dtype), d[i].ndim, (long long)n);
    for (int k = 1; k < d[i].ndim; k++)
      if (em_tensor_size(t[i], k) != d[i].sizes[k])
        return em_set_error(EM_ERR_SHAPE, OP ": fill: '%s' has the wrong sample shape", d[i].name);
  }
  return EM_OK;
}


/* em_source_fill for samples already in memory and copied as they are (IDX, npy, no
 * transforms): the rows' base and the labels' found once, not per sample through sample_at;
 * at batch 128 of Fashion-MNIST that lookup was a tenth of a reader's time besides the
 * copy. Nothing can be a bad record here: only an id out of range fails. */
static em_status fill_rows(em_source *s, const int64_t *ids, int64_t n, int64_t base, uint8_t *xd, int64_t *yd,
                           int64_t *kept_ids) {
  const uint8_t *rows, *labels = NULL;
  int ldtype = EM_INT64;
  if (s->kind == SRC_IDX) {
    rows = em_tensor_data(s->images);
    if (s->has_labels) labels = em_tensor_data(s->labels), ldtype = (int)em_tensor_dtype(s->labels);
  } else {
    rows = s->x.map + s->x.data_offset;
    if (s->has_labels) labels = s->y.map + s->y.data_offset, ldtype = (int)s->y.dtype;
  }
  size_t row = (size_t)s->row_bytes;
  for (int64_t i = 0; i < n; i++) {
    int64_t id;
    if (__builtin_sub_overflow(ids[i], base, &id) || id < 0 || id >= s->n) /* ids may come from a peer */
      return em_set_error(EM_ERR_INDEX, OP ": sample id %lld is out of range (expected %lld..%lld)", (long long)ids[i],
                          (long long)base, (long long)(s->n - 1 + base));
    memcpy(xd + (size_t)i * row, rows + (size_t)id * row, row);
    if (yd && labels) yd[i] = label_of(labels, ldtype, id) + s->label_offset;
    if (kept_ids) kept_ids[i] = ids[i];
  }
  return EM_OK;
}

em_status em_source_fill(em_source *s, const int64_t *ids, int64_t n, int64_t base, const em_augment *aug,
                         uint64_t seed, uint64_t epoch, em_tensor *x, em_tensor *y, int skip_bad, int64_t *kept,
                         int64_t *kept_ids, int64_t *skipped, em_stage_times *times) {
  if (!s || (n && !ids) || n < 0 || !kept) return em_set_error(EM_ERR_ARGUMENT, OP ": fill expects a source and ids");
  em_status st = check_out(s, aug, n, x, y);
  if (st) return st;
  int64_t xrow = em_tensor_numel(x) / (em_tensor_size(x, 0) ? em_tensor_size(x, 0) : 1) *
                 (int64_t)em_dtype_size(em_tensor_dtype(x));
  uint8_t *xd = em_tensor_data(x);
  int64_t *yd = s->has_labels ? em_tensor_data(y) : NULL;
  double t_read = 0, t_decode = 0, t0 = em_clock_monotonic();
  int64_t k = 0, bad = 0;
  int plain_copy = !augments(aug);
  if (plain_copy && (s->kind == SRC_IDX || s->kind == SRC_NPY) && xrow == s->row_bytes &&
      !(s->image && s->last && s->c > 1)) {
    st = fill_rows(s, ids, n, base, xd, yd, kept_ids);
    if (st) return st;
    *kept = n;
    if (times) times->read += em_clock_monotonic() - t0; /* in-memory sources: the copy is the read */
    return EM_OK;
  }
  char first_bad[1024] = "";
  for (int64_t i = 0; i < n; i++) {
    int64_t id;
    if (__builtin_sub_overflow(ids[i], base, &id) || id < 0 || id >= s->n) /* ids may come from a peer */
      return em_set_error(EM_ERR_INDEX, OP ": sample id %lld is out of range (expected %lld..%lld)", (long long)ids[i],
                          (long long)base, (long long)(s->n - 1 + base));
    const uint8_t *px;
    int h, w, c, oc, oh, ow;
    int64_t label;
    st = sample_at(s, id, &px, &h, &w, &c, &label, &t_read, &t_decode);
    if (!st && s->image && (h != s->h || w != s->w) && dp_augment_shape(aug, s->c ? s->c : 3, h, w, &oc, &oh, &ow)) {
      st = em_last_status(); /* a crop that does not fit this image */
    } else if (!st && s->image && (h != s->h || w != s->w) && !(aug && aug->crop_h && aug->crop_w)) {
      st = em_set_error(EM_ERR_FORMAT,
                        OP ": sample %lld: a %dx%d image where the first was %dx%d (crop them to one size)",
                        (long long)ids[i], h, w, s->h, s->w);
    }
    if (st) {
      if (!skip_bad) return st;
      if (!bad) snprintf(first_bad, sizeof first_bad, "%s", em_last_error());
      bad++;
      continue;
    }
    em_sample_rng rng = {seed, epoch, ids[i], 0};
    uint8_t *dst = xd + k * xrow;
    if (s->image && (plain_copy == 0 || (s->last && c > 1))) dp_augment_sample(px, c, h, w, s->last, aug, &rng, dst);
    else /* raw rows, and images kept as they are (channels first already): one copy */ memcpy(dst, px, (size_t)xrow);
    if (yd) yd[k] = label + s->label_offset;
    if (kept_ids) kept_ids[k] = ids[i];
    k++;
  }
  double total = em_clock_monotonic() - t0;
  *kept = k;
  if (skipped) *skipped += bad;
  if (times) {
    times->read += t_read;
    times->decode += t_decode;
    double rest = total - t_read - t_decode; /* in-memory sources: the copy is the read */
    if (augments(aug) || s->encoded) times->transform += rest > 0 ? rest : 0;
    else times->read += rest > 0 ? rest : 0;
  }
  if (bad) em_set_error(EM_ERR_FORMAT, "%s", first_bad); /* for the caller's log; the status is EM_OK */
  return EM_OK;
}

/* The kept rows of t (rows 0..kept), in a tensor of their own: a batch with records skipped
 * owns exactly what it holds. */
static em_status keep_rows(em_tensor **t, int64_t kept) {
  if (!*t || em_tensor_size(*t, 0) == kept) return EM_OK;
  em_tensor *v = NULL, *c = NULL;
  em_status st = em_narrow(&v, *t, 0, 0, kept);
  if (!st) st = em_clone(&c, v);
  em_tensor_release(v);
  if (st) return st;
  em_tensor_release(*t);
  *t = c;
  return EM_OK;
}

em_status em_source_batch(em_tensor **out, em_source *s, const int64_t *ids, int64_t n, int64_t base,
                          const em_augment *aug, uint64_t seed, uint64_t epoch, int skip_bad, int64_t *skipped,
                          em_stage_times *times) {
  if (!out || out[0] || out[1] || out[2])
    return em_set_error(EM_ERR_ARGUMENT, OP ": batch: out must point to 3 NULL tensors (x, y, ids)");
  em_tensor_desc d[2];
  int nd = em_source_describe(s, aug, n, d);
  if (nd < 0) return em_last_status();
  if (!s->pool) s->pool = dp_pool_new(); /* without one (out of memory), em_empty */
  em_tensor *t[3] = {NULL, NULL, NULL};
  em_status st = dp_pool_empty(s->pool, &t[0], d[0].ndim, d[0].sizes, (em_dtype)d[0].dtype);
  if (!st && nd == 2) st = dp_pool_empty(s->pool, &t[1], 1, d[1].sizes, EM_INT64);
  if (!st) st = dp_pool_empty(s->pool, &t[2], 1, &n, EM_INT64);
  int64_t kept = 0;
  if (!st)
    st = em_source_fill(s, ids, n, base, aug, seed, epoch, t[0], t[1], skip_bad, &kept, em_tensor_data(t[2]), skipped,
                        times);
  for (int i = 0; i < 3 && !st && kept < n; i++) st = keep_rows(&t[i], kept);
  if (st) {
    for (int i = 0; i < 3; i++) em_tensor_release(t[i]);
    return st;
  }
  for (int i = 0; i < 3; i++) out[i] = t[i];
  return EM_OK;
}

em_status em_source_get(em_source *s, int64_t index, int64_t base, const em_augment *aug, em_sample_rng *rng,
                        em_tensor **x, em_tensor **y) {
  if (!s || !x || *x || !y || *y) return em_set_error(EM_ERR_ARGUMENT, OP ": get expects a source and empty outputs");
  em_tensor_desc d[2];
  int nd = em_source_describe(s, aug, 1, d);
  if (nd < 0) return em_last_status();
  em_tensor *bx = NULL, *by = NULL;
  em_status st = em_empty(&bx, d[0].ndim, d[0].sizes, (em_dtype)d[0].dtype, (em_device){EM_CPU, 0});
  if (!st && nd == 2) st = em_empty(&by, 1, d[1].sizes, EM_INT64, (em_device){EM_CPU, 0});
  int64_t kept = 0;
  if (!st)
    st = em_source_fill(s, &index, 1, base, aug, rng ? rng->seed : 0, rng ? rng->epoch : 0, bx, by, 0, &kept, NULL,
                        NULL, NULL);
  if (!st) st = em_select(x, bx, 0, 0);
  if (!st && by) st = em_select(y, by, 0, 0);
  em_tensor_release(bx);
  em_tensor_release(by);
  return st;
}
