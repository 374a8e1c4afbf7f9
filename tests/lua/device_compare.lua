-- device_compare.lua: comparing a result computed on 'cuda' with the CPU backend's, for the
-- cuda_*_spec.lua files (loaded with dofile; runs only where a GPU is present).
local M = {}

-- An error message without its position, and with the backend's device named alike
-- ("not supported for bool tensors on the CPU" / "... on cuda").
function M.strip(msg)
  msg = tostring(msg):gsub('^.-_spec%.lua:%d+: ', '')
  return (msg:gsub('on the CPU', 'on <device>'):gsub('on cuda', 'on <device>'))
end

-- float16/bfloat16 as float32, which the CPU's eq takes exactly.
function M.comparable(t)
  if t.dtype == 'float16' or t.dtype == 'bfloat16' then return t:to('float32') end
  return t
end

function M.mismatch(what, c, g, same)
  local bad = same:logical_not():flatten():nonzero()
  local first = bad:numel() > 0 and bad:flatten():totable()[1] or 1
  local cf, gf = c:flatten(), g:flatten()
  return string.format('%s: %d of %d elements differ; first (flat position %d): cpu %s, cuda %s', what, bad:numel(),
    c:numel(), first, tostring(cf:narrow(1, first, 1):totable()[1]), tostring(gf:narrow(1, first, 1):totable()[1]))
end

function M.same_meta(what, cpu, gpu)
  assert(gpu.device:match('^cuda'), what .. ': the result is on ' .. tostring(gpu.device) .. ', expected cuda')
  assert(cpu.dtype == gpu.dtype, string.format('%s: dtype %s on cpu, %s on cuda', what, cpu.dtype, gpu.dtype))
  assert.are.same(cpu.shape, gpu.shape)
end

-- Equal everywhere (NaN matches NaN).
function M.check_equal(what, cpu, gpu)
  M.same_meta(what, cpu, gpu)
  if cpu:numel() == 0 then return end
  local c, g = M.comparable(cpu), M.comparable(gpu:to('cpu'))
  local same = c:eq(g)
  if c:is_floating_point() then same = same:logical_or(c:ne(c):logical_and(g:ne(g))) end
  if not same:all():item() then error(M.mismatch(what, c, g, same), 2) end
end

-- |cpu - cuda| <= atol + rtol |cpu|, or equal (infinities), or both NaN.
function M.check_close(what, cpu, gpu, rtol, atol)
  M.same_meta(what, cpu, gpu)
  if cpu:numel() == 0 then return end
  local c, g = cpu:to('float64'), gpu:to('cpu'):to('float64')
  local same = c:eq(g):logical_or(c:ne(c):logical_and(g:ne(g)))
  same = same:logical_or((c - g):abs():le(c:abs():mul(rtol):add(atol)))
  if not same:all():item() then error(M.mismatch(what, c, g, same), 2) end
end

return M
