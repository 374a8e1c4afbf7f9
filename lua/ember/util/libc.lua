-- ember.util.libc: the few POSIX calls ember's Lua code makes, declared once for LuaJIT's
-- FFI and wrapped so that callers get Lua values (strings, numbers, nil on failure).
--
--   local libc = require 'ember.util.libc'
--   libc.setenv(name, value)       libc.now()              (seconds, monotonic clock)
--   libc.time()                    (seconds since 1970, the real-time clock, with fractions)
--   libc.isatty(fd)                libc.hostname()         libc.readlink(path)
--   libc.realpath(path)            libc.file_info(path)    ({sec, nsec, size} or nil)
--   libc.mkdir(path, mode)         libc.unlink(path)       (true, or nil and errno)
--   libc.strerror(errno)           libc.mkdirs(path)       (mkdir -p; raises on failure)
--   libc.glob(pattern)             (the matching paths, sorted; {} when none)
--   libc.fnmatch(pattern, name)    (true when the shell pattern matches)
local ffi = require 'ffi'

-- Each declaration on its own: one already made (by a user's script or another library
-- in the process) must not stop the others.
for _, decl in ipairs {
  'int setenv(const char *name, const char *value, int overwrite);',
  'typedef struct em_libc_timespec { long tv_sec; long tv_nsec; } em_libc_timespec;',
  'int clock_gettime(int clock, em_libc_timespec *ts);',
  'int isatty(int fd);',
  'int gethostname(char *name, size_t len);',
  'long readlink(const char *path, char *buf, unsigned long size);',
  'char *realpath(const char *path, char *resolved);',
  'void free(void *p);',
  'int mkdir(const char *path, unsigned int mode);',
  'int unlink(const char *path);',
  'char *strerror(int errnum);',
  -- glibc's glob_t: the count, the paths, the offset, flags, then five hooks ember never sets
  [[typedef struct em_libc_glob { size_t pathc; char **pathv; size_t offs; int flags; void *hooks[5]; } em_libc_glob;
  int glob(const char *pattern, int flags, void *errfunc, em_libc_glob *g);
  void globfree(em_libc_glob *g);]],
  'int fnmatch(const char *pattern, const char *name, int flags);',
  -- statx has the same layout on every architecture (stat does not).
  [[typedef struct em_libc_statx_ts { int64_t tv_sec; uint32_t tv_nsec; int32_t reserved; } em_libc_statx_ts;
  typedef struct em_libc_statx {
    uint32_t mask, blksize; uint64_t attributes; uint32_t nlink, uid, gid; uint16_t mode, spare0;
    uint64_t ino, size, blocks, attributes_mask;
    em_libc_statx_ts atime, btime, ctime, mtime;
    uint32_t rdev_major, rdev_minor, dev_major, dev_minor; uint64_t spare2[14];
  } em_libc_statx;
  int statx(int dirfd, const char *path, int flags, unsigned int mask, em_libc_statx *buf);]],
} do
  pcall(ffi.cdef, decl)
end

local C = ffi.C
local M = {}

function M.setenv(name, value) return C.setenv(name, value, 1) == 0 end

local ts = ffi.new('em_libc_timespec')
-- Seconds on the monotonic clock.
function M.now()
  C.clock_gettime(1, ts)   -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

-- Seconds since the Unix epoch (CLOCK_REALTIME), with nanoseconds as a fraction.
function M.time()
  C.clock_gettime(0, ts)   -- CLOCK_REALTIME
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

function M.isatty(fd) return C.isatty(fd) == 1 end

function M.hostname()
  local buf = ffi.new('char[256]')
  if C.gethostname(buf, 255) ~= 0 then return nil end
  return ffi.string(buf)
end

function M.readlink(path)
  local buf = ffi.new('char[4096]')
  local n = C.readlink(path, buf, 4095)
  if n <= 0 then return nil end
  return ffi.string(buf, n)
end

-- The absolute path of an existing file, or nil.
function M.realpath(path)
  local p = C.realpath(path, nil)
  if p == nil then return nil end
  local s = ffi.string(p)
  C.free(p)
  return s
end

local stx = ffi.new('em_libc_statx')
-- {sec =, nsec =, size =} of path (its modification time and size), or nil.
function M.file_info(path)
  if C.statx(-100, path, 0, 0x240, stx) ~= 0 then return nil end   -- AT_FDCWD; STATX_MTIME | STATX_SIZE
  return { sec = tonumber(stx.mtime.tv_sec), nsec = tonumber(stx.mtime.tv_nsec), size = tonumber(stx.size) }
end

function M.mkdir(path, mode)
  if C.mkdir(path, mode) ~= 0 then return nil, ffi.errno() end
  return true
end

function M.unlink(path)
  if C.unlink(path) ~= 0 then return nil, ffi.errno() end
  return true
end

function M.strerror(errno) return ffi.string(C.strerror(errno)) end

function M.glob(pattern)
  local g = ffi.new('em_libc_glob')
  local out = {}
  if C.glob(pattern, 0, nil, g) == 0 then
    for i = 0, tonumber(g.pathc) - 1 do out[#out + 1] = ffi.string(g.pathv[i]) end
  end
  C.globfree(g)
  return out
end

function M.fnmatch(pattern, name) return C.fnmatch(pattern, name, 0) == 0 end

-- mkdir -p; raises with the path and the reason.
function M.mkdirs(path)
  local sofar = path:sub(1, 1) == '/' and '/' or ''
  for part in path:gmatch('[^/]+') do
    sofar = sofar .. part .. '/'
    local ok, errno = M.mkdir(sofar, tonumber('755', 8))
    if not ok and errno ~= 17 then   -- EEXIST
      error(string.format("cannot create the directory '%s': %s", sofar, M.strerror(errno)), 0)
    end
  end
end

return M
