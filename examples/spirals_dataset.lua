-- examples/spirals_dataset.lua: a dataset written in Lua, as ember's reader processes load it
-- (examples/custom_dataset.lua trains on it). The file returns a function of the loader's
-- dataset_options that returns the dataset: a table with size() and get(index, rng).
--
-- Three interleaved spirals in the plane. Sample i belongs to class (i - 1) % 3 + 1; where it
-- lies along its arm and its noise come from rng, the sample's own generator, keyed by (seed,
-- epoch, i): every epoch draws fresh points, the same ones whichever reader makes them, so
-- runs repeat exactly. get runs in a reader process; only the batches travel to the trainer.
local ember = require 'ember'
local ffi = require 'ffi'
pcall(ffi.cdef, 'int getpid(void);')

return function(options)
  local n, noise = options.n or 3000, options.noise or 0.1
  return {
    size = function() return n end,
    -- one sample: a table of tensors (or numbers), of the same shapes for every index
    get = function(self, i, rng)
      local class = (i - 1) % 3 + 1
      local t = rng:random()                                  -- [0, 1): along the arm
      local angle = 2 * math.pi * (class - 1) / 3 + 4 * t + noise * rng:normal()
      local r = 0.1 + t + noise * rng:normal()
      return {
        x = ember.tensor({ r * math.cos(angle), r * math.sin(angle) }),
        y = class,
        reader = ffi.C.getpid(),                              -- the process that made it
      }
    end,
  }
end
