-- ember.nn: modules (nn.Module and the standard layers), nn.functional, nn.init and
-- nn.utils, after torch.nn. See module.lua for writing a module of your own.
--
--   local nn = ember.nn
--   local model = nn.Sequential{ nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10) }
--   local loss = nn.functional.cross_entropy(model(x), y)   -- y: 1-based class indices
local nn = {}
nn.init = require 'ember.nn.initializers'
nn.functional = require 'ember.nn.functional'
for _, part in ipairs { 'ember.nn.module', 'ember.nn.layers', 'ember.nn.containers', 'ember.nn.recurrent',
  'ember.nn.attention' } do
  for k, v in pairs(require(part)) do
    assert(nn[k] == nil, 'ember.nn: ' .. k .. ' is defined twice')
    nn[k] = v
  end
end
-- recommendation models: nn.Interaction and F.dot_interaction / F.cat_interaction
for k, v in pairs(require 'ember.nn.recsys') do
  assert(nn[k] == nil, 'ember.nn: ' .. k .. ' is defined twice')
  nn[k] = v
end
-- model-parallel tables: nn.ShardedEmbeddingBags, nn.shard_plan
for k, v in pairs(require 'ember.nn.sharded') do
  assert(nn[k] == nil, 'ember.nn: ' .. k .. ' is defined twice')
  nn[k] = v
end
nn.utils = require 'ember.nn.utils'
return nn
