-- ember.pipeline.reader: `ember reader`, a data reader process (lua/ember/data/worker.lua)
-- that may take its dataset from a pipeline file's data: section. Reading pipeline files
-- is the job layer's part, so the library's worker gets it from here.
local worker = require 'ember.data.worker'

local M = {}

function M.main(argv)
  return worker.main(argv, function(path, overrides) return require('ember.pipeline').load(path, overrides) end)
end

return M
