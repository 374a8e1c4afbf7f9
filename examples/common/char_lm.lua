-- examples/common/char_lm.lua: the training script examples/char_lstm.lua and
-- examples/char_gpt.lua share: the fortune cookies Debian ships (package fortunes) as
-- characters, split into training blocks and the held-out last tenth, the loop with the
-- validation loss every --eval-every steps, then a checkpoint that names its model file and
-- arguments, with the tokenizer beside it (examples/sample.lua reads both).
--
-- It returns train(spec): spec.opt (the parsed options: steps, batch_size, seed, eval_every,
-- val_blocks, dir), spec.block (tokens per block), spec.val_batch (blocks per validation
-- batch), spec.model_file and spec.args(vocab_size) (the model's arguments), and
-- spec.optimizer(model, opt), which returns the optimizer and step(), called after each
-- backward pass to clip, update and schedule as the model wants.
local ember = require 'ember'
local F, json = ember.nn.functional, require 'ember.util.json'

return function(spec)
  local opt = spec.opt
  ember.manual_seed(opt.seed)
  local corpus = { files = { '/usr/share/games/fortunes/*' }, exclude = { '*.dat', '*.u8' } }
  local c = ember.text.corpus(corpus)
  local train = ember.text.TokenStream(c.tokens, { block = spec.block, part = 'train' })
  local val = ember.text.TokenStream(c.tokens, { block = spec.block, part = 'val', limit = opt.val_blocks })
  local loader = ember.data.DataLoader { dataset = train, batch_size = opt.batch_size, shuffle = true,
    seed = opt.seed, drop_last = true }
  local val_loader = ember.data.DataLoader { dataset = val, batch_size = spec.val_batch }
  print(string.format('corpus: %d bytes, %d characters; %d training blocks per epoch', c.bytes,
    c.tokenizer:vocab_size(), train:size()))

  local V = c.tokenizer:vocab_size()
  local args = spec.args(V)
  local model = require('ember.pipeline.model').from_file(spec.model_file, args)
  local optimizer, update = spec.optimizer(model, opt)
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
      optimizer:zero_grad()
      loss:backward()
      update()
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
    { metadata = { model = json.encode { file = spec.model_file, args = args } } })
  c.tokenizer:save(opt.dir .. '/tokenizer.txt')
  print('saved ' .. opt.dir .. '/model.safetensors')
end
