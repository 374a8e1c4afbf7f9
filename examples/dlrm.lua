-- examples/dlrm.lua - DLRM (facebookresearch/dlrm, dlrm_s_pytorch.py) as a Lua model file:
-- it returns a function from DLRM's arguments to an nn.Module.
--
--   local make_dlrm = dofile('examples/dlrm.lua')
--   local model = make_dlrm{arch_mlp_bot = '13-512-256-64-16', arch_mlp_top = '512-256-1',
--                           table_sizes = {1000, 1000, 500}, arch_sparse_feature_size = 16}
--   local p = model(dense, {{idx1, off1}, {idx2, off2}, {idx3, off3}})   -- [B, 1]
--
-- Arguments (DLRM's names; sizes as DLRM's dash-separated strings or Lua lists):
--   arch_mlp_bot              bottom MLP, dense features in to the embedding dimension out
--   arch_mlp_top              top MLP after the interaction (its input size is prepended,
--                             as DLRM does), ending in 1
--   table_sizes               rows of each embedding table (DLRM's arch_embedding_size)
--   arch_sparse_feature_size  embedding dimension (= the bottom MLP's last size)
--   arch_interaction_op       'dot' (default) or 'cat'
--   arch_interaction_itself   false (default): the dot products of distinct pairs only
--   sparse                    true (default): row-sparse embedding gradients
--   mode                      'sum' (default): how bags are pooled
--   logits                    false (default): the top MLP ends in a sigmoid, as DLRM's
--   embeddings                'local' (default): every table here, one nn.EmbeddingBag each;
--                             'batched': every table here, all in one weight looked up in one
--                             call (nn.TableBatchedEmbeddingBags: faster, the same numbers);
--                             'sharded': model-parallel,
--                             whole tables placed on the ranks (nn.ShardedEmbeddingBags), the
--                             pooled vectors exchanged by all_to_all; wrap the model in
--                             nn.DistributedDataParallel for the MLPs. The same parameters as
--                             'local' for the same seed (each rank holding its tables).
--
-- forward(dense [B, #bottom input], sparse): sparse holds, per table, {indices, offsets}
-- (indices 1-based rows, offsets the 1-based start of each of the B bags: DLRM's offsets
-- format plus one) or a 2-d [B, L] index tensor. Initialisation as DLRM's: linear weights
-- N(0, sqrt(2 / (fan_in + fan_out))), biases N(0, sqrt(1 / fan_out)), tables
-- U(-sqrt(1 / rows), sqrt(1 / rows)).
local ember = require 'ember'
local nn = ember.nn

local function sizes(name, v)
  if type(v) == 'table' then return v end
  if type(v) ~= 'string' then error(string.format('dlrm: %s must be a list or a string like "13-512-256", got %s',
      name, tostring(v)), 0) end
  local out = {}
  for x in v:gmatch('[^-]+') do
    local n = tonumber(x)
    if not n or n < 1 or n ~= math.floor(n) then
      error(string.format('dlrm: %s holds %q, expected positive integers joined by "-"', name, x), 0)
    end
    out[#out + 1] = n
  end
  if #out == 0 then error(string.format('dlrm: %s is empty', name), 0) end
  return out
end

-- Linear layers with ReLU between and after them; the last activation is a sigmoid when
-- sigmoid_last (DLRM's sigmoid_top), none when `bare`.
local function mlp(ln, sigmoid_last, bare)
  local layers = {}
  for i = 1, #ln - 1 do
    local fc = nn.Linear(ln[i], ln[i + 1])
    ember.no_grad(function()
      fc.weight:normal_(0, math.sqrt(2 / (ln[i] + ln[i + 1])))
      fc.bias:normal_(0, math.sqrt(1 / ln[i + 1]))
    end)
    layers[#layers + 1] = fc
    if i < #ln - 1 or not bare then
      layers[#layers + 1] = (i == #ln - 1 and sigmoid_last) and nn.Sigmoid() or nn.ReLU()
    end
  end
  return nn.Sequential(layers)
end

local DLRM = nn.Module:extend('DLRM')

function DLRM:init(args)
  args = args or {}
  local bot = sizes('arch_mlp_bot', args.arch_mlp_bot or '13-512-256-64-16')
  local top = sizes('arch_mlp_top', args.arch_mlp_top or '512-256-1')
  local tables = sizes('table_sizes', args.table_sizes or args.arch_embedding_size or '1000-1000-1000')
  local m = args.arch_sparse_feature_size or bot[#bot]
  if bot[#bot] ~= m then
    error(string.format('dlrm: the bottom MLP ends in %d but the embedding dimension is %d', bot[#bot], m), 0)
  end
  local op = args.arch_interaction_op or 'dot'
  local itself = args.arch_interaction_itself or false
  local n = #tables + 1
  local num_int = op == 'dot' and m + (itself and n * (n + 1) / 2 or n * (n - 1) / 2) or m * n
  local top_in = { num_int }
  for _, s in ipairs(top) do top_in[#top_in + 1] = s end
  self.num_tables, self.dim = #tables, m
  self.bot = mlp(bot, false)
  local embeddings = args.embeddings or 'local'
  if embeddings ~= 'local' and embeddings ~= 'sharded' and embeddings ~= 'batched' then
    error(string.format("dlrm: embeddings must be 'local', 'batched' or 'sharded', got %s", tostring(embeddings)), 0)
  end
  local function init_table(w, rows) w:uniform_(-math.sqrt(1 / rows), math.sqrt(1 / rows)) end
  if embeddings == 'batched' then
    self.batched = true
    self.emb = nn.TableBatchedEmbeddingBags(tables, m, { mode = args.mode or 'sum', sparse = args.sparse ~= false,
      init = function(w, t) init_table(w, tables[t]) end })
  elseif embeddings == 'sharded' then
    self.sharded = true
    self.emb = nn.ShardedEmbeddingBags(tables, m, { mode = args.mode or 'sum', sparse = args.sparse ~= false,
      group = args.group, init = function(w, t) init_table(w, tables[t]) end })
  else
    local bags = {}
    for i, rows in ipairs(tables) do
      local bag = nn.EmbeddingBag(rows, m, { mode = args.mode or 'sum', sparse = args.sparse ~= false })
      ember.no_grad(function() init_table(bag.weight, rows) end)
      bags[i] = bag
    end
    self.emb = nn.Sequential(bags)   -- a container: children '0', '1', ... as DLRM's emb_l
  end
  self.interaction = nn.Interaction { op = op, self_interaction = itself }
  self.top = mlp(top_in, not args.logits, args.logits)
end

function DLRM:forward(dense, sparse)
  if type(sparse) ~= 'table' or #sparse ~= self.num_tables then
    error(string.format('DLRM: expected %d sparse features (one {indices, offsets} per table), got %s',
      self.num_tables, type(sparse) == 'table' and tostring(#sparse) or type(sparse)), 0)
  end
  local x = self.bot(dense)
  if self.sharded or self.batched then return self.top(self.interaction(x, self.emb(sparse))) end
  local pooled = {}
  for i, feature in ipairs(sparse) do
    local bag = self.emb[i]
    if ember.is_tensor(feature) then pooled[i] = bag(feature)
    else pooled[i] = bag(feature[1], feature[2]) end
  end
  return self.top(self.interaction(x, pooled))
end

-- The parameters of the tables (give them a sparse optimizer) and the rest (the MLPs).
function DLRM:sparse_parameters()
  if self.sharded or self.batched then return self.emb:parameters() end   -- held tables; the one batched weight
  local out = {}
  for i = 1, self.num_tables do out[i] = self.emb[i].weight end
  return out
end
function DLRM:dense_parameters()
  local out = {}
  for _, p in ipairs(self.bot:parameters()) do out[#out + 1] = p end
  for _, p in ipairs(self.top:parameters()) do out[#out + 1] = p end
  return out
end

return function(args) return DLRM(args) end
