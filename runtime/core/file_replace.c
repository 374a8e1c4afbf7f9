/* file_replace.c - replacing a file so that readers see the old contents or the new ones,
 * never a mixture, and a crash or power cut leaves one of the two on disk.
 *
 * The new contents go to a temporary file beside the target (the same file system, so the
 * rename is atomic), which is fsync'ed before the rename: without it, a crash soon after
 * can leave the new name pointing at an empty or partial file. The folder is fsync'ed after
 * the rename so that the rename itself survives. O_EXCL: never write through a link, nor
 * into a temporary file another writer is filling. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/core_impl.h"

/* Makes the rename durable; a failure here cannot undo the save, so it is ignored. */
static void sync_parent_folder(const char *path) {
  char *dir = strdup(path);
  if (!dir) return;
  char *slash = strrchr(dir, '/');
  const char *folder = ".";
  if (slash == dir) {
    folder = "/";
  } else if (slash) {
    *slash = 0;
    folder = dir;
  }
  int fd = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
  free(dir);
}

em_status core_write_all(int fd, const void *data, size_t n) {
  const char *p = data;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return EM_ERR_IO;
    p += w;
    n -= (size_t)w;
  }
  return EM_OK;
}

em_status core_replace_file(const char *what, const char *path, core_file_writer write_contents, void *ctx) {
  size_t len = strlen(path) + 32;
  char *tmp = malloc(len);
  if (!tmp) return em_set_error(EM_ERR_MEMORY, "%s '%s': out of memory", what, path);
  snprintf(tmp, len, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    int err = errno;
    em_status st =
        em_set_error(EM_ERR_IO, "%s '%s': cannot create the temporary file '%s': %s%s", what, path, tmp, strerror(err),
                     err == EEXIST ? " (another save is writing it, or a crashed one left it: remove it)" : "");
    free(tmp);
    return st;
  }
  em_status st = write_contents(fd, ctx);
  if (!st && fsync(fd))
    st = em_set_error(EM_ERR_IO, "%s '%s': fsync of '%s' failed: %s", what, path, tmp, strerror(errno));
  if (close(fd) && !st)
    st = em_set_error(EM_ERR_IO, "%s '%s': closing '%s' failed: %s", what, path, tmp, strerror(errno));
  if (!st && rename(tmp, path))
    st = em_set_error(EM_ERR_IO, "%s '%s': cannot rename '%s' over it: %s", what, path, tmp, strerror(errno));
  if (st) unlink(tmp);
  else sync_parent_folder(path);
  free(tmp);
  return st;
}

typedef struct bytes_ctx {
  const char *what, *path;
  const void *data;
  size_t n;
} bytes_ctx;

static em_status write_bytes(int fd, void *ctx) {
  bytes_ctx *b = ctx;
  if (core_write_all(fd, b->data, b->n))
    return em_set_error(EM_ERR_IO, "%s '%s': writing %zu bytes failed: %s", b->what, b->path, b->n, strerror(errno));
  return EM_OK;
}

em_status em_file_replace(const char *path, const void *data, size_t n) {
  if (!path || !*path) return em_set_error(EM_ERR_ARGUMENT, "file_replace: the path is empty");
  if (!data && n) return em_set_error(EM_ERR_ARGUMENT, "file_replace '%s': no data for %zu bytes", path, n);
  bytes_ctx b = {"file_replace", path, data, n};
  return core_replace_file("file_replace", path, write_bytes, &b);
}
