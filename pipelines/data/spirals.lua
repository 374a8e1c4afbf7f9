-- A synthetic dataset for pipelines/spirals.yaml: 3000 points on three interleaved spiral
-- arms in the plane (x: float32 [2]; y: the arm, a class 1..3), a fixed function of the
-- sample's number, so every reader process and every run sees the same points.
local ember = require 'ember'

local N, ARMS = 3000, 3
local per_arm = N / ARMS

-- A value in [-1, 1) from (i, j), the same on every machine.
local function noise(i, j)
  local v = math.sin(i * 12.9898 + j * 78.233) * 43758.5453
  return 2 * (v - math.floor(v)) - 1
end

local ds = {}
function ds:size() return N end
function ds:get_batch(ids)
  local xs, ys = {}, {}
  for k = 1, ids:numel() do
    local i = ids[k]:item() - 1
    local arm = i % ARMS
    local r = math.floor(i / ARMS) / per_arm                 -- 0..1 along the arm
    local theta = arm * 2 * math.pi / ARMS + r * 3.5 + 0.15 * noise(i, 1)
    xs[k] = { r * math.cos(theta), r * math.sin(theta) }
    ys[k] = arm + 1
  end
  return { x = ember.tensor(xs), y = ember.tensor(ys, { dtype = 'int64' }) }
end
return ds
