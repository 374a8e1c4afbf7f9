-- A model file for pipelines (model: {file: models/mlp.lua, args: {...}}) and scripts
-- (require('ember.pipeline.model').from_file('pipelines/models/mlp.lua', {...})): it returns
-- a function from the args table to an nn.Module.
local nn = require('ember').nn

return function(args)
  local inputs, hidden, classes = args.inputs or 2, args.hidden or 64, args.classes or 3
  local layers = { nn.Linear(inputs, hidden), nn.ReLU() }
  for _ = 2, args.depth or 2 do
    layers[#layers + 1] = nn.Linear(hidden, hidden)
    layers[#layers + 1] = nn.ReLU()
  end
  layers[#layers + 1] = nn.Linear(hidden, classes)
  return nn.Sequential(layers)
end
