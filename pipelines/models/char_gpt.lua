-- nanoGPT's character model as a model file (pipelines/char_gpt.yaml, examples/char_gpt.lua,
-- examples/sample.lua): token + position embeddings, pre-norm transformer blocks
-- (nn.TransformerEncoderLayer with norm_first, GELU, causal fused attention), a final
-- LayerNorm and an output layer tied to the token embedding.
-- ids [B, T] (T <= block) -> logits [B, T, vocab_size].
--   args: vocab_size (filled in by the pipeline from the tokenizer), block = 64, layers = 4,
--         heads = 4, embed = 128, dropout = 0, bias = false (nanoGPT's default)
-- Initialisation is nanoGPT's: weights normal(0, 0.02), the blocks' output projections
-- normal(0, 0.02 / sqrt(2 layers)), biases zero.
local ember = require 'ember'
local nn = ember.nn
local init = nn.init

return function(args)
  local V = assert(args.vocab_size, 'char_gpt: args.vocab_size is required')
  local block, L, E = args.block or 64, args.layers or 4, args.embed or 128
  local heads, p, bias = args.heads or 4, args.dropout or 0, args.bias == true
  local Model = nn.Module:extend('CharGPT')
  function Model:init()
    self.block_size = block   -- examples/sample.lua keeps at most this many tokens of context
    self.wte = nn.Embedding(V, E)
    self.wpe = nn.Embedding(block, E)
    self.drop = nn.Dropout(p)
    local blocks = {}
    for i = 1, L do
      blocks[i] = nn.TransformerEncoderLayer(E, heads, { dim_feedforward = 4 * E, dropout = p, activation = 'gelu',
        batch_first = true, norm_first = true, bias = bias })
    end
    self.h = nn.ModuleList(blocks)
    self.ln_f = nn.LayerNorm(E, { bias = bias })
    self.lm_head = nn.Linear(E, V, { bias = false })
    self.lm_head.weight = self.wte.weight   -- tied: one parameter, both uses
    for _, m in ipairs(self:modules()) do
      if m.__name == 'Linear' or m.__name == 'Embedding' then init.normal_(m.weight, 0, 0.02) end
      if m.__name == 'Linear' and m.bias then init.zeros_(m.bias) end
      if m.__name == 'MultiheadAttention' then
        init.normal_(m.in_proj_weight, 0, 0.02)
        if m.in_proj_bias then init.zeros_(m.in_proj_bias) end
      end
    end
    for _, b in ipairs(blocks) do
      init.normal_(b.self_attn.out_proj.weight, 0, 0.02 / math.sqrt(2 * L))
      init.normal_(b.linear2.weight, 0, 0.02 / math.sqrt(2 * L))
    end
  end
  function Model:forward(idx)
    local T = idx.shape[2]
    assert(T <= block, string.format('char_gpt: %d tokens, more than the block size %d', T, block))
    local pos = ember.arange(1, T + 1, { dtype = 'int64' })
    local x = self.drop(self.wte(idx) + self.wpe(pos))
    for i = 1, L do x = self.h[i](x, { is_causal = true }) end
    return self.lm_head(self.ln_f(x))
  end
  return Model()
end
