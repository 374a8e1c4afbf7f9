-- examples/char_lstm.lua: char-rnn written by hand: the fortune cookies Debian ships
-- (package fortunes) as characters, a 2 x 128 LSTM (pipelines/models/char_lstm.lua), RMSprop
-- 2e-3 with gradients clamped to [-5, 5], sequences of 50 in batches of 50; the validation
-- loss on the held-out last tenth, a checkpoint and the tokenizer in --dir, then a sample.
--
--   build/ember examples/char_lstm.lua                          # 2000 steps
--   build/ember examples/char_lstm.lua --steps 50 --hidden 32   # a quick look (the tests' size)
--   build/ember examples/sample.lua runs/examples/char_lstm/model.safetensors --prompt 'The '
--
-- Options: --steps N, --batch-size N, --seq N, --hidden N, --layers N, --lr X, --seed N,
-- --eval-every N, --val-blocks N (held-out blocks per evaluation), --dir DIR.
local ember = require 'ember'
local nn, F, optim, json = ember.nn, ember.nn.functional, ember.optim, require 'ember.util.json'

local defaults = { steps = 2000, batch_size = 50, seq = 50, hidden = 128, layers = 2, lr = 2e-3, seed = 0,
  eval_every = 500, val_blocks = 200, dir = 'runs/examples/char_lstm' }
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

-- the corpus, its characters, and the two parts as token streams
local corpus = { files = { '/usr/share/games/fortunes/*' }, exclude = { '*.dat', '*.u8' } }
local c = ember.text.corpus(corpus)
local train = ember.text.TokenStream(c.tokens, { block = opt.seq, part = 'train' })
local val = ember.text.TokenStream(c.tokens, { block = opt.seq, part = 'val', limit = opt.val_blocks })
local loader = ember.data.DataLoader { dataset = train, batch_size = opt.batch_size, shuffle = true, seed = opt.seed,
  drop_last = true }
local val_loader = ember.data.DataLoader { dataset = val, batch_size = 100 }
print(string.format('corpus: %d bytes, %d characters; %d training blocks per epoch', c.bytes, c.tokenizer:vocab_size(),
  train:size()))

local model_file = 'pipelines/models/char_lstm.lua'
local args = { vocab_size = c.tokenizer:vocab_size(), hidden = opt.hidden, layers = opt.layers }
local model = require('ember.pipeline.model').from_file(model_file, args)
local opt_rms = optim.RMSprop(model:parameters(), { lr = opt.lr, alpha = 0.95 })
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
    opt_rms:zero_grad()
    loss:backward()
    nn.utils.clip_grad_value_(model:parameters(), 5)
    opt_rms:step()
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

-- the checkpoint names its model file and args; the tokenizer sits beside it
require('ember.util.libc').mkdirs(opt.dir)
ember.save(opt.dir .. '/model.safetensors', model:state_dict(),
  { metadata = { model = json.encode { file = model_file, args = args } } })
c.tokenizer:save(opt.dir .. '/tokenizer.txt')
print('saved ' .. opt.dir .. '/model.safetensors')
