-- One timed run of a character model's training steps in ember (bench/seq/char_models.py runs
-- it interleaved with bench/seq/torch_char_models.py, the same model, data and steps in PyTorch).
--   ember bench/seq/char_models.lua lstm|gpt STEPS THREADS [VAL_BLOCKS [bfloat16]]
-- bfloat16: the forward under ember.autocast('cpu', {dtype = 'bfloat16'}) (oneDNN's bf16 matmuls).
-- Batches: row r of step s starts at ((s * B + r) * 48271) mod (train tokens - block - 1), the
-- same formula in both scripts; validation: the first VAL_BLOCKS blocks of the held-out tenth.
-- Prints one JSON line: tokens_per_s (steps after the first 3), tokens_per_cpu_s (the same per second
-- of process CPU time: steadier than wall time on a shared machine), final train loss, val_loss.
local ember = require 'ember'
local F, optim, nn = ember.nn.functional, ember.optim, ember.nn
local which, steps, threads, val_blocks = arg[1], tonumber(arg[2] or 50), tonumber(arg[3] or 1), tonumber(arg[4] or 0)
local amp = arg[5] == 'bfloat16'
ember.set_num_threads(threads)
ember.manual_seed(0)
local c = ember.text.corpus { files = { '/usr/share/games/fortunes/*' }, exclude = { '*.dat', '*.u8' } }
local V = c.tokenizer:vocab_size()
local n = c.tokens:numel()
local n_train = n - math.floor(n * 0.1)
local cfg = which == 'lstm' and { B = 50, T = 50 } or { B = 12, T = 64 }
local B, T = cfg.B, cfg.T
local model, opt, sched, clip
if which == 'lstm' then
  model = require('ember.pipeline.model').from_file('pipelines/models/char_lstm.lua', { vocab_size = V })
  opt = optim.RMSprop(model:parameters(), { lr = 2e-3, alpha = 0.95 })
  clip = function() nn.utils.clip_grad_value_(model:parameters(), 5) end
else
  model = require('ember.pipeline.model').from_file('pipelines/models/char_gpt.lua', { vocab_size = V })
  opt = optim.AdamW(optim.weight_decay_groups(model, 0.1), { lr = 1e-3, betas = { 0.9, 0.99 } })
  sched = optim.lr_scheduler.WarmupCosineLR(opt, { warmup_steps = math.min(100, math.max(math.floor(steps / 10), 1)),
    total_steps = steps, min_lr = 1e-4 })
  clip = function() nn.utils.clip_grad_norm_(model:parameters(), 1.0) end
end

local function batch(starts)
  local b = #starts
  local idx = ember.empty({ b * (T + 1) }, { dtype = 'int64' })
  local p = ember.ffi.cast('int64_t *', idx:data_ptr())
  for r = 1, b do for j = 0, T do p[(r - 1) * (T + 1) + j] = starts[r] + j + 1 end end
  local rows = c.tokens:index_select(1, idx):view(b, T + 1)
  return rows:narrow(2, 1, T), rows:narrow(2, 2, T)
end

local now = require('ember.util.progress').now
local ffi = require 'ffi'
pcall(ffi.cdef, 'long clock(void);')
local function cpu_now() return tonumber(ffi.C.clock()) / 1e6 end -- process CPU time (POSIX CLOCKS_PER_SEC)
local t0, c0, loss
for s = 0, steps - 1 do
  if s == 3 then t0, c0 = now(), cpu_now() end
  local starts = {}
  for r = 0, B - 1 do starts[r + 1] = ((s * B + r) * 48271) % (n_train - T - 1) end
  local x, y = batch(starts)
  local l
  if amp then
    l = ember.autocast('cpu', { dtype = 'bfloat16' }, function()
      return F.cross_entropy(model(x):reshape(-1, V), y:reshape(-1))
    end)
  else
    l = F.cross_entropy(model(x):reshape(-1, V), y:reshape(-1))
  end
  opt:zero_grad()
  l:backward()
  clip()
  opt:step()
  if sched then sched:step() end
  loss = l:item()
end
local dt, cdt = now() - t0, cpu_now() - c0
local val
if val_blocks > 0 then
  model:eval()
  local sum = 0
  ember.no_grad(function()
    for k = 0, val_blocks - 1, 50 do
      local starts = {}
      for r = k, math.min(k + 49, val_blocks - 1) do starts[#starts + 1] = n_train + r * T end
      local x, y = batch(starts)
      sum = sum + F.cross_entropy(model(x):reshape(-1, V), y:reshape(-1)):item() * #starts
    end
  end)
  val = sum / val_blocks
end
print(string.format('{"impl": "%s", "model": "%s", "threads": %d, "steps": %d, "tokens_per_s": %.1f, ' ..
  '"tokens_per_cpu_s": %.1f, "loss": %.4f, "val_loss": %s}', amp and 'ember_bf16' or 'ember', which, threads, steps, (steps - 3) * B * T / dt,
  (steps - 3) * B * T / cdt, loss,
  val and string.format('%.4f', val) or 'null'))
