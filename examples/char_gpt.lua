-- examples/char_gpt.lua: nanoGPT's character model written by hand: the fortune cookies
-- Debian ships (package fortunes) as characters, 4 pre-norm transformer blocks of 4 heads,
-- 128 wide, over blocks of 64 (pipelines/models/char_gpt.lua), AdamW with weight decay on
-- matrices only, a warm-up then a cosine decay, gradient norm clipped to 1, batches of 12;
-- the validation loss on the held-out last tenth, a checkpoint and the tokenizer in --dir.
--
--   build/ember examples/char_gpt.lua                                   # 2000 steps
--   build/ember examples/char_gpt.lua --steps 50 --embed 32 --layers 1  # the tests' size
--   build/ember examples/sample.lua runs/examples/char_gpt/model.safetensors --top_k 10
--
-- Options: --steps N, --batch-size N, --block N, --embed N, --layers N, --heads N, --lr X,
-- --min-lr X, --warmup N, --seed N, --eval-every N, --val-blocks N, --dir DIR.
local ember = require 'ember'
local nn, F, optim, json = ember.nn, ember.nn.functional, ember.optim, require 'ember.util.json'

local defaults = { steps = 2000, batch_size = 12, block = 64, embed = 128, layers = 4, heads = 4, lr = 1e-3,
  min_lr = 1e-4, warmup = 100, seed = 0, eval_every = 500, val_blocks = 240, dir = 'runs/examples/char_gpt' }
local function options(args)
  local o = setmetatable({}, { __index = defaults })
  for i = 1, #args, 2 do
    local key = args[i]:match('^%-%-([%w-]+)$')
    key = key and key:gsub('-', '_')
    if key == nil or defaults[key] == nil then error('unknown option ' .. args[i] .. ' (see ' .. arg[0] .. ')', 0) end
    local v = args[i + 1]
    if type(defaults[key]) == 'number' then v = tonumber(v) end
    if v == nil then error('--' .. key .. ' needs a value', 0) end
    o[key] = v
  end
  return o
end
local opt = options(arg)
ember.manual_seed(opt.seed)

local corpus = { files = { '/usr/share/games/fortunes/*' }, exclude = { '*.dat', '*.u8' } }
local c = ember.text.corpus(corpus)
local train = ember.text.TokenStream(c.tokens, { block = opt.block, part = 'train' })
local val = ember.text.TokenStream(c.tokens, { block = opt.block, part = 'val', limit = opt.val_blocks })
local loader = ember.data.DataLoader { dataset = train, batch_size = opt.batch_size, shuffle = true, seed = opt.seed,
  drop_last = true }
local val_loader = ember.data.DataLoader { dataset = val, batch_size = 48 }
print(string.format('corpus: %d bytes, %d characters; %d training blocks per epoch', c.bytes, c.tokenizer:vocab_size(),
  train:size()))

local model_file = 'pipelines/models/char_gpt.lua'
local args = { vocab_size = c.tokenizer:vocab_size(), block = opt.block, layers = opt.layers, heads = opt.heads,
  embed = opt.embed, dropout = 0 }
local model = require('ember.pipeline.model').from_file(model_file, args)
local adamw = optim.AdamW(optim.weight_decay_groups(model, 0.1), { lr = opt.lr, betas = { 0.9, 0.99 } })
local sched = optim.lr_scheduler.WarmupCosineLR(adamw, { warmup_steps = opt.warmup, total_steps = opt.steps,
  min_lr = opt.min_lr })
local V = args.vocab_size

local function lm_loss(logits, y) return F.cross_entropy(logits:reshape(-1, V), y:reshape(-1)) end

local function evaluate()
  model:eval()
  local sum, n = 0, 0
  ember.no_grad(function()
    for b in val_loader:epoch(0) do
      sum, n = sum + lm_loss(model(b.x), b.y):item() * b.x.shape[1], n + b.x.shape[1]
    end
  end)
  model:train()
  return sum / n
end

local now = require('ember.util.progress').now
local step, epoch, t0 = 0, 0, now()
while step < opt.steps do
  epoch = epoch + 1
  for b in loader:epoch(epoch) do
    local loss = lm_loss(model(b.x), b.y)
    adamw:zero_grad()
    loss:backward()
    nn.utils.clip_grad_norm_(model:parameters(), 1.0)
    adamw:step()
    sched:step()
    step = step + 1
    if step % opt.eval_every == 0 or step == opt.steps then
      print(string.format('step %d  train_loss %.4f  val_loss %.4f  (%.0f s)', step, loss:item(), evaluate(),
        now() - t0))
    end
    if step >= opt.steps then break end
  end
end
local val_loss = evaluate()
print(string.format('val loss: %.4f  val perplexity: %.2f', val_loss, math.exp(val_loss)))

require('ember.util.libc').mkdirs(opt.dir)
ember.save(opt.dir .. '/model.safetensors', model:state_dict(),
  { metadata = { model = json.encode { file = model_file, args = args } } })
c.tokenizer:save(opt.dir .. '/tokenizer.txt')
print('saved ' .. opt.dir .. '/model.safetensors')
