-- ember.nn: modules (nn.Module and the standard layers), nn.functional, nn.init and
-- nn.utils, after torch.nn. See module.lua for writing a module of your own.
--
--   local nn = ember.nn
--   local model = nn.Sequential{ nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10) }
--   local loss = nn.functional.cross_entropy(model(x), y)   -- y: 1-based class indices
local ember = require 'ember'

local nn = {}
nn.init = require('ember.nn.initializers')(ember)
nn.functional = require('ember.nn.functional')(ember, nn)
nn.Module = require('ember.nn.module')(ember, nn)
require('ember.nn.layers')(ember, nn)
nn.utils = require('ember.nn.utils')(ember, nn)
return nn
