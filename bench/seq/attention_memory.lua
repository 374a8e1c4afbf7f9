-- Peak memory of attention forward + backward at one size, fused or materialised:
--   ember bench/seq/attention_memory.lua fused|materialised [T = 1024] [B = 4] [H = 4] [D = 64]
-- Prints one JSON line: ember's tensor bytes at peak above the inputs (em_memory_peak) and
-- the process's peak RSS (VmHWM). Run each variant in its own process (run.sh does).
local ember = require 'ember'
local C = require('ember.internal').C
local F = ember.nn.functional
local mode = arg[1] or 'fused'
local T, B, H, D = tonumber(arg[2] or 1024), tonumber(arg[3] or 4), tonumber(arg[4] or 4), tonumber(arg[5] or 64)

local function vm_hwm_kib()
  for line in io.lines('/proc/self/status') do
    local v = line:match('^VmHWM:%s+(%d+)')
    if v then return tonumber(v) end
  end
end

ember.manual_seed(0)
local q = ember.randn(B, H, T, D):requires_grad_()
local k = ember.randn(B, H, T, D):requires_grad_()
local v = ember.randn(B, H, T, D):requires_grad_()
local w = ember.randn(B, H, T, D)
collectgarbage()
local base = tonumber(C.em_memory_allocated())
C.em_memory_reset_peak()
local t0 = os.clock()
local y
if mode == 'fused' then
  y = F.scaled_dot_product_attention(q, k, v, { causal = true })
else
  local s = q:matmul(k:transpose(3, 4)) * (1 / math.sqrt(D))
  s = s:masked_fill(ember.arange(T):view(1, T):gt(ember.arange(T):view(T, 1)), -math.huge)
  y = s:softmax(4):matmul(v)
end
;(y * w):sum():backward()
local secs = os.clock() - t0
print(string.format('{"mode": "%s", "T": %d, "B": %d, "H": %d, "D": %d, "peak_tensor_bytes_above_inputs": %d, ' ..
  '"peak_rss_kib": %d, "cpu_seconds": %.3f}', mode, T, B, H, D, tonumber(C.em_memory_peak()) - base, vm_hwm_kib(), secs))
