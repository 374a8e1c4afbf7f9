-- Adagrad and row-wise Adagrad, the optimizers of recommendation models (loaded by
-- lua/ember/optim.lua, which hands over its base class and helpers).
--
--   local opt = ember.optim.Adagrad(params, {lr = 1e-2, lr_decay = 0, weight_decay = 0,
--                                           initial_accumulator_value = 0, eps = 1e-10})
--   local opt = ember.optim.RowWiseAdagrad(tables, {lr = 1e-2, eps = 1e-10})
--
-- Adagrad is PyTorch's (torch.optim.Adagrad): per element s += g^2,
-- w -= clr * g / (sqrt(s) + eps), clr = lr / (1 + (step - 1) * lr_decay). RowWiseAdagrad
-- keeps one accumulator per row, as DLRM's and FBGEMM's embedding optimizers:
-- s[r] += mean(g[r]^2), w[r] -= clr * g[r] / (sqrt(s[r]) + eps); its state is [rows], 1/D
-- of Adagrad's. Both take dense and row-sparse gradients (ember.SparseGrad); with a sparse
-- one only the rows it names are read or written, state included. weight_decay needs dense
-- gradients (PyTorch refuses it with sparse ones). Parameters are updated one C call each.
-- State in checkpoints: state.<i>.sum and state.<i>.step (Optimizer:state_dict).
local ember = require 'ember'
local I = require 'ember.internal'
local C = I.C
local throw = I.throw

return function(optim, base)
  local Optimizer, new_optimizer = base.Optimizer, base.new_optimizer

  local function make(name, rule, defaults, state_shape)
    local cls = setmetatable({}, { __index = Optimizer })
    cls.__index = cls
    cls.option_names = {}
    for k in pairs(defaults) do cls.option_names[#cls.option_names + 1] = k end
    table.sort(cls.option_names)
    cls.state_names = { 'sum' }
    cls.type_name = name
    cls.state_shape = state_shape

    function cls.check_group(op, g)
      base.need_numbers(op, g, { 'lr', 'lr_decay', 'eps', 'weight_decay', 'initial_accumulator_value' })
      if not (g.lr_decay >= 0) then throw(string.format('%s: lr_decay is %g, expected >= 0', op, g.lr_decay)) end
      if not (g.initial_accumulator_value >= 0) then
        throw(string.format('%s: initial_accumulator_value is %g, expected >= 0', op, g.initial_accumulator_value))
      end
      -- an update of no rows checks lr, eps and weight_decay in the runtime
      local probe = ember.zeros(0, 1)
      base.check_hyper(op, C.em_optim_rows(rule, probe, probe, nil,
        rule == C.EM_ROWS_ROWWISE_ADAGRAD and ember.zeros(0) or probe, g.lr, g.eps, g.weight_decay, 0))
    end

    optim[name] = function(params, opts) return new_optimizer(cls, name, params, opts, defaults) end

    function cls:step()
      for gi, g in ipairs(self.param_groups) do
        for i, p in ipairs(g.params) do
          local dense, sparse = C.em_grad(p), C.em_grad_sparse(p)
          if dense ~= nil then dense = I.wrap(dense) end
          if sparse ~= nil then sparse = I.own_sparse_grad(sparse) end
          if dense ~= nil or sparse ~= nil then
            local st = g.state[i]
            if not st then
              local shape = state_shape and state_shape(self, 'sum', p) or p.shape
              local sum = ember.full(shape, g.initial_accumulator_value, { dtype = p.dtype, device = p.device })
              st = { step = 0, sum = sum }
              g.state[i] = st
            end
            st.step = st.step + 1
            local clr = g.lr / (1 + (st.step - 1) * g.lr_decay)
            local status = C.em_optim_rows(rule, p, dense, sparse, st.sum, clr, g.eps, g.weight_decay,
              g.maximize and 1 or 0)
            if status ~= 0 then
              st.step = st.step - 1
              throw(string.format('%s: parameter %d of group %d: %s', name, i, gi, I.last_error()))
            end
          end
        end
      end
    end
    return cls
  end

  make('Adagrad', C.EM_ROWS_ADAGRAD,
    { lr = 1e-2, lr_decay = 0, weight_decay = 0, initial_accumulator_value = 0, eps = 1e-10, maximize = false })
  make('RowWiseAdagrad', C.EM_ROWS_ROWWISE_ADAGRAD,
    { lr = 1e-2, lr_decay = 0, weight_decay = 0, initial_accumulator_value = 0, eps = 1e-10, maximize = false },
    function(_, _, p) return { p.shape[1] } end)
end
