-- tests/distributed/util.lua - assertions for the multi-process tests (run under mpirun, one
-- script per rank; a failed check raises, the rank exits non-zero and the launcher stops
-- the job with that status, which fails the CTest case).
--   local U = dofile(arg[0]:gsub('[^/]*$', '') .. 'util.lua')
local U = {}
local dist = ember.dist

U.passed = 0

function U.check(cond, msg, ...)
  if not cond then error(string.format('rank %d: ' .. msg, dist.rank(), ...), 2) end
  U.passed = U.passed + 1
end

-- max |a - b| over two tensors (converted to float64)
function U.maxdiff(a, b)
  if a:numel() == 0 then return 0 end
  return (a:to('float64') - b:to('float64')):abs():max():item()
end

function U.near(a, b, tol, what)
  local d = U.maxdiff(a, b)
  if not (d <= tol) then error(string.format('rank %d: %s: max difference %g > %g', dist.rank(), what, d, tol), 2) end
  U.passed = U.passed + 1
end

function U.equal(a, b, what) U.near(a, b, 0, what) end

-- Runs fn, which must fail with a message containing every string of `needles`.
function U.fails(fn, needles, what)
  local ok, err = pcall(fn)
  if ok then error(string.format('rank %d: %s: expected an error', dist.rank(), what), 2) end
  err = tostring(err)
  for _, s in ipairs(type(needles) == 'table' and needles or { needles }) do
    if not err:find(s, 1, true) then
      error(string.format("rank %d: %s: the error lacks '%s': %s", dist.rank(), what, s, err), 2)
    end
  end
  U.passed = U.passed + 1
  return err
end

-- Raises em_last_error() when a C call's status is not 0 (for C functions called directly).
function U.check_status(st)
  if st ~= 0 then error(require('ffi').string(require('ember.internal').C.em_last_error()), 2) end
end

-- Every rank holds the same values in t (bit for bit).
function U.same_everywhere(t, what)
  local all = dist.all_gather(t:contiguous())
  for r = 2, dist.world_size() do
    if not all[r]:eq(all[1]):all():item() then
      error(string.format('rank %d: %s: rank %d differs from rank 0', dist.rank(), what, r - 1), 2)
    end
  end
  U.passed = U.passed + 1
end

function U.done(name)
  dist.barrier()
  if dist.rank() == 0 then print(string.format('%s: %d checks passed on each of %d ranks', name, U.passed,
    dist.world_size())) end
end

return U
