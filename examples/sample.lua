-- examples/sample.lua: text from a trained character model (pipelines/char_lstm.yaml,
-- pipelines/char_gpt.yaml, examples/char_lstm.lua, examples/char_gpt.lua).
--
--   build/ember examples/sample.lua runs/char_gpt/checkpoints --prompt 'The ' --top_k 10
--   build/ember examples/sample.lua runs/examples/char_lstm/model.safetensors --temperature 0.8
--
-- CHECKPOINT is a pipeline's checkpoint folder (its newest checkpoint), one of its
-- epoch-NNNN.safetensors files, or a model.safetensors the example scripts write. The model
-- is rebuilt from the model file and args the checkpoint names, and the tokenizer is read
-- from tokenizer.txt beside it.
-- Options: --prompt TEXT (default: a newline), --length N (bytes of tokens to add, 500),
-- --temperature X (1.0; lower is more conservative), --top_k K (0: every token),
-- --seed N (0).
local ember = require 'ember'
local json = require 'ember.util.json'
local checkpoint = require 'ember.pipeline.checkpoint'
local model_spec = require 'ember.pipeline.model'

local opt = require('ember.util.cli').options(arg,
  { prompt = '\n', length = 500, temperature = 1.0, top_k = 0, seed = 0 }, { positional = 'CHECKPOINT' })

-- The model (rebuilt and loaded) and the folder its tokenizer is in.
local function load_model(path)
  local f = io.open(path .. '/latest', 'r')
  if f then   -- a pipeline's checkpoint folder
    f:close()
    path = checkpoint.latest(path)
  end
  local dir = path:match('^(.*)/[^/]*$') or '.'
  local tensors, meta = ember.load(path)
  local ref, sd
  if meta.format == 'ember-checkpoint/1' then
    local ck = checkpoint.load(path)
    ref, sd = ck.state.model, ck.model
  else
    ref = meta.model and json.decode(meta.model)
    sd = tensors
  end
  if type(ref) ~= 'table' or not ref.file then
    error(string.format("'%s' does not name the model file it was trained with", path), 0)
  end
  local model = model_spec.from_file(ref.file, ref.args)
  model:load_state_dict(sd)
  model:eval()
  return model, dir
end

local model, dir = load_model(opt[1])
local tok = ember.text.load(dir .. '/tokenizer.txt')
ember.manual_seed(opt.seed)

-- One id drawn from the last position's logits [V]: temperature, then the top k, then the
-- inverse of the cumulative distribution at a uniform draw.
local function draw(logits)
  local z = logits:to('float64') / opt.temperature
  if opt.top_k > 0 and opt.top_k < z:numel() then
    local vals = z:topk(opt.top_k)
    local kth = vals[opt.top_k]:item()
    z = z:masked_fill(z:lt(kth), -math.huge)
  end
  local p = z:softmax(1):totable()
  local u, acc = ember.rand(1):item(), 0
  for i = 1, #p do
    acc = acc + p[i]
    if u < acc then return i end
  end
  return #p
end

local ids = tok:encode(opt.prompt):totable()
local out = {}
ember.no_grad(function()
  if model.recurrent then   -- an RNN: the prompt once, then one token at a time with the state
    local logits, state = model(ember.tensor({ ids }, { dtype = 'int64' }))
    for _ = 1, opt.length do
      local id = draw(logits[1][logits.shape[2]])
      out[#out + 1] = id
      logits, state = model(ember.tensor({ { id } }, { dtype = 'int64' }), state)
    end
  else                      -- a transformer: the last block_size tokens each time
    local ctx = ids
    for _ = 1, opt.length do
      local n = #ctx
      local from = math.max(1, n - (model.block_size or n) + 1)
      local logits = model(ember.tensor({ { unpack(ctx, from, n) } }, { dtype = 'int64' }))
      local id = draw(logits[1][logits.shape[2]])
      out[#out + 1] = id
      ctx[#ctx + 1] = id
    end
  end
end)
io.write(opt.prompt, tok:decode(out), '\n')
